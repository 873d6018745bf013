"""The working-set iteration, written once; where its state lives is behind :class:`ColumnHome`.

The decomposition of Joachims, "Making large-scale SVM learning practical" (1999, SVMlight),
as ThunderSVM's ``CSMOSolver`` runs it (Wen et al., JMLR 19, 2018). One outer iteration:

1. the gap of the active set and its maximal violators (:class:`PairView`, Fan, Chen & Lin,
   "Working set selection using second order information for training support vector
   machines", JMLR 6, 2005, eq. (9));
2. a working set B of q variables (:func:`select_working_set`: WSS 2, eq. (14), q/2 a side,
   the useful half of the previous B kept as ThunderSVM keeps it);
3. the q x q subproblem on K_BB (:func:`solve_subproblem`, the compiled SMO);
4. the gradient updated by one product K[B, :]^T (y_B delta_B);
5. shrinking every 1000 steps, libsvm's unshrinking near the end, and a certificate on the
   whole set with the common KKT measure (:func:`run_column`, :class:`~muflow.solvers._subset.StallGuard`).

The loop (:func:`run_column`) and the batch driver (:func:`solve_columns`) talk to the state
only through :class:`ColumnState`'s methods: ``extremes``, ``candidates``, ``step``,
``shrink``, ``reactivate``, ``certify``. Two homes implement it today, as ThunderSVM twins
each backend function behind one header:

- this process (:class:`muflow.solvers.working_set.InProcessHome`): rows of K from the
  operator through the one :class:`~muflow.solvers.rowcache.RowCache`;
- X partitioned over Dask workers (:class:`muflow.dask.working_set.PartitionedHome`): each
  worker holds its slices of alpha, G and its cache of rows over its columns, and answers
  its best candidates; the client merges them and keeps the subproblem.

A GPU home would be a third.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.inmemory import _blas_single_threaded
from muflow.solvers._block_compiled import block_smo
from muflow.solvers._subset import (UNSHRINK_GAP, Column, StallGuard, assemble,
                                    column_callback)
from muflow.solvers.unbounded import bounded_check, hard_margin_scale
from muflow.solvers._selection_compiled import WORK_PER_ITEM, choose_working_set, pair_gains
from muflow.solvers._working_set_compiled import Threads
from muflow.solvers.problem import DualProblem, DualSolution, start_gradient
from muflow.solvers.top_k import SAMPLE, smallest

def default_q(n: int) -> int:
    """The working-set size for n samples: the power of two nearest 4 sqrt(n), in [64, 2048]
    (ThunderSVM's default is 512 at n ~ 10^4 to 10^5)."""
    q = 2 ** int(round(np.log2(4.0 * np.sqrt(max(int(n), 1)))))
    return int(np.clip(q, 64, 2048))


def side_violations(y, a, U, G):
    """WSS 2's index sets and violations (Fan, Chen & Lin 2005, eq. (9)): ``(yG, up, low,
    v_up, v_low)`` with I_up = {y = +1, a < U} u {y = -1, a > 0}, I_low the mirror, and
    ``v_up = -yG`` on I_up, ``v_low = yG`` on I_low (-inf outside)."""
    yG = y * G
    up = np.where(y > 0, a < U, a > 0)
    low = np.where(y > 0, a > 0, a < U)
    return yG, up, low, np.where(up, -yG, -np.inf), np.where(low, yG, -np.inf)


def projected_gradient(a, U, G):
    """The gradient projected on the box [0, U] (no sum constraint): its size is the
    violation of each variable."""
    return np.where(a <= 0.0, np.minimum(G, 0.0), np.where(a >= U, np.maximum(G, 0.0), G))


def sorted_lookup(sorted_ids: np.ndarray, ids) -> tuple[np.ndarray, np.ndarray]:
    """``(at, found)``: where each of ``ids`` is in the ascending ``sorted_ids`` (``at[k]``
    is its position where ``found[k]``), by one binary search."""
    ids = np.asarray(ids)
    if sorted_ids.size == 0:
        return np.zeros(ids.size, dtype=np.int64), np.zeros(ids.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), sorted_ids.size - 1)
    return at, sorted_ids[at] == ids


def previous_positions(act: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Positions in the (sorted) active set ``act`` of the previous working set's variables
    that are still active (shrunk ones are gone)."""
    at, found = sorted_lookup(act, previous)
    return at[found]


class PairView:
    """The violations of a pool of variables (the active set in process, the workers' merged
    candidates on a cluster) and what selection and shrinking read of them.

    With the sum constraint the gap is m(alpha) - M(alpha) = max_{I_up} -y G +
    max_{I_low} y G (Fan, Chen & Lin 2005, eq. (9)), its maximal violators ``ku`` and ``kl``
    (positions in the pool); without it the largest projected gradient, whose size
    (``score``) ranks how much each variable violates.

    Parameters
    ----------
    a, U : ndarray
        alpha and the upper bounds of the pool.
    v_up, v_low : ndarray, optional
        With the sum constraint: ``-yG`` on I_up and ``yG`` on I_low, -inf outside.
    projected : ndarray, optional
        Without it: the size of the projected gradient.
    maxima : (int, int), optional
        ``(argmax v_up, argmax v_low)`` where the caller found them in a pass of its own
        (:func:`muflow.solvers._selection_compiled.merge_maxima`).
    """

    def __init__(self, a, U, *, v_up=None, v_low=None, projected=None, maxima=None):
        self.a, self.U = a, U
        self.equality = projected is None
        if not self.equality:
            self.score = projected
            self.gap = float(projected.max()) if projected.size else -np.inf
            self.extremes = (self.gap, self.gap)
            return
        self.v_up, self.v_low = v_up, v_low
        if maxima is not None:
            self.ku, self.kl = maxima
        else:
            self.ku, self.kl = (int(np.argmax(v_up)), int(np.argmax(v_low))) if v_up.size else (0, 0)
        if not v_up.size or v_up[self.ku] == -np.inf or v_low[self.kl] == -np.inf:
            self.gap, self.extremes = -np.inf, None
            return
        gmax, gmax2 = v_up[self.ku], v_low[self.kl]
        self.extremes = (float(gmax), float(gmax2))
        self.gap = float(gmax + gmax2)


def select_working_set(view: PairView, q: int, previous, *, QD=None, row_i=None,
                       row_j=None, at=None, threads=None) -> np.ndarray:
    """Positions in the pool of the working set (at most q), in the order chosen.

    The maximal violators first, then the useful part of the previous set (``previous``:
    its positions in the pool, ascending; at most q/2 kept, most violating first), then new
    variables: with the sum constraint, q/2 a side by WSS 2's gain (Fan, Chen & Lin 2005,
    eq. (14)), a variable of I_low by the decrease -(b_it)^2 / a_it of its pair with the
    maximal violator i of I_up and a variable of I_up by its pair with the violator j of
    I_low, where a_it = K_ii + K_tt - 2 K_it reads the violators' rows ``row_i`` / ``row_j``
    (None: that side ranked by b_it alone, first order); without it, the largest projected
    gradients.

    Parameters
    ----------
    view : PairView
    q : int
    previous : ndarray of int
    QD : ndarray, optional
        K_tt (sum constraint), at the positions ``at`` of the pool's variables.
    row_i, row_j : ndarray, optional
        K[i, :] and K[j, :] for the violators i = ``view.ku`` and j = ``view.kl``, at the
        positions ``at``.
    at : ndarray of int, optional
        Where the pool's variables are in ``QD`` and the rows (default: the pool's order).
    threads : Threads, optional
        Shares the compiled passes over the pool out
        (:class:`muflow.solvers._working_set_compiled.Threads`); default this thread.
    """
    a, U = view.a, view.U
    size = a.size
    threads = Threads(1) if threads is None else threads
    if not view.equality:
        score = view.score
        useful = previous[(score[previous] > 0) | ((a[previous] > 0) & (a[previous] < U[previous]))]
        kept = useful[np.argsort(-score[useful], kind="stable")[: q // 2]]
        gain = np.where(score > 0, -score, np.inf)
        gain[kept] = np.inf
        # kept's gains are +inf, so the new ones are others: at most q in all, each once
        return np.concatenate([smallest(gain, q - kept.size, threads), kept])
    ku, kl = view.ku, view.kl
    gmax, gmax2 = view.extremes
    at = np.arange(size, dtype=np.int64) if at is None else at
    QD = np.asarray(QD, dtype=np.float64)
    # a side without its violator's row reads an empty one of the other's dtype: one
    # compiled variant of pair_gains per cache dtype, not one per combination
    known = row_i if row_i is not None else row_j
    none = np.zeros(0, dtype=np.float64 if known is None else known.dtype)
    gain_up, gain_low = np.empty(size), np.empty(size)
    threads.split(pair_gains, size, WORK_PER_ITEM, view.v_up, view.v_low, QD, at, float(QD[at[ku]]), float(QD[at[kl]]),
          none if row_i is None else row_i, none if row_j is None else row_j,
          float(gmax), float(gmax2), gain_up, gain_low)
    # the rest in one compiled call: the previous set's useful part, the sides' smallest
    # gains (top_k.smallest's steps) and the order chosen
    v_up, v_low, a, U = (np.ascontiguousarray(v, dtype=np.float64)
                         for v in (view.v_up, view.v_low, a, U))
    return choose_working_set(v_up, v_low, a, U, np.ascontiguousarray(previous, dtype=np.int64),
                              int(ku), int(kl), float(gmax), float(gmax2), gain_up, gain_low, int(q), SAMPLE)


def solve_subproblem(K_BB, yB, UB, aB, GB, *, equality: bool, gap: float, gap_tol: float):
    """The q-variable subproblem on B by SMO on the dense block
    (:func:`muflow.solvers._block_compiled.block_smo`, one compiled call).

    The same bounds, the gradient G_B at alpha_B (the subproblem's linear term is
    G_B - Q_BB alpha_B), the sum of y_B alpha_B kept, solved to an internal gap of a tenth of
    the current one (half of that with the sum constraint, whose KKT measure is half its gap).

    Returns
    -------
    new : ndarray
        alpha_B after the subproblem.
    change : float
        The change of the objective F: g'd + d'Q d / 2 = (G_B + G_B') d / 2 for the step d,
        with G_B' the subproblem's gradient after it.
    steps : int
        SMO steps taken.
    """
    new = np.array(aB, dtype=np.float64)
    G = np.array(GB, dtype=np.float64)
    scale = 2.0 if equality else 1.0
    # a float32 K_BB (the row cache's, the workers' dtype) is read as is: its entries are
    # widened one by one in the compiled loop, the same steps as a float64 copy's
    K_BB = np.ascontiguousarray(K_BB, dtype=K_BB.dtype if K_BB.dtype == np.float32 else np.float64)
    steps = block_smo(K_BB,
                      np.ascontiguousarray(yB, dtype=np.float64),
                      np.ascontiguousarray(UB, dtype=np.float64), new, G, bool(equality),
                      0.1 * max(gap_tol, gap) / scale, 50 * aB.size + 1000)
    change = 0.5 * float(np.dot(GB + G, new - aB))
    return new, change, steps


def step_of(new, aB, yB) -> tuple[np.ndarray, np.ndarray]:
    """The moved positions of B and their y_b (new_b - alpha_b), in process and on Dask."""
    moved = np.flatnonzero(np.asarray(new) != np.asarray(aB))
    return moved, np.asarray(yB)[moved] * (np.asarray(new)[moved] - np.asarray(aB)[moved])


class ColumnState:
    """The seam: one column's working-set state, wherever it lives.

    The outer loop (:func:`run_column`) calls only these. An implementation holds alpha,
    the gradient G = Q alpha + p and the active set (in process, on Dask workers, on a
    GPU), fetches rows of K for the working set and updates G by one product per step.

    Attributes
    ----------
    alpha : ndarray of shape (n,)
        The iterate (complete after :meth:`certify`).
    F : float
        The objective, kept up to date by :meth:`step` and made exact by :meth:`certify`.
    bias : float
        The bias of the last certificate.
    """

    alpha: np.ndarray
    F: float
    bias: float = 0.0

    def extremes(self) -> float:
        """The active set's gap (-inf when no pair can move), its view kept for
        :meth:`candidates` and :meth:`shrink`."""
        raise NotImplementedError

    def candidates(self, q: int) -> np.ndarray:
        """The working set B: global indices, sorted (:func:`select_working_set`)."""
        raise NotImplementedError

    def subproblem(self, B):
        """``(K_BB, y_B, U_B, alpha_B, G_B)``: the data of the subproblem on B."""
        raise NotImplementedError

    def apply(self, B, new, moved, coef, change) -> None:
        """Take alpha_B = ``new`` and update G by ``K[B[moved], :]^T coef``."""
        raise NotImplementedError

    def shrink(self) -> None:
        """libsvm's shrinking of the active set with the current extremes."""
        raise NotImplementedError

    def reactivate(self) -> None:
        """Every variable active again."""
        raise NotImplementedError

    @property
    def shrunk(self) -> int:
        """Variables shrunk out of the active set (or at least 1 while a shrink is due)."""
        raise NotImplementedError

    def certify(self) -> float:
        """The common KKT measure on the whole set at the exact gradient; sets F and bias."""
        raise NotImplementedError

    def gradient(self) -> np.ndarray | None:
        """G = Q alpha + p of the whole column where this process holds it (a warm start
        from this solution then skips its product), else None."""
        return None

    def solve_on(self, B: np.ndarray, gap: float, gap_tol: float, timings: dict):
        """The subproblem on B solved (:func:`solve_subproblem` on :meth:`subproblem`'s
        data, its seconds and SMO steps added to ``timings``): ``(new, change, y_B,
        alpha_B)``. A home may solve it elsewhere (the Dask home: on a worker)."""
        K_BB, yB, UB, aB, GB = self.subproblem(B)
        t = time.perf_counter()
        new, change, steps = solve_subproblem(K_BB, yB, UB, aB, GB, equality=self.equality,
                                              gap=gap, gap_tol=gap_tol)
        timings["subproblem"] += time.perf_counter() - t
        timings["subproblem_steps"] += steps
        return new, change, yB, aB

    def step(self, B: np.ndarray, gap: float, gap_tol: float, timings: dict) -> bool:
        """Solve the subproblem on B and apply it; False when nothing moved."""
        new, change, yB, aB = self.solve_on(B, gap, gap_tol, timings)
        moved, coef = step_of(new, aB, yB)
        if moved.size:
            self.apply(B, new, moved, coef, change)
        return bool(moved.size)


def run_column(state: ColumnState, *, q: int, n: int, tol: float, max_iter: int,
               shrinking: bool, timings: dict, on_iter=None, curve: list, report=None,
               bounded=None) -> tuple[float, int]:
    """The outer loop on one column until certified, stalled or ``max_iter``.

    The loop stops where libsvm stops: when the maximal violating pair's gap is at most
    ``tol`` (libsvm's ``eps``), a KKT violation of at most tol / 2 on the common measure
    with the sum constraint. Shrinking every 1000 steps (q variables a step), libsvm's
    unshrinking once the gap is within ten times the target, and a certificate at the end
    (:class:`~muflow.solvers._subset.StallGuard` after a failed one).

    Returns
    -------
    (violation, outer iterations). ``report(iteration, gap, target)``, when given, hears of
    every outer iteration; ``on_iter(iteration, F)`` returning True stops;
    ``bounded(state)`` every :data:`HARD_MARGIN_EVERY` iterations raises on an unbounded
    hard margin (:func:`muflow.solvers.unbounded.bounded_check`).
    """
    guard = StallGuard(tol)
    shrink_every = max(1, min(n, 1000) // q)  # libsvm: every 1000 steps
    it, since_shrink, unshrunk = 0, 0, False
    while True:
        stopped = False
        gap_tol = guard.gap_tol
        while it < max_iter:
            t = time.perf_counter()
            gap = state.extremes()
            if shrinking and since_shrink >= shrink_every and gap > gap_tol:
                state.shrink()
                since_shrink = 0
                gap = state.extremes()
            if shrinking and not unshrunk and gap <= UNSHRINK_GAP * gap_tol:
                unshrunk = True
                if state.shrunk:
                    state.reactivate()
                    gap = state.extremes()
            if not gap > gap_tol:
                timings["select"] += time.perf_counter() - t
                break
            B = state.candidates(q)
            timings["select"] += time.perf_counter() - t
            moved = state.step(B, gap, gap_tol, timings)
            it += 1
            since_shrink += 1
            curve.append(state.F)
            if report is not None:
                report(it, gap, gap_tol)
            if on_iter is not None and on_iter(it, state.F):
                stopped = True
                break
            if bounded is not None and it % HARD_MARGIN_EVERY == 0:
                bounded(state)
            if not moved:
                break
        violation = state.certify()
        curve[-1] = state.F
        if violation <= tol or it >= max_iter or stopped:
            return violation, it
        if not guard.go_on(shrunk=state.shrunk > 0):
            return violation, it
        state.reactivate()


#: Outer iterations between two tests of a hard margin's boundedness.
HARD_MARGIN_EVERY = 16


class ColumnHome:
    """Where the columns' states live: opens one :class:`ColumnState` per column.

    :func:`solve_columns` calls :meth:`begin` with every column's feasible start, then
    :meth:`open` per column, and :meth:`close` at the end.
    """

    #: Timing keys (seconds) this home reports besides the loop's own.
    timing_keys: tuple = ()

    def q_limit(self, q: int) -> int:
        """The largest working set this home can hold (its row cache)."""
        return q

    def begin(self, cols, starts, timings: dict, given=None) -> None:
        """Prepare for the batch (e.g. the starts' gradients by one product); ``given``:
        per column the start's gradient where the warm start carried it (:func:`given_gradients`),
        else None."""

    def open(self, j: int, col: Column, alpha: np.ndarray, q: int, timings: dict) -> ColumnState:
        raise NotImplementedError

    def progress(self, state: ColumnState, timings: dict) -> dict:
        """What :class:`muflow.progress.FitProgress` hears of the state."""
        return {}

    def finish(self, timings: dict) -> None:
        """Add the home's counters to ``timings``; release what it holds."""


def solve_columns(problem: DualProblem, home: ColumnHome, *, init, tol: float, max_iter: int,
                  q: int, shrinking: bool, callback=None, progress=None) -> DualSolution:
    """Every column of ``problem`` by :func:`run_column` on states that ``home`` opens.

    Columns are solved one after another (rows of K are shared through the home's cache);
    BLAS runs on one thread meanwhile: its calls here are small (K_BB products) and
    OpenBLAS's idle threads spin on the cores that the row panels and gradient updates use.
    """
    t_start = time.perf_counter()
    timings = dict.fromkeys(("select", "subproblem", "kkt") + home.timing_keys, 0.0)
    timings.update(subproblem_steps=0, q=q)
    n, m = problem.n, problem.m
    alpha0, _ = problem.check_init(init)
    cols = [Column(problem, j) for j in range(m)]
    starts = [col.start(None if alpha0 is None else alpha0[:, j]) for j, col in enumerate(cols)]
    given = given_gradients(start_gradient(init, n, m), alpha0, starts)
    alpha0 = None  # the clipped copy of the start: the columns' starts are made from it
    alphas, biases, curves, viols, iters, gradients, each = [], [], [], [], 0, [], []
    scale = hard_margin_scale(problem.upper, problem.operator)
    try:
        home.begin(cols, starts, timings, given)
        for j, col in enumerate(cols):
            n_free = int((col.U > 0).sum())
            qj = max(2, min(q, n_free + n_free % 2))
            # the hold begins before the state opens: its objective's dot product over n
            # (OpenBLAS threads it from 10,000 entries) would leave BLAS's idle threads
            # spinning into the loop's first iterations
            with _blas_single_threaded():
                state = home.open(j, col, starts[j], qj, timings)
                curve = [state.F]
                on_iter = column_callback(callback, problem, alphas, curves, j, state.alpha)
                report = _reporter(progress, home, state, timings, n=n, column=j, columns=m)
                v, it = run_column(state, q=qj, n=n, tol=tol, max_iter=max(0, int(max_iter)),
                                   shrinking=shrinking, timings=timings, on_iter=on_iter,
                                   curve=curve, report=report,
                                   bounded=bounded_check(col, scale))
            alphas.append(state.alpha)
            biases.append(state.bias if col.equality else 0.0)
            curves.append(curve)
            viols.append(v)
            iters = max(iters, it)
            each.append(it)
            gradients.append(state.gradient())
            # the column's vectors (y, U, p: copies where m > 1) go with it
            cols[j] = col = state = report = on_iter = None
    finally:
        home.finish(timings)
    timings["outer_iterations"] = iters
    timings["total"] = time.perf_counter() - t_start
    kept = gradients if all(G is not None for G in gradients) else None
    return assemble(problem, alphas, biases, curves, viols, tol, timings, "working_set", iters,
                    gradients=kept, column_iters=each)


def given_gradients(G0, alpha0, starts) -> list:
    """Per column the warm start's gradient ``G0[:, j]`` where it holds at the feasible
    start (``starts[j]``, clipped and balanced from ``alpha0[:, j]``), else None: where the
    start moved by more than rounding (its gradient would be another point's) or the
    gradient is not finite (the start did not know it)."""
    if G0 is None or alpha0 is None:
        return [None] * len(starts)
    out = []
    for j, start in enumerate(starts):
        G, a = G0[:, j], alpha0[:, j]
        scale = max(1.0, float(np.max(np.abs(a), initial=0.0)))
        same = np.max(np.abs(start - a), initial=0.0) <= 1e-12 * scale
        out.append(np.ascontiguousarray(G) if same and np.all(np.isfinite(G)) else None)
    return out


def _reporter(progress, home: ColumnHome, state: ColumnState, timings: dict, *, n: int,
              column: int, columns: int):
    """``report(iteration, gap, target)`` for :func:`run_column` that hands ``progress``
    what the home knows of the state; None without ``progress``."""
    if progress is None:
        return None

    def report(iteration, gap, target):
        progress(iteration=iteration, gap=float(gap), target=float(target), n=n, column=column,
                 columns=columns, **home.progress(state, timings))

    return report
