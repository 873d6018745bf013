"""The worker's side of the Dask working-set loop: one column's state on a partition's rows.

:class:`PartitionColumn` is what each partition's actor
(:class:`muflow.dask.partitions.RowPartition`) does in an outer iteration of
:mod:`muflow.dask.working_set` (whose notes describe the iteration): solve the subproblem
on B for all (:meth:`PartitionColumn.solve`), or compute this partition's columns of B's
rows meanwhile (:meth:`PartitionColumn.compute_rows`), then apply the step to its slice
of the gradient and answer its best candidates (:meth:`PartitionColumn.iterate`). The
client's side is :class:`muflow.dask.working_set.PartitionedState`.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from muflow.dask.answered_rows import SentRows
from muflow.exceptions import MuflowError
from muflow.solvers._selection_compiled import WORK_PER_ITEM, side_pass
from muflow.solvers._subset_compiled import shrink_mask
from muflow.solvers._working_set_compiled import add_older_rows, add_rows
from muflow.solvers.top_k import smallest
from muflow.solvers.working_set_loop import (previous_positions, projected_gradient,
                                             solve_subproblem, step_of)
from muflow.threads import blas_single_threaded


def held(B, lo, hi) -> np.ndarray:
    """Which of the global indices ``B`` the partition of rows [lo, hi) holds."""
    return (B >= lo) & (B < hi)


class PartitionColumn:
    """The working-set loop's state of one column on a partition's rows, kept by the
    partition's actor (:class:`muflow.dask.partitions.RowPartition`, which derives from this
    class and holds the rows X_p, their row cache, threads, the pending rows and the K_BB
    buffer): the slices of y, U, p, alpha and the gradient G, the active set, the step
    applied, the shrinking and the candidates each side offers to the client's
    :class:`PartitionedState`."""

    _solved = None  # (B, new, alpha_B, y_B) of the last solve, for step_solved
    _begun = None  # the rows of B the last prefetch began (missing from the cache)

    def begin(self, y, U, p, alpha, equality, answer_rows=True):
        """Take the slices of a column; ``G = y * K(X_p, X_S) coef + p`` with S the support
        of the start (empty from alpha = 0), the product the client streamed just before
        (:meth:`muflow.dask.partitions.DaskRowPartitions.product`). ``answer_rows``: the
        candidates' answers carry their rows of X (not where the client holds X), each once
        while it stays a candidate (:mod:`muflow.dask.answered_rows`)."""
        self.answer_rows = bool(answer_rows)
        self.sent_rows = SentRows()
        self.y = np.asarray(y, dtype=np.float64)
        self.U = np.asarray(U, dtype=np.float64)
        self.p = np.asarray(p, dtype=np.float64)
        self.alpha = np.array(alpha, dtype=np.float64)
        self.equality = bool(equality)
        self.settle()
        self.G = self.y * self.product_end() + self.p
        self.act = np.flatnonzero(self.U > 0)
        return self.n

    def iterate(self, moved, coef, B, alpha_B, shrink_with, reactivate, k):
        """Apply a step (the variables ``moved``, ``coef`` = y delta there: their rows come
        from the cache, begun by :meth:`prefetch` or computed here from the rows of X
        offered with the call), shrink or reactivate when asked, and answer the best ``k``
        candidates of each side (see the module notes)."""
        t0 = time.perf_counter()
        B = np.asarray(B, dtype=np.int64)
        begun, self._begun = self._begun, None
        if len(coef):
            moved = np.asarray(moved, dtype=np.int64)
            slots, _ = self.cache.slots_for(moved)  # B's missing rows are reserved: no fetch
            # two sums, as in process: the rows cached before the step while the rows of B
            # still being computed end (:func:`add_older_rows`), then the new ones
            slots, coef, seconds = add_older_rows(
                self.threads, self.G, self.y, self.cache.data, slots,
                np.asarray(coef, dtype=np.float64), None if begun is None else np.isin(moved, begun),
                None if self._pending is None else self._pending[0], self._timed_settle)
            t1 = time.perf_counter()
            self.threads.split(add_rows, self.n, slots.size, self.G, self.y, self.cache.data,
                               np.ascontiguousarray(slots), np.ascontiguousarray(coef))
            self.seconds["gradient"] += seconds + time.perf_counter() - t1
        else:
            self._timed_settle()
        mine = held(B, self.lo, self.lo + self.n)
        self.alpha[B[mine] - self.lo] = np.asarray(alpha_B)[mine]
        if reactivate:
            self.act = np.flatnonzero(self.U > 0)
        elif shrink_with is not None:
            self._shrink(*shrink_with)
        t2 = time.perf_counter()
        answer = self._candidates(int(k), B[mine] - self.lo)
        self.seconds["candidates"] += time.perf_counter() - t2
        self.seconds["iterate"] += time.perf_counter() - t0
        return answer

    def _shrink(self, gmax, gmax2):
        """libsvm's shrinking of this slice's active set with the global extremes (the one
        rule, :func:`muflow.solvers._subset_compiled.leaves_active_set`)."""
        drop = shrink_mask(self.y, self.alpha, self.U, self.G, self.act, gmax, gmax2,
                           self.equality)
        self.act = self.act[~drop]

    def _candidates(self, k, previous):
        """The k most violating variables of each side (first order) and the active
        members of the previous working set ``previous`` (local indices), which the client
        may keep (as ThunderSVM keeps half of its previous set)."""
        act = self.act
        kept = previous_positions(act, previous)
        if self.equality:
            v_up, v_low, a, U = (np.empty(act.size) for _ in range(4))
            self.threads.split(side_pass, act.size, WORK_PER_ITEM, self.y, self.alpha, self.U,
                               self.G, np.ascontiguousarray(act, dtype=np.int64), v_up, v_low,
                               a, U)
            pick = np.union1d(np.union1d(smallest(-v_up, k, self.threads),
                                         smallest(-v_low, k, self.threads)), kept)
            scores = (v_up[pick], v_low[pick])
        else:
            a, U, G = self.alpha[act], self.U[act], self.G[act]
            score = np.abs(projected_gradient(a, U, G))
            pick = np.union1d(smallest(-np.where(score > 0, score, -np.inf), k, self.threads), kept)
            scores = (score[pick],)
        local = act[pick]
        X = held_rows = None
        if self.answer_rows:  # the rows the client does not hold already
            held_rows = self.sent_rows.held(local + self.lo)
            X = self.X[local[~held_rows]]
            self.sent_rows.record(local + self.lo)
        return {"idx": local + self.lo, "scores": scores, "y": self.y[local], "a": self.alpha[local],
                "U": self.U[local], "G": self.G[local], "QD": self.QD[local], "X": X,
                "held": held_rows, "n_act": int(act.size)}

    def solve(self, XB, B, yB, UB, aB, GB, equality, gap, gap_tol, dtype):
        """The subproblem on B, on the partition that solves it for all
        (:attr:`muflow.dask.partitions.DaskRowPartitions.solver`): ``(new, change, steps)``
        (:meth:`_solve`). A worker of several threads begins its rows of B on the others
        meanwhile (:meth:`prefetch`); one of one thread computes them with the step."""
        B = np.asarray(B, dtype=np.int64)
        self._solved = None
        XB = self._whole(XB, B)
        self.prefetch(XB, B)  # settles the rows begun before, first
        try:
            new, change, steps = self._solve(XB, yB, UB, aB, GB, equality, gap, gap_tol, dtype)
            self._solved = (B, new, np.asarray(aB), np.asarray(yB))
            return new, change, steps
        except BaseException:
            # the rows begun end here, not with a next call that may never come (the BLAS
            # hold they keep is released when they are joined); the solve's error is raised
            with contextlib.suppress(BaseException):
                self.settle()
            raise

    def step_solved(self, shrink_with, k):
        """:meth:`iterate` with the step this partition's last :meth:`solve` found (sent
        with it, on a channel: no round trip between them)."""
        if self._solved is None:
            raise MuflowError("no step to apply: the subproblem was not solved")
        B, new, aB, yB = self._solved
        self._solved = None
        moved, coef = step_of(new, aB, yB)
        return self.iterate(B[moved], coef, B, new, shrink_with, False, k)

    def solve_and_step(self, *args):
        """:meth:`solve` (``args`` less the last two) then :meth:`step_solved` (the last
        two) in one call: a lone partition, whose step no other partition waits for."""
        return self.solve(*args[:-2]), self.step_solved(*args[-2:])

    def compute_rows(self, XB, B):
        """This partition's columns of B's rows its cache lacks, on all its threads, while
        the solver solves; the step that follows (:meth:`iterate`) reads them."""
        B = np.asarray(B, dtype=np.int64)
        self.prefetch(self._whole(XB, B), B)  # settles the rows begun before, first
        self.settle()

    def _whole(self, XB, B):
        """X_B: from this partition's copy of X where the call sent none (``XB`` None,
        :mod:`muflow.dask.row_blocks`), else from the rows sent, those of B outside this
        partition where fewer than B came (:meth:`PartitionedState.solve_on` sends no
        worker its own rows), and its own."""
        if XB is None:
            return self.X_all[B]
        if XB.shape[0] == B.size:
            return XB
        mine = held(B, self.lo, self.lo + self.n)
        whole = np.empty((B.size, XB.shape[1]), dtype=XB.dtype)
        whole[mine] = self.X[B[mine] - self.lo]
        whole[~mine] = XB
        return whole

    def _solve(self, XB, yB, UB, aB, GB, equality, gap, gap_tol, dtype):
        """The subproblem on B: K_BB from the rows ``XB`` in ``dtype`` (the workers' rows':
        float32 above 4096 samples, as in process K_BB is gathered from the row cache in
        the cache's dtype), then :func:`~muflow.solvers.working_set_loop.solve_subproblem`
        with BLAS on one thread, as the client's loop runs it: ``(new, change, steps)``."""
        t0 = time.perf_counter()
        q = len(yB)
        # one buffer for every iteration: a fresh q x q array costs its page faults each time
        if self._K_BB.size < q * q or self._K_BB.dtype != np.dtype(dtype):
            self._K_BB = np.empty(q * q, dtype=dtype)
        K_BB = self.kernel.block_into(XB, XB, self._K_BB[: q * q].reshape(q, q))
        with blas_single_threaded():
            answer = solve_subproblem(K_BB, yB, UB, aB, GB, equality=bool(equality), gap=gap,
                                      gap_tol=gap_tol)
        self.seconds["subproblem"] += time.perf_counter() - t0
        return answer

    def prefetch(self, XB, B):
        """Begin computing this partition's columns of the rows of B (``XB``) that its row
        cache lacks, K(X_B, X_p), on the worker's other threads
        (:meth:`muflow.solvers.rowcache.RowCache.begin_write`), and return, so that this
        thread solves the subproblem meanwhile (:meth:`solve`) and then takes the
        rows left (:meth:`settle`). Which of B will move is not known yet: all of B's
        missing rows are computed, still cached when a later working set asks for them."""
        self.settle()
        rows, slots = self.cache.reserve_missing(np.asarray(B, dtype=np.int64))
        self._begun = rows  # fresh rows for the step that follows (:meth:`iterate`)
        if rows.size:
            self.offered.offer(XB, B)
            self._pending = (self.cache.begin_write(rows, slots), time.perf_counter())

    def _timed_settle(self):
        """:meth:`settle`, its seconds counted as the step's "rows"."""
        t = time.perf_counter()
        self.settle()
        self.seconds["rows"] += time.perf_counter() - t

    def settle(self):
        """Take this thread's share of the rows begun by :meth:`prefetch` and wait for the
        rest; their error, if any, is raised here."""
        pending, self._pending = self._pending, None
        if pending is not None:
            writing, started = pending
            try:
                writing.join()
            finally:
                self.seconds["rows_behind"] += time.perf_counter() - started

    def gradient(self):
        """G of the slice: the certificate's pull (alpha is whole on the client)."""
        return self.G


__all__ = ["PartitionColumn", "held"]
