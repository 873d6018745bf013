"""What the workers' memory allows a fit on the cluster: the row cache of X partitioned over
them (:mod:`muflow.dask.partitions`) that fits the smallest worker's memory limit, whether
the Gram store's streamed panels fit
(:func:`muflow.dask.store_operator.check_store_fits`), a wait on the workers' tasks that ends in
words when every worker stays paused for memory (:func:`completed_while_memory_allows`),
the one line for a fit whose workers kept dying, and the C allocator's thresholds that let
a worker reuse the memory it frees. Every refusal for memory names the fix the same way
(:func:`too_little_memory_error`)."""

from __future__ import annotations

import functools
import os
import time

import numpy as np
import scipy.sparse as sp

from muflow.dask.scheduler_workers import scheduler_workers
from muflow.exceptions import MuflowError


#: Share of a worker's memory limit that its partition plans to use (distributed pauses a
#: worker at 80 % of its limit and restarts it at 95 %)
WORKER_FRACTION = 0.6

#: A row cache holds at least this many rows of a working set
MIN_CACHE_ROWS = 64

#: A wait on the workers' tasks ends in :func:`too_little_memory_error` once every worker
#: has stayed paused (distributed pauses a worker at 80 % of its memory limit and runs none
#: of its tasks then) this many seconds with no task finishing
PAUSED_SECONDS = 30.0

_MB = 2.0**20

#: distributed's nanny starts its workers with this ``MALLOC_TRIM_THRESHOLD_`` (its
#: ``distributed.nanny.pre-spawn-environ``), so that they hand freed memory back to the
#: system at once. Setting it also pins glibc's mmap threshold at 128 KiB: every temporary
#: array above that is mapped afresh and its pages faulted in again, on every iteration of
#: a fit (docs/dask.md, "The workers' allocator").
DASK_TRIM_THRESHOLD = 65536

#: The thresholds (bytes) muflow's workers run with instead: the ceiling that glibc's own
#: dynamic thresholds reach in a process that sets none (mmap at 32 MiB, trim at twice that).
MALLOC_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": 32 << 20, "MALLOC_TRIM_THRESHOLD_": 64 << 20}

#: ``mallopt``'s parameter numbers (glibc's malloc.h: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD)
_MALLOPT_PARAMS = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_THRESHOLD_": -3}


def thresholds_to_replace(environ) -> dict:
    """:data:`MALLOC_THRESHOLDS` where ``environ`` (a process's environment, or the one a
    nanny gives its workers) holds distributed's trim threshold and no mmap threshold but
    muflow's own (a nanny takes the variables of the process that starts it over its
    configuration, so muflow's mmap threshold can meet distributed's trim threshold); empty
    where the user chose either, or where neither is set (glibc's dynamic thresholds work)."""
    trim, mmap = environ.get("MALLOC_TRIM_THRESHOLD_"), environ.get("MALLOC_MMAP_THRESHOLD_")
    if trim is None or str(trim) != str(DASK_TRIM_THRESHOLD):
        return {}
    if mmap is not None and str(mmap) != str(MALLOC_THRESHOLDS["MALLOC_MMAP_THRESHOLD_"]):
        return {}
    return dict(MALLOC_THRESHOLDS)


def reuse_freed_memory() -> dict:
    """On a worker: give this process's allocator :data:`MALLOC_THRESHOLDS` through
    ``mallopt`` where its environment holds distributed's default
    (:func:`thresholds_to_replace`), so that the temporaries of each iteration reuse freed
    memory instead of faulting in fresh pages. For the worker process's lifetime (a forked
    child inherits them), so done once however many tasks ask; a no-op without glibc.
    Returns what was set."""
    return dict(_set_thresholds())


@functools.cache
def _set_thresholds() -> dict:
    wanted = thresholds_to_replace(os.environ)
    if not wanted:
        return {}
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return {}
    return {name: value for name, value in wanted.items()
            if mallopt(_MALLOPT_PARAMS[name], value) == 1}


def cache_to_fit_workers(client, X, bounds, dtype, cache_mb: float, copy_bytes: int = 0) -> float:
    """The row cache (MB per worker) that fits the smallest worker's memory limit.

    A partition holds its rows of X twice (as given and prepared for the kernel), a copy of
    all of X where the workers get one (``copy_bytes``, :mod:`muflow.dask.row_blocks`), a
    dozen vectors of its rows and its row cache; with what the worker process holds once it has
    imported the partition's code (read from the worker), they must stay within
    :data:`WORKER_FRACTION` of the limit. A cache that does not fit is made smaller (with a
    warning naming both sizes); when not even :data:`MIN_CACHE_ROWS` rows fit, the fit is
    refused with the numbers and the fix. Workers without a limit take ``cache_mb`` as given.
    """
    import warnings

    tightest = tightest_worker(client)
    if tightest is None or not bounds:
        return cache_mb
    limit, used = tightest
    free = WORKER_FRACTION * limit - used
    n_total = bounds[-1][1]
    n_p = max(hi - lo for lo, hi in bounds)
    if sp.issparse(X):
        row_bytes = (X.data.nbytes + X.indices.nbytes) / max(X.shape[0], 1) + 8
    else:
        row_bytes = 8 * (X.shape[1] if len(X.shape) > 1 else 1)
    fixed = n_p * (2 * row_bytes + 12 * 8) + int(copy_bytes)
    cache_row = n_p * np.dtype(dtype).itemsize
    least = min(MIN_CACHE_ROWS, n_total) * cache_row
    mb = _MB
    if fixed + least > free:
        raise too_little_memory_error(
            f"each of {len(bounds)} partitions needs {(fixed + least) / mb:.0f} MB (its {n_p} rows "
            f"of X{', a copy of all of X' if copy_bytes else ''} and a cache of {MIN_CACHE_ROWS} "
            "kernel rows)", limit, used)
    wanted = min(cache_mb * mb, n_total * cache_row)
    if fixed + wanted <= free:
        return cache_mb
    fitted = (free - fixed) / mb
    warnings.warn(f"the row cache is {fitted:.0f} MB per worker instead of {cache_mb:.0f} MB "
                  f"(cache_size) to fit the smallest worker's memory limit; fits may take longer",
                  ResourceWarning, stacklevel=3)
    return fitted


def too_little_memory_error(needs: str, limit: float, used: float) -> MuflowError:
    """The one line that refuses a fit for the workers' memory: what ``needs`` it, what the
    tightest worker has to spare (:data:`WORKER_FRACTION` of its ``limit`` less the ``used``
    bytes it holds), and the fix."""
    spare = max(WORKER_FRACTION * limit - used, 0)
    return MuflowError(
        f"the workers have too little memory for this fit: {needs} but a worker has "
        f"{spare / _MB:.0f} MB to spare ({WORKER_FRACTION:.0%} of its {limit / _MB:.0f} MB limit, "
        f"less the {used / _MB:.0f} MB it holds); start the workers with a larger --memory-limit, "
        "or more workers")


def tightest_worker(client):
    """``(limit, used)`` in bytes of the worker with the least to spare under
    :data:`WORKER_FRACTION` of its memory limit (``used`` read on the worker once muflow's
    code is imported, :func:`_memory_in_use`); None where no worker has a limit or the
    workers cannot be asked (the solve reports a lost scheduler itself)."""
    try:
        limits = {addr: w.get("memory_limit") or 0
                  for addr, w in scheduler_workers(client).items()}
        limits = {addr: limit for addr, limit in limits.items() if limit}
        used = client.run(_memory_in_use, workers=list(limits)) if limits else {}
    except Exception:  # noqa: BLE001
        return None
    if not limits:
        return None
    addr = min(limits, key=lambda a: WORKER_FRACTION * limits[a] - used.get(a, 0))
    return limits[addr], used.get(addr, 0)


def completed_while_memory_allows(client, futures, what: str, poll: float = 1.0):
    """Yield each of ``futures`` as it finishes (``distributed.as_completed``, in batches),
    or raise :func:`too_little_memory_error` once every worker has stayed paused for
    memory :data:`PAUSED_SECONDS` with none of them finishing: a paused worker runs no
    task, so the wait would never end. The workers are asked every ``poll`` seconds that
    nothing finishes. ``what`` names what waited."""
    from distributed import as_completed

    finished = as_completed(futures, loop=client.loop)
    paused_since, quiet_since = None, time.monotonic()
    while not finished.is_empty():
        batch = finished.next_batch(block=False)
        if batch:
            paused_since, quiet_since = None, time.monotonic()
            yield from batch
            continue
        time.sleep(0.01)
        if time.monotonic() - quiet_since < poll:
            continue
        quiet_since = time.monotonic()
        workers = scheduler_workers(client)
        if not workers or any(w.get("status") != "paused" for w in workers.values()):
            paused_since = None
            continue
        paused_since = paused_since or time.monotonic()
        if time.monotonic() - paused_since >= PAUSED_SECONDS:
            info = min(workers.values(), key=lambda w: w.get("memory_limit") or 0)
            used = (info.get("metrics") or {}).get("memory") or 0
            raise too_little_memory_error(
                f"{what} waited {PAUSED_SECONDS:.0f} s on workers all paused for memory",
                info.get("memory_limit") or 0, used)


def _memory_in_use() -> int:
    """On a worker: its resident memory, once what a partition runs (its state, kernel rows
    and row cache: :mod:`muflow.dask.working_set`, :mod:`muflow.kernel_rows`) is imported."""
    import psutil

    import muflow.dask.working_set  # noqa: F401
    import muflow.kernel_rows  # noqa: F401

    return int(psutil.Process().memory_info().rss)


def lost_workers_message(client, times: int, holding: str = "the fit's partitions") -> str:
    """One line for a solve whose workers kept dying: memory, with the nannies' last word
    on it when they logged one; ``holding`` names what the workers held."""
    said = ""
    try:
        logs = client.get_worker_logs(nanny=True)
        lines = [msg for entries in logs.values() for _, msg in entries if "memory" in msg.lower()]
        if lines:
            said = f" (a nanny logged: {lines[-1].strip().splitlines()[0]})"
    except Exception:  # noqa: BLE001  the logs are a courtesy
        pass
    return (f"the workers holding {holding} died {times} times in a row, most likely "
            f"out of memory{said}; give the workers more memory (--memory-limit), use more "
            "workers, or lower cache_size")
