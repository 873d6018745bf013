"""One run directory, one writer: an exclusive ``flock`` on ``<run dir>/.muflow.lock``.

``python -m muflow run --out DIR`` holds the lock from before it checks DIR until it
exits. A second run on the same DIR is refused in one line while the first holds it
(two runs would interleave ``stages.log`` and race on ``config.json``). The operating
system releases a ``flock`` when its holder's last descriptor closes, so a run that is
killed (``SIGKILL`` included) leaves a lock file that no longer holds anyone out: a
later run on that DIR, e.g. ``--resume``, proceeds. The file records the holder's pid
for the refusal's message only; the lock itself is the ``flock``.

The Prefect flows (:mod:`muflow.flows.pipeline`) hold the same lock on their ``out_dir``
(two flow runs given one ``out_dir`` would race the same way). A holder may take the lock
again below itself: the ``run`` command holds it and calls the ``pipeline`` flow, which
finds it held by its own call stack (a context variable) and goes on.

POSIX only (``fcntl``); the lock is advisory and, on network file systems, as reliable as
their ``flock`` (NFSv4 and Lustre forward it; some FUSE file systems do not).
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import os
from pathlib import Path

from muflow.exceptions import MuflowInputError

LOCK_NAME = ".muflow.lock"
#: The run directories this call stack holds (resolved paths): taken again, they pass.
_HELD: contextvars.ContextVar[frozenset] = contextvars.ContextVar("muflow_held_run_dirs",
                                                                  default=frozenset())


class RunDirBusyError(MuflowInputError):
    """Another process holds the run directory."""


@contextlib.contextmanager
def hold_run_dir(run_dir, *, command: str = "muflow run", option: str = "--out",
                 holder: str | None = None):
    """Hold ``run_dir``'s lock for the ``with`` block (the directory is created); one that
    this call stack holds already passes (the ``run`` command's flow). The refusal names
    the holder as another ``command`` (or ``holder``, in words) and ``option``, what
    chooses another directory.

    Raises
    ------
    RunDirBusyError
        When another process holds it; the message names the directory and the holder.
    """
    run_dir = Path(run_dir)
    if os.path.lexists(run_dir) and not run_dir.is_dir():
        raise MuflowInputError(f"{run_dir} is a file, not a directory; choose a directory for "
                               f"{option}")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    key = str(run_dir.resolve())
    if key in _HELD.get():
        yield path
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise RunDirBusyError(
                f"{run_dir} is in use by another {holder or f'`{command}`'} (pid {pid}); wait "
                f"for it to finish, or choose another {option}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        token = _HELD.set(_HELD.get() | {key})
        try:
            yield path
        finally:
            _HELD.reset(token)
    finally:
        os.close(fd)  # releases the flock


def is_lock_file(path) -> bool:
    """Whether ``path`` is a run directory's lock file (not a run's output)."""
    return Path(path).name == LOCK_NAME
