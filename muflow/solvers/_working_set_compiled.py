"""Compiled gradient updates of the working-set solver (numba, cached on disk, GIL released).

The decomposition solver (:mod:`muflow.solvers.working_set`) keeps G = Q alpha + p for the
active variables and, with shrinking, libsvm's G_bar (Fan, Chen & Lin 2005, sec. 5; Chang &
Lin, LIBSVM, sec. 5.2) for every variable. Both change by sums of rows of K:

- :func:`add_rows`: ``G[t] += y[t] * sum_b coef[b] * K[rows_b, t]`` for t in a list of
  indices, the rows read from the row cache's storage at ``slots`` (the gradient update
  K[B, :]^T (y_B delta_B) of one outer iteration, G_bar's change when variables reach or
  leave their upper bound, and the reconstruction of shrunk gradients from the rows of the
  free variables);
- :func:`add_row_dots`: ``G[rows_k] += y[rows_k] * sum_c K[rows_k, cols_c] coef[c]``, the same
  reconstruction read from the rows of the shrunk variables themselves (libsvm's choice when
  they are fewer than the free ones);
- :func:`gather_block`: K_BB, the subproblem's matrix, from the cached rows of B.

Both sum in float64 whatever the cache's dtype (a float32 row is widened as it is read)
and work on the index range [lo, hi) of their targets, so that the driver splits one
update over threads (:func:`split`). Arrays: G, y, coef float64; slots, idx, rows, cols
int64; data the cache's (slots, n) storage, float32 or float64; all C-contiguous.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

#: Targets per block: the block's partial sums stay in the L1/L2 cache while every row
#: streams through it.
_BLOCK = 2048


@njit(cache=True, nogil=True)
def add_rows(G, y, data, slots, coef, idx, lo, hi):
    """``G[idx[k]] += y[idx[k]] * sum_b coef[b] * data[slots[b], idx[k]]`` for lo <= k < hi.

    ``idx`` of length 0 stands for every target (idx[k] = k): the rows are then read
    contiguously, without a gather, which vectorises.
    """
    nb = slots.shape[0]
    every = idx.shape[0] == 0
    acc = np.empty(_BLOCK)
    for start in range(lo, hi, _BLOCK):
        stop = min(start + _BLOCK, hi)
        width = stop - start
        for k in range(width):
            acc[k] = 0.0
        for b in range(nb):
            w = coef[b]
            if every:
                row = data[slots[b], start:stop]
                for k in range(width):
                    acc[k] += w * row[k]
            else:
                row = data[slots[b]]
                for k in range(width):
                    acc[k] += w * row[idx[start + k]]
        for k in range(width):
            t = start + k if every else idx[start + k]
            G[t] += y[t] * acc[k]


@njit(cache=True, nogil=True)
def add_row_dots(G, y, data, slots, rows, cols, coef, lo, hi):
    """``G[rows[k]] += y[rows[k]] * sum_c data[slots[k], cols[c]] * coef[c]`` for lo <= k < hi."""
    for k in range(lo, hi):
        row = data[slots[k]]
        s = 0.0
        for c in range(cols.shape[0]):
            s += row[cols[c]] * coef[c]
        t = rows[k]
        G[t] += y[t] * s


@njit(cache=True, nogil=True)
def gather_block(data, slots, cols, out):
    """``out[a, b] = data[slots[a], cols[b]]`` in float64: K_BB from the cached rows of B
    (``cols`` ascending, so each row is read in address order)."""
    for a in range(slots.shape[0]):
        row = data[slots[a]]
        for b in range(cols.shape[0]):
            out[a, b] = row[cols[b]]


#: Below this many multiply-adds an update runs in the calling thread (a thread hand-off
#: costs tens of microseconds).
_SPLIT_MIN_WORK = 1 << 18


class Threads:
    """A small pool that splits one compiled update over the CPUs this process may use.

    The compiled functions release the GIL, so the halves of an update run side by side;
    a pool (not numba's ``parallel``) keeps them safe to call from several threads at once
    (a Dask worker runs tasks on threads).
    """

    def __init__(self, n_threads: int | None = None):
        self.n_threads = max(1, n_threads or len(os.sched_getaffinity(0)))
        self._pool = ThreadPoolExecutor(self.n_threads) if self.n_threads > 1 else None

    def split(self, fn, total: int, work_per_item: int, *args) -> None:
        """``fn(*args, lo, hi)`` over [0, total), in one piece per thread when worth it."""
        parts = self.n_threads if self._pool is not None else 1
        if parts == 1 or total * max(work_per_item, 1) < _SPLIT_MIN_WORK:
            fn(*args, 0, total)
            return
        edges = np.linspace(0, total, parts + 1).astype(np.int64)
        futures = [self._pool.submit(fn, *args, int(edges[k]), int(edges[k + 1]))
                   for k in range(parts) if edges[k + 1] > edges[k]]
        for f in futures:
            f.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
