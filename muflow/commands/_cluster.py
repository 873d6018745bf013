"""Options that say where a command's Dask work runs: ``--scheduler`` and, for commands
that connect themselves, ``--timeout`` and ``--workers``.

Kept apart from :mod:`muflow.commands._common` (data and kernel options) so that a command
takes exactly the cluster options it honours.
"""

from __future__ import annotations

import contextlib
import shlex
import sys


def add_cluster_options(parser, *, scheduler_note, timeout=False, workers=False,
                        default_note="a LocalCluster on this machine"):
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
    default_note : str
        What the command does without ``--scheduler``.
    """
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help=f"address of a running Dask scheduler, e.g. tcp://host:8786 "
                             f"({scheduler_note}); default: {default_note}")
    if timeout:
        parser.add_argument("--timeout", type=float, default=10.0,
                            help="seconds to wait for --scheduler to answer (default: 10)")
    if workers:
        parser.add_argument("--workers", type=int, metavar="N",
                            help="local cluster only: number of worker processes (default: one per core)")


def log_to_file(log_file, *, verbose=False):
    """Send the log records that would reach stderr into ``log_file`` (appended): distributed's
    own (a lost scheduler prints 30-odd lines of ``distributed.client - ERROR`` traceback),
    Prefect's (a failed flow prints its task's and its own traceback) and any other
    library's. Prefect's own progress lines (below WARNING) go on to stdout. The command's
    failure is then its one line on stderr. ``verbose`` leaves logging as it is.

    Call it once the libraries whose logging it moves are imported: their import
    configures their loggers.
    """
    import logging

    import distributed  # noqa: F401  (its import configures its loggers; move them after)

    if verbose:
        return
    from muflow.dask.worker_logs import move_stderr_records

    # a LocalCluster started after this sends its workers' records there too
    # (muflow.dask.worker_logs)
    to_file, moved = move_stderr_records(log_file)
    for logger, handler in moved:
        if type(handler).__name__ == "PrefectConsoleHandler":  # its progress lines
            to_file.setFormatter(handler.formatter)  # names the flow and task runs
            progress = type(handler)(stream=sys.stdout)
            progress.setFormatter(handler.formatter)
            # Prefect's own lines: other libraries' records (distributed's INFO lines on
            # the scheduler and nannies) reach the root's handler too, and go to the file
            progress.addFilter(lambda record: record.levelno < logging.WARNING
                               and record.name.split(".")[0] == "prefect")
            logger.addHandler(progress)


@contextlib.contextmanager
def hint_when_interrupted(args, kept, *, resume=True):
    """SIGINT or SIGTERM (:mod:`muflow.signals`) in the block: its one line says what was
    kept (``kept()``, or None for nothing) and the command that continues the work (with
    ``--resume``, or, ``resume=False``, the same command: ``gram`` continues a partial store
    by itself)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        said = kept()
        if said:
            from muflow.cli import set_hint

            set_hint(exc, continue_hint(args, said, resume=resume))
        raise


def rerun_command(args, *, resume=True) -> str:
    """The command line the user gave (``args.argv``, set by :func:`muflow.cli.main`), as
    ``python -m muflow ...``, with ``--resume`` at its end or, ``resume=False``, without it."""
    argv = [a for a in getattr(args, "argv", sys.argv[1:]) if a != "--resume"]
    return "python -m muflow " + shlex.join(argv + ["--resume"] * bool(resume))


def continue_hint(args, kept=None, *, resume=True) -> str:
    """What to do after a failure: ``kept`` (what was saved, or None) and the command that
    continues the work (``--resume`` when something was kept and ``resume``, the same
    command otherwise)."""
    if kept is None:
        return f"nothing was kept; rerun with `{rerun_command(args, resume=False)}`"
    return f"{kept}; continue with `{rerun_command(args, resume=resume)}`"


def scheduler_gone(client, exc, *, wait=10.0) -> bool:
    """Whether ``exc`` was raised because ``client``'s scheduler went away. A cluster that
    closes loses its workers first: distributed may raise for a lost worker (``Worker
    holding Actor was lost``) while the client still says "running", so an error that is
    not muflow's own waits up to ``wait`` seconds for the scheduler to stop answering."""
    import time

    from muflow.exceptions import SchedulerLostError
    from muflow.exceptions import MuflowError, MuflowInputError

    if isinstance(exc, SchedulerLostError) or getattr(client, "status", "running") != "running":
        return True
    if isinstance(exc, (MuflowError, MuflowInputError, ValueError, TypeError)):
        return False
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            client.sync(client.scheduler.identity, callback_timeout=2)
        except Exception:  # noqa: BLE001  (whatever a closed comm raises: it is gone)
            return True
        if getattr(client, "status", "running") != "running":
            return True
        time.sleep(0.2)
    return False


@contextlib.contextmanager
def one_line_if_scheduler_lost(client, args, *, work, kept, log_file, resume=True):
    """In the block, whatever a lost scheduler raises (:func:`scheduler_gone`) becomes one
    :class:`muflow.exceptions.SchedulerLostError` whose hint continues the work:
    ``kept()``, called then, says what was saved (:func:`continue_hint`, ``resume`` as
    there). ``log_file`` (None where distributed logs to stderr) receives the traceback."""
    from muflow.exceptions import lost_scheduler_error

    try:
        yield
    except Exception as exc:
        if not scheduler_gone(client, exc):
            raise
        where_logged = ""
        if log_file is not None:
            _keep_traceback(log_file, exc, work)
            where_logged = f" (Dask's log: {log_file})"
        raise lost_scheduler_error(client, work=work, next_step=(
            f"start the scheduler and its workers again; "
            f"{continue_hint(args, kept(), resume=resume)}{where_logged}")) from None


def _keep_traceback(log_file, exc, work):
    """Append the traceback that the one-line failure replaces to ``log_file``: distributed
    logs the lost connection only when its own timers notice it, which a loaded machine may
    not reach before the command ends, so the log always says what ``work`` raised."""
    import datetime
    import traceback

    try:
        with open(log_file, "a", encoding="utf-8") as log:
            log.write(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S} muflow ERROR {work} ended "
                      f"because the Dask scheduler went away; what it raised:\n")
            log.writelines(traceback.format_exception(exc))
    except OSError:  # the one-line failure still names the scheduler and the next step
        pass
