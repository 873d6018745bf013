"""Compiled pieces of the working-set solver (numba, cached on disk, GIL released).

The decomposition solver (:mod:`muflow.solvers.working_set`) keeps the gradient
G = Q alpha + p of every variable and changes it, once per outer iteration, by the rows of
K of the working set B that moved:

- :func:`add_rows`: ``G[t] += y[t] * sum_b coef[b] * K[row_b, t]`` for t in [lo, hi), the rows
  read from the row cache's storage at ``slots``: the product K[B, :]^T (y_B delta_B),
  summed in float64 whatever the cache's dtype (a float32 row is widened as it is read),
  on a range of targets so that the driver splits one update over threads
  (:meth:`Threads.split`) and a worker holding a slice of G updates just that slice;
- :func:`add_older_rows`: the first of a step's two sums, the moved rows cached before
  it, on one thread while the others compute the new rows, then on every thread;
- :func:`gather_block`: K_BB, the subproblem's matrix, from the cached rows of B;

Arrays: G, y, coef float64; slots, cols int64; data the cache's (slots, n) storage, float32
or float64; all C-contiguous.
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit

from muflow.threads import run_on_threads, threads_for

#: Targets per block: the block's partial sums (128 KB) stay in the L2 cache while every
#: row streams through it, and each row is read in runs of 64 KB, long enough for the
#: hardware prefetcher (runs of 8 KB left the memory bus half used: see docs/benchmarks.md).
BLOCK = 16384


@njit(cache=True, nogil=True, inline="always")
def add_block(G, y, data, slots, coef, acc, start, stop):
    """``G[t] += y[t] * sum_b coef[b] * data[slots[b], t]`` for start <= t < stop (at most
    ``acc.size`` targets): the rows are taken four at a time, so that the block's partial
    sums in ``acc`` are loaded and stored once per four rows instead of once per row."""
    nb = slots.shape[0]
    width = stop - start
    for k in range(width):
        acc[k] = 0.0
    b = 0
    while b + 4 <= nb:
        w0, w1, w2, w3 = coef[b], coef[b + 1], coef[b + 2], coef[b + 3]
        r0 = data[slots[b], start:stop]
        r1 = data[slots[b + 1], start:stop]
        r2 = data[slots[b + 2], start:stop]
        r3 = data[slots[b + 3], start:stop]
        for k in range(width):
            acc[k] += (w0 * r0[k] + w1 * r1[k]) + (w2 * r2[k] + w3 * r3[k])
        b += 4
    while b < nb:
        w = coef[b]
        row = data[slots[b], start:stop]
        for k in range(width):
            acc[k] += w * row[k]
        b += 1
    for k in range(width):
        G[start + k] += y[start + k] * acc[k]


@njit(cache=True, nogil=True)
def add_rows(G, y, data, slots, coef, lo, hi):
    """``G[t] += y[t] * sum_b coef[b] * data[slots[b], t]`` for lo <= t < hi, a block of
    :data:`BLOCK` targets at a time (:func:`add_block`). Memory-bound: each row is read
    once."""
    acc = np.empty(BLOCK)
    for start in range(lo, hi, BLOCK):
        add_block(G, y, data, slots, coef, acc, start, min(start + BLOCK, hi))


def two_sums(fresh) -> bool:
    """Whether a step's gradient update is two sums, the moved rows cached before the step
    (``~fresh``) and then those computed for it (``fresh``): where both kinds moved. Else
    one sum over all (``fresh`` None: not known). The rule of every home (in process, on
    Dask workers, on the device), so that they sum alike."""
    return fresh is not None and bool(fresh.any()) and not bool(fresh.all())


def add_older_rows(threads, G, y, data, slots, coef, fresh, writing, settle):
    """The first of a step's two gradient sums: the moved rows that were cached before the
    step (``~fresh``), added to G by :func:`add_rows` on this thread, a :data:`BLOCK` of
    targets at a time, while the rows of B being written (``writing``, a
    :class:`~muflow.solvers.rowcache.RowCache` write or None) are computed on the other
    threads: a pass that only reads memory beside tiles that only compute. Then
    ``settle()`` (this thread's share of the rows, and the wait for the rest) and the
    targets left on every thread (``threads``). Each target's sum does not depend on how
    the pass is cut, so the result is the same on any number of threads.

    Where the update is one sum (:func:`two_sums`), nothing is added, only ``settle()``. Returns ``(slots, coef, seconds)``: the moved rows left for
    the caller's second sum (the fresh ones, or all) and the seconds this pass took."""
    if not two_sums(fresh):
        settle()
        return slots, coef, 0.0
    t = time.perf_counter()
    n = G.shape[0]
    older = np.ascontiguousarray(slots[~fresh], dtype=np.int64)
    weights = np.ascontiguousarray(coef[~fresh], dtype=np.float64)
    done = 0
    while done < n and writing is not None and writing.running():
        add_rows(G, y, data, older, weights, done, min(n, done + BLOCK))
        done = min(n, done + BLOCK)
    seconds = time.perf_counter() - t
    settle()
    t = time.perf_counter()
    if done < n:
        threads.split(add_rows, n, older.size, G, y, data, older, weights, start=done)
    return slots[fresh], coef[fresh], seconds + time.perf_counter() - t


@njit(cache=True, nogil=True)
def gather_block(data, slots, cols, out, lo, hi):
    """``out[a, b] = data[slots[a], cols[b]]`` in float64 for lo <= a < hi: K_BB from the
    cached rows of B (``cols`` ascending, so each row is read in address order), a range
    of its rows per thread."""
    for a in range(lo, hi):
        row = data[slots[a]]
        for b in range(cols.shape[0]):
            out[a, b] = row[cols[b]]


#: Below this many multiply-adds an update runs in the calling thread (a thread hand-off
#: costs tens of microseconds).
_SPLIT_MIN_WORK = 1 << 18


class Threads:
    """Splits one compiled range pass over ``n_threads`` threads of the process's persistent
    pool (:func:`muflow.threads.run_on_threads`).

    The compiled functions release the GIL, so the parts of a pass run side by side; each
    part is a range ``[lo, hi)`` that the function reads and writes alone, so the result does
    not depend on how many parts there are.
    """

    def __init__(self, n_threads: int | None = None):
        self.n_threads = threads_for(n_threads)

    def parts(self, total: int, work_per_item: int) -> int:
        """How many pieces :meth:`split` cuts a pass of ``total`` items into: one below
        :data:`_SPLIT_MIN_WORK`, else one a thread, but no piece under half of that work
        (two pieces from the threshold on, as many as the threads only where the pass
        fills them): each piece is a hand-off to a thread of the pool, and sixteen threads
        woken for a pass of a q x q block would spend more in the hand-offs than in it."""
        work = total * max(work_per_item, 1)
        if self.n_threads == 1 or work < _SPLIT_MIN_WORK:
            return 1
        return int(min(self.n_threads, work // max(1, _SPLIT_MIN_WORK // 2)))

    def split(self, fn, total: int, work_per_item: int, *args, start: int = 0) -> None:
        """``fn(*args, lo, hi)`` over [start, total), in one piece per thread when worth it."""
        self.split_numbered(lambda k, lo, hi: fn(*args, start + lo, start + hi),
                            total - start, work_per_item)

    def split_numbered(self, fn, total: int, work_per_item: int, *args) -> int:
        """``fn(*args, k, lo, hi)`` over [0, total) for the pieces k of :meth:`parts`, in
        the order of their ranges, so that a pass can leave piece k's partial result in row
        k of an array for the caller to merge; returns how many pieces there were."""
        parts = self.parts(total, work_per_item)
        if parts == 1:
            fn(*args, 0, 0, total)
            return 1
        edges = np.linspace(0, total, parts + 1).astype(np.int64)
        run_on_threads(lambda k: fn(*args, k, int(edges[k]), int(edges[k + 1])), parts)
        return parts

    def close(self) -> None:
        """Nothing to release: the pool is the process's."""
