"""How much memory this process may still use, and whether a stored Gram fits in it.

A stored K of n samples takes ``n**2 * itemsize`` bytes: 2.1 GB in float32 for a8a's 22,696
rows, 37.3 GiB for 100,000 rows, 4 TB for a million. :func:`check_gram_fits` refuses one
that cannot fit *before* anything is allocated (otherwise NumPy's ``Unable to allocate``
traceback, or the kernel's OOM killer, ends the fit) and names the alternative: rows of K
computed on demand (:class:`muflow.kernel_rows.KernelRows`, ``gram="rows"`` of
:func:`muflow.backends.gram_operator`), whose memory is the solvers' row cache.
:func:`choose_gram` is the "auto" rule between the two.

The memory available is the smallest of what the operating system reports
(``MemAvailable`` of ``/proc/meminfo``, Linux's estimate of what can be allocated without
swapping; psutil's ``virtual_memory().available`` where there is no ``/proc``) and what the
process's control group still allows (cgroup v2 ``memory.max`` minus ``memory.current``,
v1 ``memory.limit_in_bytes`` minus ``memory.usage_in_bytes``, reclaimable inactive file
pages not counted as used, as container runtimes do) and what its address-space limit
(``ulimit -v``) still leaves. :func:`cache_rows_that_fit` caps the solvers' row cache
(``cache_size``) to that room, with a warning that names ``cache_size``. On a Dask cluster
each worker has its own limit (:func:`worker_memory_limits`).
"""

from __future__ import annotations

import os

import numpy as np

from muflow.dask.scheduler_workers import scheduler_workers
from muflow.exceptions import CacheCappedWarning, MuflowInputError, lost_scheduler_error

GIB = 2**30

#: "auto" stores K when it takes at most this share of the available memory: the rest is
#: for X, the solver's vectors, the copies a fit makes and the other processes.
STORED_SHARE = 0.5

GRAM_CHOICES = ("auto", "stored", "rows")


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if text in ("", "max"):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _stat_value(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _meminfo_available(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def _cgroup_available(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> int | None:
    """What the process's cgroup still allows, or None where it sets no limit."""
    v2_path, v1_path = None, None
    try:
        with open(proc_cgroup) as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) != 3:
                    continue
                if parts[0] == "0" and parts[1] == "":
                    v2_path = parts[2]
                elif "memory" in parts[1].split(","):
                    v1_path = parts[2]
    except OSError:
        pass
    candidates = []
    if v2_path is not None:
        for base in (os.path.join(root, v2_path.lstrip("/")), root):
            limit = _read_int(os.path.join(base, "memory.max"))
            if limit is not None:
                used = _read_int(os.path.join(base, "memory.current")) or 0
                used -= _stat_value(os.path.join(base, "memory.stat"), "inactive_file")
                candidates.append(limit - max(used, 0))
                break
    if v1_path is not None:
        mount = os.path.join(root, "memory")
        for base in (os.path.join(mount, v1_path.lstrip("/")), mount):
            limit = _read_int(os.path.join(base, "memory.limit_in_bytes"))
            if limit is not None:
                # a v1 group without a limit reports a number near 2**63
                if limit < 2**60:
                    used = _read_int(os.path.join(base, "memory.usage_in_bytes")) or 0
                    used -= _stat_value(os.path.join(base, "memory.stat"), "total_inactive_file")
                    candidates.append(limit - max(used, 0))
                break
    return max(0, min(candidates)) if candidates else None


def _address_space_available() -> int | None:
    """Room under the process's address-space limit (``RLIMIT_AS``, ``ulimit -v``) beyond
    its current virtual size, or None where it sets no limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return None
    try:
        with open("/proc/self/statm") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
    return max(0, soft - size)


def available_memory_bytes() -> int | None:
    """Bytes this process can still allocate: the smallest of the system's
    ``MemAvailable``, the room left under its cgroup limit and the room under its
    address-space limit; None where none can be read."""
    found = [v for v in (_meminfo_available(), _cgroup_available(), _address_space_available())
             if v is not None]
    return min(found) if found else None


def worker_memory_limits(client) -> dict:
    """``{address: bytes}``: each worker's memory limit on the cluster of ``client`` (0 for a
    worker without one); :class:`muflow.exceptions.SchedulerLostError` when the scheduler
    is gone."""
    if getattr(client, "status", "running") not in ("running", "connecting", "newly-created"):
        raise lost_scheduler_error(client)
    try:
        info = scheduler_workers(client)
    except (KeyError, OSError, TimeoutError) as exc:
        raise lost_scheduler_error(client) from exc
    return {addr: (w.get("memory_limit") or 0) for addr, w in info.items()}


def gram_bytes(n: int, dtype) -> int:
    """Bytes of a stored n x n Gram matrix of ``dtype``."""
    return int(n) * int(n) * np.dtype(dtype).itemsize


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB"


def check_gram_fits(n: int, dtype, *, available: int | None = None) -> None:
    """Refuse a stored n x n Gram of ``dtype`` that the available memory cannot hold.

    Called before the Gram is allocated, so that a fit that cannot succeed stops at once
    with what to do instead.

    Parameters
    ----------
    n : int
    dtype : numpy dtype or str
    available : int, optional
        Bytes available; default :func:`available_memory_bytes` (where it cannot be read,
        nothing is refused).

    Raises
    ------
    MuflowInputError
        Giving the size needed, the memory available and the alternative.
    """
    needed = gram_bytes(n, dtype)
    if available is None:
        available = available_memory_bytes()
    if available is None or needed <= available:
        return
    raise MuflowInputError(
        f"a stored Gram matrix of {n:,} samples in {np.dtype(dtype).name} needs {_gib(needed)} "
        f"and {_gib(available)} of memory is available; compute rows of K on demand instead: "
        'gram="rows" (muflow.backends.gram_operator) with a subset solver (SVC(solver="working_set") '
        'or solver="smo"), whose memory is the row cache (cache_mb), or fewer samples'
    )


def choose_gram(n: int, dtype, requested: str = "auto", *, available: int | None = None) -> str:
    """``"stored"`` or ``"rows"`` for an n x n Gram of ``dtype``.

    ``"auto"`` stores K when it takes at most :data:`STORED_SHARE` of the available memory
    (or when the available memory cannot be read) and computes rows on demand otherwise;
    ``"stored"`` is checked by :func:`check_gram_fits` (refused, before any allocation,
    when it does not fit); ``"rows"`` is taken as asked.
    """
    if requested not in GRAM_CHOICES:
        raise MuflowInputError(f"gram must be one of {', '.join(GRAM_CHOICES)}, got {requested!r}")
    if requested == "rows":
        return "rows"
    if available is None:
        available = available_memory_bytes()
    if requested == "stored":
        check_gram_fits(n, dtype, available=available)
        return "stored"
    return "stored" if stored_fits(gram_bytes(n, dtype), available) else "rows"


def stored_fits(nbytes: int, available: int | None = None) -> bool:
    """Whether a stored K of ``nbytes`` takes at most :data:`STORED_SHARE` of ``available``
    (default :func:`available_memory_bytes`; True when the available memory cannot be
    read): the "auto" rule of :func:`choose_gram`."""
    if available is None:
        available = available_memory_bytes()
    return available is None or nbytes <= STORED_SHARE * available


__all__ = ["available_memory_bytes", "check_gram_fits", "choose_gram", "gram_bytes", "GRAM_CHOICES",
           "STORED_SHARE", "stored_fits", "worker_memory_limits"]


#: A row cache may take at most this share of the memory available when it is made: the
#: rest is for X, the solver's vectors and the rows a step computes.
CACHE_SHARE = 0.5

#: Caches smaller than this are not checked (reading the limits costs more than they do).
CACHE_CHECK_BYTES = 64 * 2**20

_warned_caps: set = set()


def cache_rows_that_fit(rows: int, row_bytes: int, cache_mb: float, *,
                        available: int | None = None) -> int:
    """How many of ``rows`` cache rows of ``row_bytes`` each to allocate: all of them when
    they fit in :data:`CACHE_SHARE` of the memory this process may still use
    (:func:`available_memory_bytes`: cgroup, address-space limit, free memory), else as
    many as fit (two at least), with a :class:`muflow.exceptions.CacheCappedWarning` that
    names ``cache_size``, once per value. A cache larger than the process may hold ended
    in NumPy's "Unable to allocate" or the kernel's OOM killer, naming neither the cache
    nor its knob."""
    wanted = int(rows) * int(row_bytes)
    if wanted <= CACHE_CHECK_BYTES:
        return int(rows)
    room = available_memory_bytes() if available is None else available
    if room is None or wanted <= CACHE_SHARE * room:
        return int(rows)
    fit = max(2, int(CACHE_SHARE * room // max(int(row_bytes), 1)))
    if float(cache_mb) not in _warned_caps:
        _warned_caps.add(float(cache_mb))
        import warnings

        warnings.warn(
            f"cache_size={float(cache_mb):g} MB asks for a kernel row cache of "
            f"{wanted / 2**20:,.0f} MB, more than this process may use ({room / 2**20:,.0f} MB "
            f"available: free memory, cgroup and address-space limits); capped to "
            f"{fit * int(row_bytes) / 2**20:,.0f} MB; lower cache_size (--cache-size) to fit",
            CacheCappedWarning, stacklevel=4)
    return fit


def cache_allocation_error(nbytes: int, cache_mb: float, exc: BaseException) -> MemoryError:
    """The MemoryError of a row cache that could not be allocated, naming the knob."""
    return MemoryError(
        f"could not allocate the kernel row cache of {nbytes / 2**30:.2f} GiB "
        f"(cache_size={float(cache_mb):g} MB): lower cache_size (--cache-size), or n_jobs "
        f"(--n-jobs: each process holds its own cache) ({exc})")
