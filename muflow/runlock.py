"""One run directory, one writer: an exclusive ``flock`` on ``<run dir>/.muflow.lock``.

``python -m muflow run --out DIR`` holds the lock from before it checks DIR until it
exits. A second run on the same DIR is refused in one line while the first holds it
(two runs would interleave ``stages.log`` and race on ``config.json``). The operating
system releases a ``flock`` when its holder's last descriptor closes, so a run that is
killed (``SIGKILL`` included) leaves a lock file that no longer holds anyone out: a
later run on that DIR, e.g. ``--resume``, proceeds. The file records the holder's pid
for the refusal's message only; the lock itself is the ``flock``.

POSIX only (``fcntl``); the lock is advisory and, on network file systems, as reliable as
their ``flock`` (NFSv4 and Lustre forward it; some FUSE file systems do not).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from muflow.exceptions import MuflowInputError

LOCK_NAME = ".muflow.lock"


class RunDirBusyError(MuflowInputError):
    """Another process holds the run directory."""


@contextlib.contextmanager
def hold_run_dir(run_dir, *, command: str = "muflow run"):
    """Hold ``run_dir``'s lock for the ``with`` block (the directory is created).

    Raises
    ------
    RunDirBusyError
        When another process holds it; the message names the directory and the holder.
    """
    run_dir = Path(run_dir)
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise MuflowInputError(f"{run_dir} is a file, not a directory; choose a directory for "
                               "--out")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise RunDirBusyError(
                f"{run_dir} is in use by another `{command}` (pid {holder}); wait for it to "
                "finish, or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the flock


def is_lock_file(path) -> bool:
    """Whether ``path`` is a run directory's lock file (not a run's output)."""
    return Path(path).name == LOCK_NAME
