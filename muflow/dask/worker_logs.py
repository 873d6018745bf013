"""Log records that would reach stderr, moved into a file: in this process, and in the
worker processes of a LocalCluster it starts.

A command moves its log records into a file so that its console keeps the progress and
the failure's one line (:func:`muflow.commands._cluster.log_to_file`). A LocalCluster's
worker processes inherit the command's stderr, and ``silence_logs`` quiets only records
below ERROR: a worker that loses its scheduler while the cluster closes (a heartbeat sent
to a scheduler already gone) logged ``distributed.worker - ERROR`` with a
``CommClosedError`` traceback onto the console after the run's summary. Where this
process's records go to a file (:func:`move_stderr_records`), the LocalCluster that
:func:`muflow.dask.cluster.local_cluster` starts sends its workers' records there too
(:class:`FollowLogFile`, a worker plugin: a worker that the nanny restarts gets it again
from the scheduler). The worker processes append to the same file as this process, a
record at a time.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

#: The attribute that marks the file handler of :func:`move_stderr_records`.
MARK = "muflow_log_file"


def _loggers() -> list:
    """The root logger and every named logger of this process."""
    return [logging.getLogger()] + [logging.getLogger(name)
                                    for name in list(logging.root.manager.loggerDict)]


def move_stderr_records(log_file) -> tuple[logging.Handler, list]:
    """In this process: every log handler that writes to stderr, on the root logger and on
    every named logger, replaced by one handler appending to ``log_file`` (created with its
    folder). Returns ``(file_handler, moved)``, ``moved`` the ``(logger, handler)`` pairs
    replaced. Call it once the libraries whose handlers it moves are imported (their
    import adds them)."""
    path = Path(log_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    setattr(to_file, MARK, str(path))
    moved = []
    for logger in _loggers():
        for handler in list(logger.handlers):
            if getattr(handler, "stream", None) is not sys.stderr:
                continue
            logger.removeHandler(handler)
            if to_file not in logger.handlers:
                logger.addHandler(to_file)
            moved.append((logger, handler))
    return to_file, moved


def process_log_file() -> str | None:
    """The file this process's stderr records were moved to (:func:`move_stderr_records`),
    or None where they still reach stderr."""
    for logger in _loggers():
        for handler in getattr(logger, "handlers", ()):
            path = getattr(handler, MARK, None)
            if path is not None:
                return path
    return None


class FollowLogFile(WorkerPlugin):
    """A worker plugin: the worker process's stderr records go to ``path``
    (:func:`move_stderr_records`), as its client's process's do."""

    name = "muflow-log-file"

    def __init__(self, path):
        self.path = str(path)

    def setup(self, worker):
        if process_log_file() != self.path:  # once a process
            move_stderr_records(self.path)


def workers_follow_log_file(cluster) -> str | None:
    """Where this process's records go to a file, make ``cluster``'s workers send theirs
    there too (:class:`FollowLogFile`, registered with its scheduler). Returns the file, or
    None where this process logs to stderr (nothing is done)."""
    path = process_log_file()
    if path is None:
        return None
    from distributed import Client

    with Client(cluster, set_as_default=False) as client:
        client.register_plugin(FollowLogFile(path))
    return path


__all__ = ["FollowLogFile", "MARK", "move_stderr_records", "process_log_file",
           "workers_follow_log_file"]
