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

- the client sends the working set B: its indices alone where every worker holds a copy
  of X (:mod:`muflow.dask.row_blocks`), O(q), else with its rows of X (dense X: less the
  partition's own, which it holds), O(q d), to each partition. One partition, the solver
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

import time

import numpy as np
import scipy.sparse as sp

from muflow.dask.answered_rows import HeldRows
from muflow.dask.candidates import CandidatePool, row_bytes, stack_rows
from muflow.dask.exchange import exchange
from muflow.dask.partition_column import PartitionColumn, held
from muflow.exceptions import MuflowInputError
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.working_set import solve_working_set
from muflow.solvers.working_set_loop import (ColumnHome, ColumnState, default_q,
                                             previous_positions, select_working_set)


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
        self._held_rows = [HeldRows() for _ in parts.actors]  # candidates' rows (answered_rows)
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
        previous = previous_positions(pool.idx, self.previous)  # both sorted
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
        """X_B as partition i is sent it: none where every worker holds a copy of X
        (:mod:`muflow.dask.row_blocks`), else dense rows less its own, which it holds
        (:meth:`PartitionColumn._whole`), and CSR rows whole."""
        if self.parts.copied:
            return None
        if sp.issparse(XB):
            return XB
        lo, hi = self.parts.bounds[i]
        return XB[~held(B, lo, hi)]

    def _answered(self, candidates) -> None:
        """The partitions' candidates become the pool the loop selects from; their rows of
        X from this process's X, or from the answers and those kept here
        (:class:`muflow.dask.answered_rows.HeldRows`)."""
        parts = self.parts
        if parts.rows_here:
            self._pool = CandidatePool(candidates, self.equality, parts.take)
        else:
            rows = [held.complete(answer, lambda ids, i=i: parts.wait(
                        [parts.send(i, "rows", ids - parts.bounds[i][0])])[0])
                    for i, (held, answer) in enumerate(zip(self._held_rows, candidates))]
            self._pool = CandidatePool(candidates, self.equality, rows=rows)
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


__all__ = ["PartitionColumn", "PartitionedHome", "PartitionedState", "default_q",
           "solve_working_set_dask", "stack_rows"]
