"""Atomic writes: every file and directory muflow writes appears whole or not at all.

Each helper fills a temporary sibling (same directory, so the final ``os.replace`` is a
rename on one file system), makes it durable, and renames it into place. A failure at any
point removes the temporary and leaves whatever was at the target before untouched, so a
crashed run never leaves a half-written result that looks complete.

- :func:`atomic_path`: a context manager yielding a temporary path for writers that want a
  file name (``np.savez``, ``fig.savefig``, zarr); the one primitive the others use.
- :func:`write_text` / :func:`write_json`: the common cases.
- :func:`atomic_directory`: a directory filled by a callback (models, run records).
- :func:`check_writable`: a command's output place refused before its work, in one line,
  where nothing can be written (the write itself failed at the end, naming a temporary).

A target that is a link is followed: the file it names is replaced, the link stays. A
target that is no regular file (a FIFO, ``/dev/null``, ``/dev/stdout``) is written into,
as a shell's ``>`` does: a rename would put a file in its place.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator


def _fsync_directory(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (a no-op where directories can't be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path, *, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` when the block ends.

    ``suffix`` keeps an extension that a writer insists on (``".npz"``, ``".png"``). The
    file gets the permissions a plain ``open`` would give (``0o666`` less the umask).
    """
    path = Path(path)
    kind = _existing_kind(path)
    if kind == "special":  # a FIFO, a device, a pipe (/dev/stdout): written into, as `>` does
        yield path
        return
    if kind == "link":  # the file it names is replaced; the link stays
        path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{suffix}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _mode_after_umask(0o666))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _mode_after_umask(requested: int) -> int:
    """The mode ``open`` or ``mkdir`` would give for ``requested``: ``mkstemp`` and
    ``mkdtemp`` make their temporaries private (0o600, 0o700), and a result renamed into
    place keeping that mode could not be read by another user (a serving account)."""
    umask = os.umask(0)  # the only way to read it; set back at once
    os.umask(umask)
    return requested & ~umask


def _existing_kind(path: Path) -> str | None:
    """``"special"`` where ``path`` is (or links to) something other than a regular file or
    a directory, which a rename would replace (a FIFO, ``/dev/null``); ``"link"`` for a link
    to a file or to nothing yet; else None."""
    try:
        mode = os.stat(path).st_mode  # through links
    except (FileNotFoundError, NotADirectoryError):
        return "link" if path.is_symlink() else None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "special"
    return "link" if path.is_symlink() else None


def write_text(path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (newlines as given)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", newline="") as fh:
            fh.write(text)
    return Path(path)


def write_json(path, obj, *, default: Callable | None = None) -> Path:
    """Write ``obj`` as indented JSON (with a final newline) atomically."""
    return write_text(path, json.dumps(obj, indent=2, default=default) + "\n")


def atomic_directory(path, write_into: Callable[[Path], object]) -> Path:
    """Create directory ``path`` by filling a temporary sibling and renaming it.

    ``write_into(tmp_dir)`` writes the content. An existing ``path`` is replaced only after
    the new one is complete; on failure the temporary is removed and ``path`` is untouched.
    The directory gets the permissions a plain ``mkdir`` would give (``0o777`` less the
    umask); directories ``write_into`` makes inside it are its own to set.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        os.chmod(tmp, _mode_after_umask(0o777))
        write_into(tmp)
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_directory(path.parent)
    return path


def unwritable_error(directory, exc: OSError, option: str, what: str):
    """A directory nothing can be written in (permissions, an immutable or read-only file
    system) where ``what`` must be written, with the fix: another ``option``."""
    from muflow.exceptions import MuflowInputError

    other = "another cache directory (--cache-dir)" if option == "--cache-dir" else f"another {option}"
    return MuflowInputError(
        f"cannot write in {directory} ({exc.strerror or exc}), where {what} must be written; "
        f"choose {other}, or make it writable")


def check_writable(path, option: str, what: str, *, inside: bool = False) -> None:
    """Refuse, before a command's work, a local output that cannot be written: the
    directory a temporary sibling of ``path`` goes into (``inside``: ``path`` itself, a
    directory written into), or the nearest existing one above it, which the writers
    create the rest under, must take a new file (tried: permission bits do not tell an
    immutable directory, a read-only file system or root's rights). Raises
    :func:`unwritable_error` naming ``option``, or names a file above ``path`` where a
    directory must be. A URL, a special file written into (a FIFO, ``/dev/stdout``) and a
    file at ``path`` itself (the callers name that) are left alone."""
    from muflow.exceptions import MuflowInputError

    path = os.fspath(path)
    if "://" in path:
        return
    target = Path(os.path.abspath(path))
    if not inside:
        kind = _existing_kind(target)
        if kind == "special":
            return
        target = (Path(os.path.realpath(target)) if kind == "link" else target).parent
    elif os.path.lexists(target) and not target.is_dir():
        return
    while not os.path.lexists(target) and target.parent != target:
        target = target.parent
    if not target.is_dir():
        raise MuflowInputError(f"{option} {path}: {target} is a file, not a directory; choose "
                               f"another {option}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".muflow-write-check.", dir=target)
    except OSError as exc:  # EACCES, EPERM (an immutable directory), a read-only file system
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise
        raise unwritable_error(target, exc, option, what) from None
    os.close(fd)
    os.unlink(probe)
