"""The k smallest entries of a vector, the same whatever the threads.

The working-set selection (:func:`muflow.solvers.working_set_loop.select_working_set`, WSS 2
of Fan, Chen & Lin, JMLR 6, 2005, eq. (14)) takes the q/2 variables of each side with the
best gains, and a Dask partition offers the client its k most violating variables
(:mod:`muflow.dask.working_set`). Both read a vector of n entries for a few hundred: a
partial sort (``np.argpartition``) of every finite entry each time, in one thread, whose
choice among equal values is NumPy's.

:func:`smallest` reads the vector once (on the caller's threads where it is long) for the
entries at most a bound that a strided sample of it gives (about 1.5 k of them), and sorts
those alone. Its
answer is defined without reference to how it was found: the k finite entries that come first
in the order of (value, position), so equal values go to the lower positions, and the same
vector gives the same positions on one thread or sixteen, with any NumPy.
"""

from __future__ import annotations

import numpy as np

from muflow.solvers._selection_compiled import (collect_at_most, first_k, sampled_bound,
                                               smallest_in_one)
from muflow.solvers._working_set_compiled import Threads

#: Entries the bound is read from; below ``SAMPLE`` entries every finite one is sorted.
SAMPLE = 1024
#: The collecting pass's work an entry, in the units of
#: :meth:`muflow.solvers._working_set_compiled.Threads.split`: a read and a compare, so
#: cheap that the pass is shared out only from a few hundred thousand entries (a thread's
#: hand-off costs as much as reading 100,000 of them).
WORK_PER_ENTRY = 1


def smallest(values: np.ndarray, k: int, threads=None) -> np.ndarray:
    """Positions of the (at most) k smallest finite entries of ``values``, ascending; of equal
    values the lower positions first.

    Parameters
    ----------
    values : ndarray of shape (n,)
        float64 (-inf, +inf and NaN are never chosen).
    k : int
    threads : Threads, optional
        Shares the pass over ``values`` out
        (:class:`muflow.solvers._working_set_compiled.Threads`); default this thread.
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    n = values.shape[0]
    k = int(k)
    threads = Threads(1) if threads is None else threads
    if threads.parts(n, WORK_PER_ENTRY) == 1:  # the same steps in one compiled call
        return smallest_in_one(values, k, SAMPLE)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    bound = np.inf if n < SAMPLE else sampled_bound(values, k, SAMPLE)
    pos = _collect(values, bound, threads)
    if pos.size < k and bound < np.inf:  # the sample's bound was low: every finite entry
        pos = _collect(values, np.inf, threads)
    return first_k(values, pos, k)


def _collect(values, bound, threads) -> np.ndarray:
    """The positions of the finite entries at most ``bound``, ascending (a range a thread)."""
    out = np.empty(values.shape[0], dtype=np.int64)
    starts = np.zeros(threads.n_threads, dtype=np.int64)
    counts = np.zeros(threads.n_threads, dtype=np.int64)
    parts = threads.split_numbered(collect_at_most, values.shape[0], WORK_PER_ENTRY, values,
                                   bound, out, starts, counts)
    if parts == 1:
        return out[: counts[0]]
    return np.concatenate([out[starts[p]: starts[p] + counts[p]] for p in range(parts)])


__all__ = ["smallest", "SAMPLE"]
