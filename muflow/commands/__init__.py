"""Subcommands of ``python -m muflow``: one module each, ``add_parser`` and ``run``."""
