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
4. updates the whole gradient by the moved rows, G += y * (K[B, :]^T (y_B delta_B)), summed
   in float64 from the cached rows, in two sums: the rows cached before this step, on one
   thread while the other threads still compute B's new rows (a pass that only reads
   memory beside tiles that only compute), then the new rows.

Shrinking is libsvm's rule (Fan, Chen & Lin 2005, sec. 4; Chang & Lin, LIBSVM sec. 5.2):
bounded variables that the maximal violating pair says cannot move leave the active set,
which the selection scans; libsvm's unshrinking (every variable back once the gap is within
ten times the tolerance, and after a failed certificate) follows it. What differs from
libsvm is the gradient: libsvm computes rows over the active set only and so keeps only the
active variables' gradient, rebuilding the others' (its G_bar, plus the rows of the free
variables) before it checks them. Rows computed on demand here are whole rows of K
(``operator.rows``), so step 4 updates every variable's gradient for a few multiply-adds
per row, and a shrunk variable's gradient is never stale: nothing is rebuilt. (The G_bar
rebuild computes the free variables' rows again at every reactivation, rows this loop
computes once.) The point is certified on the whole set with the common KKT measure
(:mod:`muflow.solvers.kkt`) at that exact gradient; a failed certificate reactivates every
variable and the loop goes on, with a tighter internal gap if nothing was shrunk.

The loop stops where libsvm stops: when the maximal violating pair's gap is at most
``tol`` (libsvm's ``eps``, scikit-learn's ``tol``), so that a fit at the same ``tol`` is
never looser than the peer's (on 100,000 samples: a dual objective 2e-3 below
scikit-learn-intelex's where a gap of 2 tol left it 2e-3 above, for 8 % more time). With the
sum constraint that is a KKT violation of at most tol / 2 on the common measure, within the
solver contract's ``tol``.

The iteration itself (selection, subproblem, outer loop) is
:mod:`muflow.solvers.working_set_loop`'s, shared with the Dask home
(:mod:`muflow.dask.working_set`); this module is where the state lives in this process.

K is read only through ``operator.rows`` (via a :class:`~muflow.solvers.rowcache.RowCache`
that the m columns of a batch share: rows are of K, not of Q) and ``operator.diagonal``;
one product ``K @ V`` is taken only for a warm start (the start's gradient).
"""

from __future__ import annotations

import time

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.operators import require_rows
from muflow.solvers._working_set_compiled import (Threads, add_older_rows, add_rows,
                                                  gather_block)
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.rowcache import (DEFAULT_CACHE_MB, RowCache, row_cache,
                                     working_set_first_rows, working_set_rows)
from muflow.thread_pool import run_on_threads
from muflow.solvers._selection_compiled import (WORK_PER_ITEM, add_rows_sides, merge_maxima,
                                               shrink_pool, side_pass)
from muflow.solvers.active_set import HostActiveSet
from muflow.solvers.working_set_loop import (ColumnHome, PairView, default_q, projected_gradient,
                                             select_working_set, solve_columns)

__all__ = ["InProcessState", "InProcessHome", "check_q", "default_q", "solve_working_set"]


def check_q(q) -> None:
    """Refuse a working-set size that is not an even integer >= 2 (None: the default)."""
    if q is not None and (int(q) != q or q < 2 or q % 2):
        raise MuflowInputError(f"q (the working-set size) must be an even integer >= 2, got {q!r}")


#: Rows of K_BB a block (:meth:`InProcessState._rows_while_solving`): fixed, so that each
#: entry is computed by the same product whatever the number of threads.
ENTRY_BLOCK = 64


class InProcessState(HostActiveSet):
    """One column's state in this process: alpha, G and the active set as arrays here, rows
    of K from the :class:`~muflow.solvers.rowcache.RowCache` that every column of the batch
    shares.

    Parameters
    ----------
    col : Column
    cache : RowCache
    alpha, G : ndarray of shape (n,)
        A feasible start and its gradient Q alpha + p.
    QD : ndarray of shape (n,)
        The diagonal of K.
    threads : Threads
    timings : dict
        Receives counts and seconds.
    """

    def __init__(self, col, cache: RowCache, alpha, G, QD, threads: Threads, timings: dict):
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
        self._pool = None
        self._block = np.empty(0)
        self._pending = None
        self._fresh = None  # which of B's rows this step computes (not cached before it)
        self._entries = np.empty(0)
        # (ku, kl) while the pool's first act.size entries hold the violations at the
        # current alpha, G and active set (left there by extremes, the gradient update or
        # a shrink)
        self._maxima = None
        self._best = np.empty((self.threads.n_threads, 4))

    def _set_active(self, act) -> None:
        self.act = act
        self._maxima = None

    def extremes(self) -> float:
        act = self.act
        if act.size == 0:
            self._view = None
            return -np.inf
        if self.equality:
            pool = self._pool_arrays(act.size)
            if self._maxima is None:
                # one fused pass (eq. (9)) over the active set, a range of it per thread
                self.threads.split(side_pass, act.size, WORK_PER_ITEM, self.y, self.alpha,
                                   self.U, self.G, act, *pool)
            v_up, v_low, a, U = pool
            self._view = PairView(a, U, v_up=v_up, v_low=v_low, maxima=self._maxima)
            self._maxima = (self._view.ku, self._view.kl)
        else:
            a, U, g = self.alpha[act], self.U[act], self.G[act]
            self._view = PairView(a, U, projected=np.abs(projected_gradient(a, U, g)))
        return self._view.gap

    def _drop_leaving(self, gmax1, gmax2) -> np.ndarray:
        if not (self.equality and self._maxima is not None):
            return super()._drop_leaving(gmax1, gmax2)
        # the pool holds the current violations: the rule read from it in one pass, which
        # moves the variables kept to the front of the active set and of the pool, so that
        # the next extremes reads their violations without a pass of its own
        kept, dropped = shrink_pool(self.y, self.act, *self._pool_arrays(self.act.size), gmax1,
                                    gmax2, self._best)
        self.act = self.act[:kept]
        self._maxima = merge_maxima(self._best[:1])
        return dropped

    def _pool_arrays(self, size: int):
        """(v_up, v_low, a, U) over the first ``size`` active variables, in buffers kept for
        the solve (a fresh array of n a pass costs its page faults each iteration)."""
        if self._pool is None or self._pool.shape[1] < size:
            self._pool = np.empty((4, self.alpha.size))
        return tuple(self._pool[k, :size] for k in range(4))

    def _second_order(self, view, q, pos, slot_i, slot_j) -> np.ndarray:
        data = self.cache.data
        return select_working_set(
            view, q, pos, QD=self.QD, at=self.act,
            row_i=data[slot_i] if slot_i >= 0 else None,
            row_j=data[slot_j] if slot_j >= 0 else None, threads=self.threads)

    def fetch_rows(self, idx: np.ndarray) -> np.ndarray:
        """The cache slots of rows ``idx`` (distinct, at most the cache's slots), fetching
        the missing ones in one batch (:meth:`RowCache.slots_for`)."""
        self.timings["rows_requested"] += len(idx)
        slots, hits = self.cache.slots_for(idx)
        self.timings["cache_hits"] += hits
        return slots

    def subproblem(self, B):
        K_BB = self._rows_while_solving(B)
        if K_BB is None:
            # one buffer for every iteration: a fresh q x q array costs its page faults each time
            if self._block.size < B.size * B.size:
                self._block = np.empty(B.size * B.size)
            K_BB = self._block[: B.size * B.size].reshape(B.size, B.size)
            self._fresh = self.cache.slot_of[B] < 0
            self._slots = self.fetch_rows(B)
            self.threads.split(gather_block, B.size, B.size, self.cache.data, self._slots, B, K_BB)
        return K_BB, self.y[B], self.U[B], self.alpha[B].copy(), self.G[B]

    def _rows_while_solving(self, B):
        """K_BB computed from X (``operator.square_entries``, blocks of :data:`ENTRY_BLOCK`
        rows of B on the home's threads) in the cache's dtype, not gathered from the cached
        rows, so that it does not depend on what the cache holds (a row cache kept along a C
        path, a fresh one) nor on the threads; B's missing rows begin on the home's other
        threads while this one solves the subproblem, and it takes the rows left once it
        has solved (:meth:`_settle`): never more busy threads than the budget. The
        subproblem reads a float32 K_BB as it is (each entry widened as it is read). None
        where the operator cannot (rows copied from a stored K, K read in place)."""
        cache = self.cache
        square_entries = getattr(cache.operator, "square_entries", None)
        if square_entries is None or cache.in_place or cache.operator.dtype != cache.dtype:
            return None
        cached = cache.slot_of[B] >= 0
        self._fresh = ~cached
        self.timings["rows_requested"] += B.size
        self.timings["cache_hits"] += int(cached.sum())
        # K_BB first, on every thread; then the missing rows, on the others while this
        # one solves
        if self._entries.size < B.size * B.size:
            self._entries = np.empty(B.size * B.size, dtype=cache.dtype)
        entries = self._entries[: B.size * B.size].reshape(B.size, B.size)
        blocks = -(-B.size // ENTRY_BLOCK)
        part = square_entries(B)
        symmetric = getattr(part, "symmetric", None)
        if symmetric is not None:
            # exactly symmetric entries, a block from its diagonal on and mirrored: one
            # compiled loop a thread, taking blocks without the GIL between them
            deal = symmetric(entries, ENTRY_BLOCK)
            run_on_threads(lambda worker: deal(), self.threads.parts(blocks, ENTRY_BLOCK * B.size))
        else:
            def block(lo, hi):
                for k in range(lo, hi):
                    r0, r1 = k * ENTRY_BLOCK, min(B.size, (k + 1) * ENTRY_BLOCK)
                    part(r0, r1, entries[r0:r1])

            self.threads.split(block, blocks, ENTRY_BLOCK * B.size)
        rows, slots = cache.reserve_missing(B)
        if rows.size:
            self._pending = cache.begin_write(rows, slots)
        self._slots = np.ascontiguousarray(cache.slot_of[B])
        return entries

    def _settle(self) -> None:
        """Take this thread's share of the rows begun while the subproblem was solved, and
        wait for the rest."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.join()

    def step(self, B, gap, gap_tol, timings) -> bool:
        try:
            return super().step(B, gap, gap_tol, timings)
        finally:
            self._settle()

    def apply(self, B, new, moved, coef, change) -> None:
        self.alpha[B] = new
        self._maxima = None
        self.F += change
        # two sums: the rows cached before this step, on this thread while the others
        # compute the new rows (:func:`add_older_rows`), then the new ones
        fresh = None if self._fresh is None else self._fresh[moved]
        slots, coef, seconds = add_older_rows(self.threads, self.G, self.y, self.cache.data,
                                              self._slots[moved], coef, fresh, self._pending,
                                              self._settle)
        self.timings["gradient"] += seconds
        self.update_gradient(slots, coef)
        self.previous = np.sort(B)

    def update_gradient(self, slots, coef) -> None:
        """``G[t] += y_t sum_b coef_b K[row_b, t]`` for every t, from the rows at cache
        ``slots``: one product K[B, :]^T c, summed in float64. With the sum constraint the
        next selection's pass (eq. (9)) rides along (:func:`add_rows_sides`), a range per
        thread, and its maximal violators are merged here."""
        if len(slots) == 0:
            return
        t = time.perf_counter()
        n = self.y.shape[0]
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        act = self.act
        if self.equality and act.size:
            parts = self.threads.split_numbered(add_rows_sides, n, len(slots), self.G, self.y,
                                                self.cache.data, slots, coef, self.alpha,
                                                self.U, act, *self._pool_arrays(act.size),
                                                self._best)
            self._maxima = merge_maxima(self._best[:parts])
        else:
            self.threads.split(add_rows, n, len(slots), self.G, self.y, self.cache.data, slots,
                               coef)
        self.timings["gradient"] += time.perf_counter() - t

    def _host_gradient(self) -> np.ndarray:
        return self.G

    def certify(self) -> float:
        t = time.perf_counter()
        self.F = self.col.objective(self.alpha, self.G)
        violation, self.bias = self.col.kkt(self.alpha, self.G, self.bias)
        self.timings["kkt"] += time.perf_counter() - t
        return violation

    def gradient(self) -> np.ndarray:
        return self.G


class InProcessHome(ColumnHome):
    """Columns whose state lives in this process, over one row cache of ``cache_mb``.

    Parameters
    ----------
    operator : GramOperator
        Answers ``rows`` and ``diagonal`` (a stored Gram or rows computed on demand).
    cache_mb : float
    n_threads : int, optional
        Threads for the gradient updates; default the CPUs this process may use.
    """

    timing_keys = ("gradient", "shrink", "full_gradient")

    def __init__(self, operator, cache_mb: float = DEFAULT_CACHE_MB, n_threads: int | None = None,
                 q: int | None = None):
        require_rows(operator, "working_set")
        self.operator = operator
        self.cache = row_cache(operator, cache_mb, working_set_rows(q), working_set_first_rows(q))
        self.QD = np.ascontiguousarray(operator.diagonal(), dtype=np.float64)
        self.threads = Threads(n_threads)
        self.gradients = []

    def q_limit(self, q: int) -> int:
        return max(2, min(q, self.cache.slots) // 2 * 2)

    def begin(self, cols, starts, timings, given=None) -> None:
        """G = Q alpha + p of every column's start: p from zero, the gradient the warm start
        carried (``given[j]``, e.g. the previous C's scaled), else one product for the
        columns left."""
        timings.update(rows_requested=0, cache_hits=0, second_order_sides=0)
        given = [None] * len(cols) if given is None else given
        self.gradients = [G.copy() if G is not None else col.p.copy() if not np.any(a) else None
                          for col, a, G in zip(cols, starts, given)]
        left = [j for j, G in enumerate(self.gradients) if G is None]
        if not left:
            return
        t = time.perf_counter()
        V = np.column_stack([cols[j].y * starts[j] for j in left])
        product = self.operator.matmul_precise(V)
        timings["full_gradient"] += time.perf_counter() - t
        for k, j in enumerate(left):
            self.gradients[j] = np.ascontiguousarray(cols[j].y * product[:, k] + cols[j].p)

    def open(self, j, col, alpha, q, timings) -> InProcessState:
        return InProcessState(col, self.cache, alpha, self.gradients[j], self.QD, self.threads,
                              timings)

    def progress(self, state, timings) -> dict:
        return {"rows_computed": self.cache.rows_fetched,
                "rows_requested": timings["rows_requested"], "cache_hits": timings["cache_hits"],
                "active": int(state.act.size)}

    def finish(self, timings) -> None:
        self.threads.close()
        timings.update(self.cache.stats())
        self.cache.release()


def solve_working_set(problem: DualProblem, *, init=None, tol: float = 1e-3,
                      max_iter: int = 100_000, callback=None, cache_mb: float | None = None,
                      shrinking: bool = True, q: int | None = None,
                      n_threads: int | None = None, progress=None) -> DualSolution:
    """Working-set decomposition (SVMlight / ThunderSVM with WSS 2) on every column.

    Parameters
    ----------
    problem : DualProblem
        Any intercept mode, per-sample bounds and linear term; the operator must answer
        ``rows`` and ``diagonal`` (a stored Gram or rows computed on demand), or keep the
        state where X lives: an operator with a ``working_set_home(cache_mb)`` method (X
        partitioned over Dask workers, :class:`muflow.dask.partitions.DaskRowPartitions`)
        gives the home the same loop runs on.
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias[, gradient]) or DualSolution, optional
        Warm start; clipped to the box and, with the sum constraint, balanced
        (:meth:`Column.start`). Costs one product ``K @ V`` for the whole batch, none for
        the columns of a start ``(alpha, bias, gradient)`` whose gradient holds at the
        feasible start (:func:`muflow.solvers.problem.start_gradient`; the returned
        :attr:`DualSolution.gradient` is such a gradient).
    tol : float, default=1e-3
        The maximal violating pair's gap at which the loop stops (libsvm's ``eps``); the
        common KKT measure (:func:`muflow.solvers.kkt.kkt_violation`) certified is then at
        most ``tol`` (``tol / 2`` with the sum constraint).
    max_iter : int, default=100000
        Outer iterations at most per column (one working set solved, the gradient updated).
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` after every outer iteration; True stops.
    cache_mb : float, optional
        Row cache in MB, default 256 (partitioned X: each worker's, default the size its
        partitions were made with), shared by the m columns; it
        must hold the q rows of a working set, so q is lowered to what it holds (an
        in-memory K is read in place, no cache).
    shrinking : bool, default=True
        libsvm's shrinking of the set the selection scans (the gradient stays whole).
    q : int, optional
        Working-set size, even, at least 2; default :func:`default_q` (64 to 2048 from n),
        never more than the variables that can move.
    n_threads : int, optional
        Threads for the gradient updates in process; default the CPUs this process may use.
    progress : callable, optional
        Hears of every outer iteration: the KKT gap, rows computed, cache hits and the
        active set (:class:`muflow.progress.FitProgress`, which throttles itself).

    Returns
    -------
    DualSolution
        ``n_iter`` counts outer iterations (the most of any column); ``objective_curve``
        F after each. ``timings``: seconds in "select", "subproblem" (the SMO on K_BB),
        "kkt" and "total"; in process also "gradient", "shrink", "full_gradient" (a warm
        start's product), "fetch_seconds" (rows), counts "rows_requested" (rows of B asked
        of the cache), "cache_hits", "rows_fetched" (computed by the operator),
        "row_fetches" (its calls), "second_order_sides" (sides ranked by WSS 2),
        "max_shrunk" (with shrinking); always "subproblem_steps" (SMO pair steps) and "q".
        On Dask workers: see :class:`muflow.dask.working_set.PartitionedHome`.

    Notes
    -----
    Memory: the row cache (``cache_mb``), a few vectors of n per column and the q x q
    subproblem; K is never held whole unless the operator holds it.
    """
    check_q(q)
    q = int(q) if q is not None else default_q(problem.n)
    home_of = getattr(problem.operator, "working_set_home", None)
    if home_of is not None:
        home = home_of(cache_mb, q=q)
    else:
        home = InProcessHome(problem.operator, DEFAULT_CACHE_MB if cache_mb is None else cache_mb,
                             n_threads, q=q)
    q_max = home.q_limit(q)
    return solve_columns(problem, home, init=init, tol=tol, max_iter=max_iter, q=q_max,
                         shrinking=shrinking, callback=callback, progress=progress)
