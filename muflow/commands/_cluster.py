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


def quiet_distributed(log_file=None, *, verbose=False):
    """Keep distributed's own logging (a lost scheduler prints 30-odd lines of
    ``distributed.client - ERROR`` traceback) off the console: into ``log_file`` (appended),
    or nowhere without one; ``verbose`` leaves it on stderr. The command's failure is then
    its one line."""
    import logging
    from pathlib import Path

    import distributed  # noqa: F401  (its import configures its loggers; override after)

    if verbose:
        return
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("distributed."):  # their own handlers: route them to the parent
            child = logging.getLogger(name)
            for handler in list(child.handlers):
                child.removeHandler(handler)
            child.propagate = True
    logger = logging.getLogger("distributed")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    logger.propagate = False
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
    else:
        logger.addHandler(logging.NullHandler())
