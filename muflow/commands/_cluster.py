"""Options that say where a command's Dask work runs: ``--scheduler`` and, for commands
that connect themselves, ``--timeout`` and ``--workers``.

Kept apart from :mod:`muflow.commands._common` (data and kernel options) so that a command
takes exactly the cluster options it honours.
"""

from __future__ import annotations


def add_cluster_options(parser, *, scheduler_note, timeout=False, workers=False):
    """Add ``--scheduler ADDRESS`` (and optionally ``--timeout``, ``--workers``) to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    scheduler_note : str
        What the scheduler is used for in this command, shown in parentheses in its help.
    timeout : bool, default=False
        Add ``--timeout SECONDS`` (default 10), the wait for ``--scheduler`` to answer.
    workers : bool, default=False
        Add ``--workers N``, the size of the local cluster started without ``--scheduler``.
    """
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help=f"address of a running Dask scheduler, e.g. tcp://host:8786 "
                             f"({scheduler_note}); default: a LocalCluster on this machine")
    if timeout:
        parser.add_argument("--timeout", type=float, default=10.0,
                            help="seconds to wait for --scheduler to answer (default: 10)")
    if workers:
        parser.add_argument("--workers", type=int, metavar="N",
                            help="local cluster only: number of worker processes (default: one per core)")
