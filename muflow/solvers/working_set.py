"""Working-set decomposition with a large working set (SVMlight / ThunderSVM), rows on demand.

The decomposition of Joachims, "Making large-scale SVM learning practical" (1999, SVMlight),
as ThunderSVM's ``CSMOSolver`` runs it (Wen et al., JMLR 19, 2018): every outer iteration

1. chooses a working set B of q variables. With the sum constraint, q/2 come from I_up and
   q/2 from I_low, ranked by the second-order rule WSS 2 of Fan, Chen & Lin, "Working set
   selection using second order information for training support vector machines" (JMLR 6,
   2005, eq. (14)): a variable of I_low by the decrease of its pair with the maximal violator
   i of I_up, -(b_it)^2 / a_it, a variable of I_up by its pair with the maximal violator j of
   I_low; both violators are always in B (their pair alone guarantees progress). The rule
   reads the violators' rows; a side whose violator's row is not cached is ranked by b_it
   alone (first order, as ThunderSVM's selection), so that every row of B still comes in
   one batch. Without the sum constraint, the q variables with the largest projected
   gradient. The part of the previous B that is still useful (free, or still violating)
   is kept, at most q/2 of it, as ThunderSVM keeps half of its previous set, so half of
   B's rows are already cached;
2. fetches the rows of B that the row cache lacks, in one batch (``operator.rows``);
3. solves the q-variable subproblem in process with the compiled SMO
   (:func:`muflow.solvers.smo.smo_column`) on K_BB: the same bounds, the linear term
   G_B - Q_BB alpha_B (so that its gradient at alpha_B is G_B), the sum of y_B alpha_B kept,
   to a tolerance a tenth of the current gap;
4. updates the whole gradient with one product, G += y * (K[B, :]^T (y_B delta_B)), summed
   in float64 from the cached rows.

Shrinking is libsvm's rule (Fan, Chen & Lin 2005, sec. 4; Chang & Lin, LIBSVM sec. 5.2):
bounded variables that the maximal violating pair says cannot move leave the active set,
which the selection scans; libsvm's unshrinking (every variable back once the gap is within
ten times the tolerance, and after a failed certificate) follows it. What differs from
libsvm is the gradient: libsvm computes rows over the active set only and so keeps only the
active variables' gradient, rebuilding the others' (its G_bar, plus the rows of the free
variables) before it checks them. Rows computed on demand here are whole rows of K
(``operator.rows``), so step 4 updates every variable's gradient for a few multiply-adds
per row, and a shrunk variable's gradient is never stale: nothing is rebuilt. (The G_bar
rebuild was measured: on 30,000 samples with 19,000 free support vectors it computed
61,000 rows where this computes 29,600.) The point is certified on the whole set with the
common KKT measure (:mod:`muflow.solvers.kkt`) at that exact gradient; a failed certificate
reactivates every variable and the loop goes on, with a tighter internal gap if nothing was
shrunk.

The loop stops where libsvm stops: when the maximal violating pair's gap is at most
``tol`` (libsvm's ``eps``, scikit-learn's ``tol``), so that a fit at the same ``tol`` is
never looser than the peer's (on 100,000 samples: a dual objective 2e-3 below
scikit-learn-intelex's where a gap of 2 tol left it 2e-3 above, for 8 % more time). With the
sum constraint that is a KKT violation of at most tol / 2 on the common measure, within the
solver contract's ``tol``.

K is read only through ``operator.rows`` (via a :class:`~muflow.solvers.rowcache.RowCache`
that the m columns of a batch share: rows are of K, not of Q) and ``operator.diagonal``;
one product ``K @ V`` is taken only for a warm start (the start's gradient).
"""

from __future__ import annotations

import time

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.inmemory import _blas_single_threaded
from muflow.operators import DenseGram, require_rows
from muflow.solvers import _pairs_compiled as pc
from muflow.solvers import _subset_compiled as sc
from muflow.solvers._subset import Column, assemble, column_callback
from muflow.solvers._working_set_compiled import Threads, add_rows, gather_block
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.rowcache import DEFAULT_CACHE_MB, RowCache
from muflow.solvers.smo import smo_column

_TAU = 1e-12  # libsvm's floor on a pair's curvature


def default_q(n: int) -> int:
    """The working-set size for n samples: the power of two nearest 4 sqrt(n), in [64, 2048]
    (ThunderSVM's default is 512 at n ~ 10^4 to 10^5)."""
    q = 2 ** int(round(np.log2(4.0 * np.sqrt(max(int(n), 1)))))
    return int(np.clip(q, 64, 2048))


def check_q(q) -> None:
    """Refuse a working-set size that is not an even integer >= 2 (None: the default)."""
    if q is not None and (int(q) != q or q < 2 or q % 2):
        raise MuflowInputError(f"q (the working-set size) must be an even integer >= 2, got {q!r}")


def _smallest(values: np.ndarray, k: int) -> np.ndarray:
    """Positions of the (at most) k smallest finite entries of ``values``."""
    finite = np.flatnonzero(np.isfinite(values))
    k = min(k, finite.size)
    if k <= 0:
        return finite[:0]
    if k < finite.size:
        finite = finite[np.argpartition(values[finite], k - 1)[:k]]
    return finite


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


def _ordered_unique(parts) -> np.ndarray:
    """The indices of ``parts`` in order of first appearance, each once."""
    idx = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    _, first = np.unique(idx, return_index=True)
    return idx[np.sort(first)]


class ColumnState:
    """One column's decomposition state: alpha, its gradient and the active set.

    The seam for the distributed solver (the Dask issue): the outer loop talks to the state
    only through :meth:`extremes` and :meth:`candidates` ("select candidates from my slice
    of the gradient"), :meth:`fetch_rows` ("fetch rows of B") and :meth:`update_gradient`
    ("update my slice of the gradient with K[B, :]^T delta"). A worker holding entries
    [lo, hi) of G and alpha and the columns [lo, hi) of its cached rows answers the same
    questions for its slice (the driver merges the extremes by max and the candidates by
    their gains); the q x q subproblem stays on the driver.

    Parameters
    ----------
    col : Column
    cache : RowCache
        Shared by every column of the batch.
    alpha, G : ndarray of shape (n,)
        A feasible start and its gradient Q alpha + p.
    QD : ndarray of shape (n,)
        The diagonal of K.
    threads : Threads
    timings : dict
        Receives counts and seconds.
    """

    def __init__(self, col: Column, cache: RowCache, alpha, G, QD, threads: Threads,
                 timings: dict):
        self.col = col
        self.y, self.U, self.p = col.y, col.U, col.p
        self.equality = col.equality
        self.cache = cache
        self.alpha = alpha
        self.G = G
        self.QD = QD
        self.threads = threads
        self.timings = timings
        self.valid = self.U > 0
        self.act = np.flatnonzero(self.valid).astype(np.int64)
        self.previous = np.zeros(0, dtype=np.int64)
        self.F = col.objective(alpha, G)
        self.bias = 0.0
        self._view = None
        self._block = np.empty(0)

    # ---- the seam: candidates from my slice, rows of B, my slice of the gradient ----

    def extremes(self) -> float:
        """The active set's gap, with its maximal violators remembered for the selection.

        With the sum constraint: m(alpha) - M(alpha) = max_{I_up} -y G + max_{I_low} y G
        (Fan, Chen & Lin 2005, eq. (9)); without it: max |projected gradient|.
        """
        act = self.act
        if act.size == 0:
            self._view = None
            return -np.inf
        y, a, U = self.y[act], self.alpha[act], self.U[act]
        g = self.G[act]
        v = {"y": y, "a": a, "U": U}
        if self.equality:
            yG, up, low, v_up, v_low = side_violations(y, a, U, g)
            if not up.any() or not low.any():
                self._view = None
                return -np.inf
            ku, kl = int(np.argmax(v_up)), int(np.argmax(v_low))
            v.update(yG=yG, up=up, low=low, ku=ku, kl=kl, gmax=v_up[ku], gmax2=v_low[kl],
                     score=np.maximum(v_up + v_low[kl], np.where(low, yG + v_up[ku], -np.inf)))
            self._view = v
            return float(v_up[ku] + v_low[kl])
        v.update(g=g, score=np.abs(projected_gradient(a, U, g)))
        self._view = v
        return float(v["score"].max())

    def candidates(self, q: int) -> np.ndarray:
        """The working set (global indices, at most q): the maximal violators, the useful
        part of the previous set (at most q/2, most violating first), then new variables by
        the second-order gain (sum constraint, q/2 a side) or the projected gradient."""
        v, act = self._view, self.act
        score, a, U = v["score"], v["a"], v["U"]
        free = (a > 0) & (a < U)
        # the previous set's positions in the (sorted) active set; shrunk ones are gone
        pos = np.minimum(np.searchsorted(act, self.previous), act.size - 1)
        pos = pos[act[pos] == self.previous]
        useful = pos[(score[pos] > 0) | free[pos]]
        kept = useful[np.argsort(-score[useful], kind="stable")[: q // 2]]
        taken = np.zeros(act.size, dtype=bool)
        taken[kept] = True
        if not self.equality:
            gain = np.where(score > 0, -score, np.inf)
            gain[taken] = np.inf
            new = _smallest(gain, q - kept.size)
            return np.sort(act[_ordered_unique([new, kept])][:q])
        ku, kl = v["ku"], v["kl"]
        anchors = np.array([ku, kl], dtype=np.int64)
        taken[anchors] = True
        need = q - int(taken.sum())
        QD, yG = self.QD[act], v["yG"]
        b_up = -yG + v["gmax2"]
        b_low = yG + v["gmax"]
        # second order: each side by its pair with the other side's maximal violator,
        # whose row the cache holds more often than not (it was in a recent B); when it
        # does not, that side is ranked by its violation alone (first order, a = 1) and the
        # row comes with B's batch, not in a call of its own
        slot_i, slot_j = self.cache.slot_of[act[ku]], self.cache.slot_of[act[kl]]
        data = self.cache.data
        self.timings["second_order_sides"] += int(slot_i >= 0) + int(slot_j >= 0)
        a_up = np.maximum(QD + QD[kl] - 2.0 * data[slot_j][act], _TAU) if slot_j >= 0 else 1.0
        a_low = np.maximum(QD[ku] + QD - 2.0 * data[slot_i][act], _TAU) if slot_i >= 0 else 1.0
        gain_up = np.where(v["up"] & (b_up > 0) & ~taken, -(b_up * b_up) / a_up, np.inf)
        gain_low = np.where(v["low"] & (b_low > 0) & ~taken, -(b_low * b_low) / a_low, np.inf)
        new_up = _smallest(gain_up, need // 2)
        gain_low[new_up] = np.inf
        new_low = _smallest(gain_low, need - new_up.size)
        if new_up.size + new_low.size < need:  # one side ran short: the other fills B
            gain_up[new_low] = np.inf
            gain_up[new_up] = np.inf
            extra = _smallest(gain_up, need - new_up.size - new_low.size)
            new_up = np.concatenate([new_up, extra])
        # sorted: K_BB is then gathered from rows of K in address order
        return np.sort(act[_ordered_unique([anchors, kept, new_up, new_low])][:q])

    def fetch_rows(self, idx: np.ndarray) -> np.ndarray:
        """The cache slots of rows ``idx`` (distinct, at most the cache's slots), fetching
        the missing ones in one batch; the cached ones are touched first so that the batch
        evicts none of them."""
        idx = np.asarray(idx, dtype=np.int64)
        cache = self.cache
        cached = cache.slot_of[idx] >= 0
        self.timings["rows_requested"] += idx.size
        self.timings["cache_hits"] += int(cached.sum())
        if not cache.in_place and not cached.all():
            cache.clock[0] += 1
            cache.stamp[cache.slot_of[idx[cached]]] = cache.clock[0]
            cache.fetch(idx[~cached])
        return np.ascontiguousarray(cache.slot_of[idx])

    def update_gradient(self, slots, coef) -> None:
        """``G[t] += y_t sum_b coef_b K[row_b, t]`` for every t, from the rows at cache
        ``slots``: one product K[B, :]^T c, summed in float64."""
        if len(slots) == 0:
            return
        t = time.perf_counter()
        self.threads.split(add_rows, self.y.shape[0], len(slots), self.G, self.y, self.cache.data,
                           np.ascontiguousarray(slots, dtype=np.int64),
                           np.ascontiguousarray(coef, dtype=np.float64))
        self.timings["gradient"] += time.perf_counter() - t

    # ---- one outer iteration ----

    def step(self, B: np.ndarray, gap: float, gap_tol: float) -> bool:
        """Solve the subproblem on B and update the gradient; False when nothing moved."""
        slots = self.fetch_rows(B)
        t = time.perf_counter()
        # one buffer for every iteration: a fresh q x q array costs its page faults each time
        if self._block.size < B.size * B.size:
            self._block = np.empty(B.size * B.size)
        K_BB = self._block[: B.size * B.size].reshape(B.size, B.size)
        gather_block(self.cache.data, slots, B, K_BB)
        yB, UB = self.y[B], self.U[B]
        aB = self.alpha[B].copy()
        # Q_BB alpha_B with K_BB as the updates read it (row b of K for variable b)
        lin = self.G[B] - yB * (K_BB.T @ (yB * aB))
        sub = Column(DualProblem(DenseGram(K_BB), yB, upper=UB, linear=lin,
                                 equality=self.equality), 0)
        scale = 2.0 if self.equality else 1.0
        scratch = {}
        new, _, curve, _, steps = smo_column(
            sub, RowCache(sub.problem.operator), aB.copy(), tol=0.1 * max(gap_tol, gap) / scale,
            max_updates=50 * B.size + 1000, timings=scratch)
        self.timings["subproblem"] += time.perf_counter() - t
        self.timings["subproblem_steps"] += steps
        delta = new - aB
        moved = np.flatnonzero(delta != 0.0)
        if moved.size == 0:
            return False
        self.alpha[B] = new
        self.F += curve[-1] - curve[0]
        self.update_gradient(slots[moved], yB[moved] * delta[moved])
        self.previous = np.sort(B)
        return True

    # ---- shrinking and certification ----

    def shrink(self) -> None:
        """libsvm's shrinking of the active set (the compiled rules SMO uses)."""
        t = time.perf_counter()
        v, act = self._view, self.act
        n_act = act.size
        if self.equality:
            yG = np.ascontiguousarray(v["yG"])
            holes_and_sources = np.empty(n_act, dtype=np.int64), np.empty(n_act, dtype=np.int64)
            kept, _ = pc.shrink_compact(self.y, self.alpha, self.G, act, act.copy(),
                                        v["y"].copy(), v["U"].copy(), v["a"].copy(), yG,
                                        self.QD[act], v["up"].copy(), v["low"].copy(), n_act,
                                        *holes_and_sources)
        else:
            kept = sc._shrink_single(self.U, self.alpha, self.G, act, n_act, float(v["score"].max()))
        self.act = np.sort(act[:kept])
        self._view = None
        self.timings["max_shrunk"] = max(self.timings.get("max_shrunk", 0), self.shrunk)
        self.timings["shrink"] += time.perf_counter() - t

    @property
    def shrunk(self) -> int:
        return int(self.valid.sum()) - self.act.size

    def reactivate(self) -> None:
        """Every variable active again (their gradient is exact: see the module's notes)."""
        self.act = np.flatnonzero(self.valid).astype(np.int64)
        self._view = None

    def certify(self):
        """The common KKT measure on the whole set."""
        t = time.perf_counter()
        self.F = self.col.objective(self.alpha, self.G)
        violation, self.bias = self.col.kkt(self.alpha, self.G, self.bias)
        self.timings["kkt"] += time.perf_counter() - t
        return violation


def _solve_column(state: ColumnState, *, q: int, tol: float, max_iter: int, shrinking: bool,
                  on_iter, curve: list, report=None) -> tuple[float, int]:
    """The outer loop on one column until certified, stalled or ``max_iter``; returns
    (violation, outer iterations). ``report(iteration, gap, target)``, when given, hears
    of every outer iteration (:class:`muflow.progress.FitProgress` through
    :func:`_reporter`)."""
    gap_tol = tol  # libsvm's stop (module notes): a residual <= tol / 2 with the sum constraint
    shrink_every = max(1, min(state.y.shape[0], 1000) // q)  # libsvm: every 1000 steps
    it, since_shrink, unshrunk, stalls = 0, 0, False, 0
    timings = state.timings
    while True:
        stopped = False
        while it < max_iter:
            t = time.perf_counter()
            gap = state.extremes()
            if shrinking and since_shrink >= shrink_every and gap > gap_tol:
                state.shrink()
                since_shrink = 0
                gap = state.extremes()
            if shrinking and not unshrunk and gap <= 10.0 * gap_tol:
                unshrunk = True
                if state.shrunk:
                    state.reactivate()
                    gap = state.extremes()
            if not gap > gap_tol:
                timings["select"] += time.perf_counter() - t
                break
            B = state.candidates(q)
            timings["select"] += time.perf_counter() - t
            moved = state.step(B, gap, gap_tol)
            it += 1
            since_shrink += 1
            curve.append(state.F)
            if report is not None:
                report(it, gap, gap_tol)
            if on_iter is not None and on_iter(it, state.F):
                stopped = True
                break
            if not moved:
                break
        violation = state.certify()
        curve[-1] = state.F
        if violation <= tol or it >= max_iter or stopped:
            return violation, it
        if state.shrunk == 0:
            stalls += 1
            if stalls > 20:  # the gap cannot be closed further (rounding): give up uncertified
                return violation, it
            gap_tol *= 0.25
        state.reactivate()


def solve_working_set(problem: DualProblem, *, init=None, tol: float = 1e-3,
                      max_iter: int = 100_000, callback=None, cache_mb: float = DEFAULT_CACHE_MB,
                      shrinking: bool = True, q: int | None = None,
                      n_threads: int | None = None, progress=None) -> DualSolution:
    """Working-set decomposition (SVMlight / ThunderSVM with WSS 2) on every column.

    Parameters
    ----------
    problem : DualProblem
        Any intercept mode, per-sample bounds and linear term; the operator must answer
        ``rows`` and ``diagonal`` (a stored Gram or rows computed on demand), or be X
        partitioned over Dask workers (:class:`muflow.dask_working_set.DaskRowPartitions`,
        solved by :func:`muflow.dask_working_set.solve_working_set_dask`).
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
        Warm start; clipped to the box and, with the sum constraint, balanced
        (:meth:`Column.start`). Costs one product ``K @ V`` for the whole batch.
    tol : float, default=1e-3
        The maximal violating pair's gap at which the loop stops (libsvm's ``eps``); the
        common KKT measure (:func:`muflow.solvers.kkt.kkt_violation`) certified is then at
        most ``tol`` (``tol / 2`` with the sum constraint).
    max_iter : int, default=100000
        Outer iterations at most per column (one working set solved, the gradient updated).
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` after every outer iteration; True stops.
    cache_mb : float, default=256
        Row cache in MB, shared by the m columns; it must hold the q rows of a working set,
        so q is lowered to what it holds (an in-memory K is read in place, no cache).
    shrinking : bool, default=True
        libsvm's shrinking of the set the selection scans (the gradient stays whole).
    q : int, optional
        Working-set size, even, at least 2; default :func:`default_q` (64 to 2048 from n),
        never more than the variables that can move.
    n_threads : int, optional
        Threads for the gradient updates; default the CPUs this process may use.
    progress : callable, optional
        Hears of every outer iteration: the KKT gap, rows computed, cache hits and the
        active set (:class:`muflow.progress.FitProgress`, which throttles itself).

    Returns
    -------
    DualSolution
        ``n_iter`` counts outer iterations (the most of any column); ``objective_curve``
        F after each. ``timings``: seconds in "select", "subproblem" (K_BB and its SMO),
        "gradient", "shrink", "kkt", "full_gradient" (a warm start's product), "fetch_seconds"
        (rows) and "total"; counts "rows_requested" (rows of B asked of the cache),
        "cache_hits", "rows_fetched" (computed by the operator), "row_fetches" (its calls),
        "subproblem_steps" (SMO pair steps), "second_order_sides" (sides ranked by WSS 2),
        "max_shrunk" (with shrinking) and "q".

    Notes
    -----
    Memory: the row cache (``cache_mb``), a few vectors of n per column and the q x q
    subproblem; K is never held whole unless the operator holds it.
    """
    if getattr(problem.operator, "partitioned", False):
        # X partitioned over Dask workers: the same loop, one round trip an iteration
        from muflow.dask_working_set import solve_working_set_dask

        return solve_working_set_dask(problem, init=init, tol=tol, max_iter=max_iter, q=q,
                                      shrinking=shrinking, callback=callback)
    require_rows(problem.operator, "working_set")
    check_q(q)
    t_start = time.perf_counter()
    timings = dict.fromkeys(("select", "subproblem", "gradient", "shrink", "kkt", "full_gradient"),
                            0.0)
    timings.update(rows_requested=0, cache_hits=0, subproblem_steps=0, second_order_sides=0)
    n, m = problem.n, problem.m
    cache = RowCache(problem.operator, cache_mb)
    q_max = int(q) if q is not None else default_q(n)
    q_max = max(2, min(q_max, cache.slots) // 2 * 2)
    timings["q"] = q_max
    QD = np.ascontiguousarray(problem.operator.diagonal(), dtype=np.float64)
    alpha0, _ = problem.check_init(init)
    cols = [Column(problem, j) for j in range(m)]
    starts = [col.start(None if alpha0 is None else alpha0[:, j]) for j, col in enumerate(cols)]
    Gs = _start_gradients(problem, cols, starts, timings)
    threads = Threads(n_threads)
    alphas, biases, curves, viols, iters = [], [], [], [], 0
    try:
        for j, col in enumerate(cols):
            state = ColumnState(col, cache, starts[j], Gs[j], QD, threads, timings)
            curve = [state.F]
            on_iter = column_callback(callback, problem, alphas, curves, j, state.alpha)
            n_free = int(state.valid.sum())
            qj = max(2, min(q_max, n_free + n_free % 2))
            report = _reporter(progress, state, timings, column=j, columns=m)
            # BLAS on one thread: its calls here are small (K_BB products) and OpenBLAS's idle
            # threads spin on the cores that the row panels and gradient updates use
            with _blas_single_threaded():
                v, it = _solve_column(state, q=qj, tol=tol, max_iter=max(0, int(max_iter)),
                                      shrinking=shrinking, on_iter=on_iter, curve=curve,
                                      report=report)
            alphas.append(state.alpha)
            biases.append(state.bias if col.equality else 0.0)
            curves.append(curve)
            viols.append(v)
            iters = max(iters, it)
    finally:
        threads.close()
    timings.update(cache.stats())
    timings["outer_iterations"] = iters
    timings["total"] = time.perf_counter() - t_start
    return assemble(problem, alphas, biases, curves, viols, tol, timings, "working_set", iters)


def _reporter(progress, state: ColumnState, timings: dict, *, column: int, columns: int):
    """``report(iteration, gap, target)`` for :func:`_solve_column` that hands ``progress``
    what the state and the row cache know; None without ``progress``."""
    if progress is None:
        return None
    n = state.y.shape[0]

    def report(iteration, gap, target):
        progress(iteration=iteration, gap=float(gap), target=float(target),
                 rows_computed=state.cache.rows_fetched, rows_requested=timings["rows_requested"],
                 cache_hits=timings["cache_hits"], active=int(state.act.size), n=n,
                 column=column, columns=columns)

    return report


def _start_gradients(problem, cols, starts, timings):
    """G = Q alpha + p of every column's start: p from zero, else one product for the batch."""
    if not any(np.any(a) for a in starts):
        return [col.p.copy() for col in cols]
    t = time.perf_counter()
    V = np.column_stack([col.y * a for col, a in zip(cols, starts)])
    product = problem.operator.matmul_precise(V)
    timings["full_gradient"] += time.perf_counter() - t
    return [np.ascontiguousarray(col.y * product[:, j] + col.p) for j, col in enumerate(cols)]
