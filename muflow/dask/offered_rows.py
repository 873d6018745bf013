"""The row source of a Dask partition's row cache: kernel rows of the samples whose rows of X
the client sent with the call.

A partition (:class:`muflow.dask.partitions.RowPartition`) holds its own rows of X only; a
working set's rows K(x_b, X_p) are computed from the rows x_b the client sends with each
iteration's call (:meth:`OfferedRows.offer`), as in process
(:meth:`muflow.kernel_rows.KernelRows.foreign_rows_into`: the same values, the same dtype),
on the worker's threads.
"""

from __future__ import annotations

import numpy as np


class OfferedRows:
    """The row source of a partition's :class:`~muflow.solvers.rowcache.RowCache`: rows
    K(x_b, X_p) of the samples b whose rows of X the client sent with the call
    (:meth:`offer`), computed as in process
    (:meth:`muflow.kernel_rows.KernelRows.foreign_rows_into`)."""

    def __init__(self, rows_op, lo: int):
        # the partition's row operator and first row, not the partition: the partition holds
        # this object, and a reference back would make a cycle that keeps a closed
        # partition's row cache alive until Python's cycle collector runs
        self.rows_op, self.lo = rows_op, int(lo)
        self.n = rows_op.n
        self.dtype = rows_op.dtype
        self.rows_computed = 0
        self._scratch = {}
        self._X = None
        self._ids = np.zeros(0, dtype=np.int64)

    def offer(self, XB, ids) -> None:
        order = np.argsort(ids, kind="stable")
        self._X, self._ids = XB, np.asarray(ids, dtype=np.int64)[order]
        self._order = order

    def rows_into(self, idx, data, slots) -> None:
        self.begin_rows_into(idx, data, slots).join()

    def begin_rows_into(self, idx, data, slots):
        """:meth:`rows_into` begun on the worker's other threads (its
        :meth:`~muflow.thread_pool.Begun.join` takes the caller's share)."""
        lo = self.lo
        idx = np.asarray(idx, dtype=np.int64)
        at = self._order[np.searchsorted(self._ids, idx)]
        same = np.where((idx >= lo) & (idx < lo + self.n), idx - lo, -1)
        self.rows_computed += idx.size
        return self.rows_op.begin_foreign_rows_into(self._X[at], data, slots, same,
                                                 scratch=self._scratch)


__all__ = ["OfferedRows"]
