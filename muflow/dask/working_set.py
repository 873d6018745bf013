"""The working-set loop's state on X partitioned over Dask workers.

The loop is :mod:`muflow.solvers.working_set_loop`'s (Joachims' decomposition as ThunderSVM
runs it, WSS 2 of Fan, Chen & Lin, JMLR 6, 2005, eq. (14)), the same that runs in process;
this module is the home of its state when X lives on the workers
(:class:`muflow.dask.partitions.DaskRowPartitions`). Each partition holds its slices of
alpha, G and the active set and a row cache over its columns; the client keeps alpha whole
(O(n), the answer and what a lost slice is rebuilt from) and chooses the working set.

One outer iteration is two calls to every partition (on the partition's actor, through
its channel where it has one, :mod:`muflow.dask.channels`), made by
:func:`muflow.dask.exchange.exchange`; on a channel the second is sent before the first
is answered, so that no partition waits for a round trip between them:

- the client sends the working set B with its rows of X (dense X: less the partition's own,
  which it holds): O(q d) to each partition. One partition, the solver
  (:attr:`~muflow.dask.partitions.DaskRowPartitions.solver`), is sent y, bounds, alpha and
  G of B too; it computes K_BB from X_B in the workers' dtype, solves the q-variable
  subproblem (:func:`~muflow.solvers.working_set_loop.solve_subproblem`) and answers the
  step (:meth:`PartitionColumn.solve`). Meanwhile every other partition computes its
  columns of the rows of B its cache lacks (:meth:`PartitionColumn.compute_rows`). The
  subproblem is solved once, not on every worker, and the client never holds the q x q
  block;
- the client sends every partition the step, with the extremes to shrink with when due
  (:meth:`PartitionColumn.iterate`, O(q)): each updates its slice of the gradient,
  ``G_p += y_p K(X_B, X_p)' (y_B delta_B)``, from its row cache, shrinks when asked (the
  one rule, :func:`muflow.solvers._subset_compiled.leaves_active_set`) and answers its
  best candidates: the q / (2 workers) most violating variables of I_up and of I_low on its
  slice and the active members of B, with their y, alpha, bound, G, K_tt and rows of X:
  O(q d). The rows of X stay behind where the client holds X as a dense array (it takes
  them from its own, :attr:`~muflow.dask.partitions.DaskRowPartitions.rows_here`).

Every partition applies the one step the solver found, so that a cluster of CPUs that round
sums differently still agrees on alpha. The merged candidates are the pool the loop's
:class:`~muflow.solvers.working_set_loop.PairView` and
:func:`~muflow.solvers.working_set_loop.select_working_set` read, as in process they read
the active set: each partition sent its own best of each side, so the maximal violators and
the stopping gap are the global ones; the violators' rows over the pool are computed on the
client from the candidates' rows of X (second order on both sides).

A solver of several threads begins its rows of B on the others while the thread that serves
its calls solves the subproblem, then takes the rows left with the step
(:meth:`PartitionColumn.prefetch`), as in process and as oneDAL's solver computes them; a
solver of one thread computes the same rows with the step (the same rows on any number of
threads, so that each is computed by the same BLAS calls and the step is the same to the
bit). The first candidates, and those after a reactivation, come with a call that carries
no step (:meth:`PartitionedState.extremes`). Nothing of size n crosses the network per
iteration; G is pulled once per certificate.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np
import scipy.sparse as sp

from muflow.dask.candidates import CandidatePool, row_bytes, stack_rows
from muflow.dask.exchange import exchange
from muflow.exceptions import MuflowError, MuflowInputError
from muflow.solvers._selection_compiled import WORK_PER_ITEM, side_pass
from muflow.solvers._subset_compiled import shrink_mask
from muflow.solvers._working_set_compiled import add_rows
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.top_k import smallest
from muflow.solvers.working_set import solve_working_set
from muflow.solvers.working_set_loop import (ColumnHome, ColumnState, PairView, default_q,
                                             projected_gradient, select_working_set,
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

    def begin(self, y, U, p, alpha, equality, answer_rows=True):
        """Take the slices of a column; ``G = y * K(X_p, X_S) coef + p`` with S the support
        of the start (empty from alpha = 0), the product the client streamed just before
        (:meth:`muflow.dask.partitions.DaskRowPartitions.product`). ``answer_rows``: the
        candidates' answers carry their rows of X (not where the client holds X)."""
        self.answer_rows = bool(answer_rows)
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
        self.settle()
        B = np.asarray(B, dtype=np.int64)
        if len(coef):
            slots, _ = self.cache.slots_for(np.asarray(moved, dtype=np.int64))
            t1 = time.perf_counter()
            self.seconds["rows"] += t1 - t0
            self.threads.split(add_rows, self.n, slots.size, self.G, self.y, self.cache.data,
                               slots, np.ascontiguousarray(coef, dtype=np.float64))
            self.seconds["gradient"] += time.perf_counter() - t1
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
        at = np.minimum(np.searchsorted(act, previous), max(act.size - 1, 0))
        kept = at[act[at] == previous] if act.size else at[:0]
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
        return {"idx": local + self.lo, "scores": scores, "y": self.y[local], "a": self.alpha[local],
                "U": self.U[local], "G": self.G[local], "QD": self.QD[local],
                "X": self.X[local] if self.answer_rows else None,
                "n_act": int(act.size)}

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
        """X_B from the rows sent, those of B outside this partition where fewer than B came
        (:meth:`PartitionedState.solve_on` sends no worker its own rows), and its own."""
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
        if rows.size:
            self.offered.offer(XB, B)
            self._pending = (self.cache.begin_write(rows, slots), time.perf_counter())

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


class PartitionedState(ColumnState):
    """One column's state on the partitions (module notes); the client side of the seam.

    Parameters
    ----------
    parts : DaskRowPartitions
    col : Column
    alpha : ndarray of shape (n,)
        A feasible start (kept whole on the client).
    q : int
    timings : dict
    """

    def __init__(self, parts, col, alpha, q, timings):
        self.parts, self.col, self.alpha, self.q, self.timings = parts, col, alpha, q, timings
        self.y, self.U = col.y, col.U
        self.equality = col.equality
        self.kernel = parts.kernel
        self.n_valid = int((col.U > 0).sum())
        self.previous = np.zeros(0, dtype=np.int64)
        self.bias = 0.0
        self._shrink_with, self._reactivate = None, False
        self._pool, self._stale = None, True
        self._shrunk = 0
        self._recovering(lambda: self._begin(range(len(parts.actors))))
        self.F = col.objective(alpha, self._gradient())

    # ---- the seam ------------------------------------------------------------------------

    def extremes(self) -> float:
        if self._stale:
            self._answered(self._round_trip())
        return self._pool.view.gap

    def candidates(self, q: int) -> np.ndarray:
        pool = self._pool
        view = pool.view
        previous = np.flatnonzero(np.isin(pool.idx, self.previous))
        if not self.equality:
            return np.sort(pool.idx[select_working_set(view, q, previous)])
        # the violators' rows over the candidates, from their rows of X
        rows = self.kernel.block(pool.X[[view.ku, view.kl]], pool.X)
        chosen = select_working_set(view, q, previous, QD=pool.QD, row_i=rows[0], row_j=rows[1])
        return np.sort(pool.idx[chosen])

    def solve_on(self, B, gap, gap_tol, timings):
        """The outer iteration (module notes), its calls made by
        :func:`muflow.dask.exchange.exchange`. No q x q K_BB here."""
        pool = self._pool
        at = pool.positions(B)
        XB = pool.X[at]
        yB, UB, aB, GB = pool.y[at], pool.U[at], self.alpha[B].copy(), pool.G[at]
        shrink_with, self._shrink_with = self._shrink_with, None
        k = self._k()
        parts = self.parts
        sent = [self._rows_for(i, XB, B) for i in range(len(parts.actors))]

        def call():
            return exchange(parts, sent, B, (yB, UB, aB, GB, self.equality, gap, gap_tol,
                                             parts.dtype), shrink_with, k)

        t = time.perf_counter()
        # a lost partition: all of them begin again at alpha before the step, and solve again
        (new, change, steps), candidates = self._recovering(
            call, restart=lambda lost: self._begin(range(len(parts.actors))))
        self._answered(candidates)
        timings["subproblem"] += time.perf_counter() - t
        timings["subproblem_steps"] += steps
        timings["round_trips"] += 1
        # X_B (less each partition's own rows), B's vectors to the solver, its step to the rest
        timings["bytes_sent"] += (sum(row_bytes(rows) for rows in sent)
                                  + 8 * B.size * (5 + 4 * (len(sent) - 1)))
        timings["bytes_received"] += 8 * B.size + sum(row_bytes(c["X"]) + 7 * 8 * c["idx"].size
                                                      for c in candidates)
        return new, change, yB, aB

    def _rows_for(self, i, XB, B):
        """X_B as partition i is sent it: dense rows less its own, which it holds
        (:meth:`PartitionColumn._whole`); CSR rows whole."""
        if sp.issparse(XB):
            return XB
        lo, hi = self.parts.bounds[i]
        return XB[~held(B, lo, hi)]

    def _answered(self, candidates) -> None:
        """The partitions' candidates become the pool the loop selects from."""
        self._pool = CandidatePool(candidates, self.equality,
                                   self.parts.take if self.parts.rows_here else None)
        self._shrunk = self.n_valid - self._pool.n_active
        self._stale = False

    def _k(self) -> int:
        """Candidates of each side a partition answers: a side of B from all workers."""
        return max(8, self.q // (2 * len(self.parts.actors)))

    def apply(self, B, new, moved, coef, change) -> None:
        """The step is on the partitions already (:meth:`solve_on`)."""
        self.alpha[B] = new
        self.F += change
        self.previous = B

    def shrink(self) -> None:
        """Due with the next round trip, with the extremes the workers last answered."""
        self._shrink_with = self._pool.view.extremes

    @property
    def shrunk(self) -> int:
        return self._shrunk or int(self._shrink_with is not None)

    def reactivate(self) -> None:
        self._shrink_with, self._reactivate, self._stale = None, True, True
        self._shrunk = 0

    def certify(self) -> float:
        violation, self.F, self.bias = self._pull(self.bias)
        return violation

    # ---- the round trip --------------------------------------------------------------------

    def _begin(self, which):
        """Hand partitions ``which`` their slices of the column at the current alpha (their
        gradient is computed there from the support's rows)."""
        col, alpha, parts = self.col, self.alpha, self.parts
        support = np.flatnonzero(alpha)
        parts.product(support, col.y[support] * alpha[support], which=which)
        calls = []
        for i in which:
            lo, hi = parts.bounds[i]
            calls.append(parts.send(i, "begin", col.y[lo:hi], col.U[lo:hi], col.p[lo:hi],
                                    alpha[lo:hi], col.equality, not parts.rows_here))
        parts.wait(calls)

    def _recovering(self, call, again=None, restart=None):
        """``call()``; when partitions are lost with their workers, restart them from their
        source, give them the column at the current alpha (``restart(lost)``, default: the
        lost ones) and make ``again()`` (default: the same call)
        (:meth:`muflow.dask.partitions.DaskRowPartitions.retrying`)."""
        return self.parts.retrying(call, restart=restart or self._begin, again=again)

    def _round_trip(self):
        """The candidates without a step (the first ones, and after a reactivation): one
        call per partition with what is due, a shrink or a reactivation. After a recovery
        the call is made again with every variable active again."""
        shrink_with, reactivate = self._shrink_with, self._reactivate
        self._shrink_with, self._reactivate = None, False
        return self._recovering(lambda: self._call(shrink_with, reactivate),
                                again=lambda: self._call(None, True))

    def _call(self, shrink_with, reactivate):
        t = time.perf_counter()
        none = np.zeros(0, dtype=np.int64)
        futures = [self.parts.send(i, "iterate", none, np.zeros(0), none, np.zeros(0),
                                   shrink_with, reactivate, self._k())
                   for i in range(len(self.parts.actors))]
        answers = self.parts.wait(futures)
        timings = self.timings
        timings["calls"] += time.perf_counter() - t
        timings["round_trips"] += 1
        timings["bytes_received"] += sum(row_bytes(a["X"]) + 7 * 8 * a["idx"].size for a in answers)
        return answers

    def _gradient(self) -> np.ndarray:
        """G of the whole column, pulled from the partitions (O(n))."""
        return np.concatenate([np.asarray(g) for g in
                               self._recovering(lambda: self.parts.call("gradient"))])

    def _pull(self, bias=0.0):
        """Pull G (O(n), once per certificate): the common KKT measure, F and the bias."""
        t = time.perf_counter()
        G = self._gradient()
        violation, bias = self.col.kkt(self.alpha, G, bias)
        F = self.col.objective(self.alpha, G)
        self.timings["kkt"] += time.perf_counter() - t
        return violation, F, bias


class PartitionedHome(ColumnHome):
    """Columns whose state lives on the partitions of a
    :class:`~muflow.dask.partitions.DaskRowPartitions`.

    ``timings`` of the solution add "round_trips" (an iteration's exchange with the
    partitions, its two calls to each, counts one; so does a call without a step),
    "bytes_sent" and "bytes_received" (the payload of the iterations' calls, all workers
    together) and "calls" (seconds in the calls without a step).
    """

    timing_keys = ("calls",)

    def __init__(self, parts):
        self.parts = parts

    def q_limit(self, q: int) -> int:
        """A working set's moved rows must fit in every partition's row cache."""
        slots = min(int(info["cache_slots"]) for info in self.parts.call("info"))
        return max(2, min(q, slots) // 2 * 2)

    def begin(self, cols, starts, timings, given=None) -> None:
        # each worker computes its slice of the start's gradient itself (``given`` unused)
        timings.update(round_trips=0, bytes_sent=0, bytes_received=0)

    def open(self, j, col, alpha, q, timings) -> PartitionedState:
        return PartitionedState(self.parts, col, alpha, q, timings)

    def progress(self, state, timings) -> dict:
        return {"active": state.n_valid - state.shrunk, "round_trips": timings["round_trips"]}


def solve_working_set_dask(problem: DualProblem, *, init=None, tol: float = 1e-3,
                           max_iter: int = 100_000, q: int | None = None, shrinking: bool = True,
                           callback=None, cache_mb=None) -> DualSolution:
    """The working-set solver on X partitioned over Dask workers: the loop of
    :func:`muflow.solvers.working_set.solve_working_set` (which comes here through the
    operator's :meth:`~muflow.dask.partitions.DaskRowPartitions.working_set_home`) on
    :class:`PartitionedHome`.

    Parameters
    ----------
    problem : DualProblem
        Its operator a :class:`~muflow.dask.partitions.DaskRowPartitions`; any intercept
        mode, per-sample bounds and linear term.
    init, tol, max_iter, q, shrinking, callback
        As :func:`~muflow.solvers.working_set.solve_working_set`.
    cache_mb : float, optional
        Resize each worker's row cache (default: what the partitions were made with).
    """
    if not getattr(problem.operator, "partitioned", False):
        raise MuflowInputError("solve_working_set_dask needs a problem on DaskRowPartitions")
    return solve_working_set(problem, init=init, tol=tol, max_iter=max_iter, q=q,
                             shrinking=shrinking, callback=callback, cache_mb=cache_mb)


__all__ = ["PartitionedHome", "PartitionedState", "default_q", "solve_working_set_dask",
           "stack_rows"]
