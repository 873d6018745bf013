"""SMO with second-order working-set selection and shrinking (the libsvm algorithm).

For the exact intercept (``problem.equality``) each step optimises the pair (i, j) chosen
by WSS 2 of Fan, Chen & Lin, "Working set selection using second order information for
training support vector machines" (JMLR 6, 2005), section 3: i is the maximal violator
and j maximises the second-order decrease -(G_i-ish gap)^2 / (K_ii + K_jj - 2 K_ij); the
pair is solved in closed form and clipped to the box (Platt 1998; libsvm's update). The
bounds U_i are per sample (weighted SVM), the linear term p is general (drifted SVM).
Without the sum constraint the working set is the single most violating coordinate and
the step its exact minimiser (greedy coordinate descent), so ``smo`` serves every
intercept mode.

Shrinking follows libsvm: every ``min(n, 1000)`` steps, bounded variables that the
maximal violating pair says cannot move leave the active set, and the first time the active
set's gap falls to ten times the target (:data:`~muflow.solvers._subset.UNSHRINK_GAP`) they
all come back, once, with their gradient recomputed (libsvm's unshrinking, Chang & Lin 2011,
section 5.1; the working-set loop does the same). Without it a variable shrunk early stays
out until the active set meets the gap: where the active set's steps crawl (a nearly
singular block of free variables, as on a badly scaled polynomial kernel) its gap can stay
between tol and 10 tol for millions of steps while a shrunk variable violates the KKT
conditions by 0.8, and the loop never reaches the certificate that would bring it back.
The compiled loop stops when the active set meets the internal gap; the driver then
recomputes the full gradient with one product ``K @ v`` (the operator's cheapest question),
certifies the point with the common KKT measure and, if it falls short of ``tol``, brings
the variables back and goes on. Where the steps no longer lower the objective (a gap below what rounding lets the
pairs close: they cycle) the driver certifies as well, and the rule of
:class:`~muflow.solvers._subset.StallGuard`, which the working-set loop shares, gives up
where certificates stop improving; the point returned is the best one certified. The loop
stops as libsvm does, at an internal gap m(alpha) - M(alpha) <= tol: the
natural residual is then <= tol / 2 (the bias at the middle of the gap), so normally one
check suffices, and SVC(tol=...) stops where scikit-learn's SVC with the same tol stops.

A hard margin (C = inf) on data that are not separable raises, certified by the direction
of the iterate every chunk of steps (:mod:`muflow.solvers.unbounded`).

Rows of K come through ``operator.rows`` into a :class:`~muflow.solvers.rowcache.RowCache`
of ``cache_mb`` megabytes.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.operators import require_rows
from muflow.solvers import _compact_rows_compiled as cr
from muflow.solvers import _pairs_compiled as pc
from muflow.solvers import _subset_compiled as sc
from muflow.solvers._subset import (UNSHRINK_GAP, Column, StallGuard, assemble,
                                    column_callback)
from muflow.solvers.coordinate import column_state
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.rowcache import DEFAULT_CACHE_MB, RowCache, row_cache
from muflow.solvers.unbounded import check_bounded, hard_margin_scale


def sweeps(steps: int, n: int) -> int:
    """Sweeps begun after ``steps`` pair steps: SMO's iteration is a sweep of n steps."""
    return -(-int(steps) // max(int(n), 1))


def iteration_size(n: int, libsvm_iterations: bool) -> int:
    """Pair steps per SMO iteration: n (a sweep, muflow's unit) or 1 (libsvm's)."""
    return 1 if libsvm_iterations else max(int(n), 1)


#: Kernel values a column's pair steps may read between two calls of the callback (a
#: deadline's check): a pair step reads two rows over the active set and updates the
#: gradient there, so about this many steps' worth of n-long vectors, a few milliseconds.
CALLBACK_WORK = 1 << 22


def callback_interval(n: int) -> int:
    """Pair steps between callbacks on n samples: one sweep of n steps up to n = 2048, then
    ``CALLBACK_WORK / n`` (at least 64), so that the time between two checks of a deadline
    does not grow with n (a sweep of n steps is n^2 work: on a large stored K a time limit
    was overrun by several times itself)."""
    n = max(int(n), 1)
    return max(min(n, 64), min(n, CALLBACK_WORK // n))


COMPACT_ROWS_BYTES = 128 << 20


def compact_rows(n: int, dtype) -> tuple:
    """The arrays of the pair steps' compact-row cache (rows of K over the active set, see
    :func:`muflow.solvers._pairs_compiled.smo_pairs`): at most ``COMPACT_ROWS_BYTES`` of
    rows, and room for two at least (a step reads the rows of i and j at once), kept across
    the calls of one column so that a resumed call finds its rows again. The buffer is not
    touched until rows are stored in it."""
    dtype = np.dtype(dtype)
    size = max(2 * n, min(COMPACT_ROWS_BYTES // dtype.itemsize, n * n))
    return (np.empty(size, dtype=dtype), np.full(n, -1, dtype=np.int64),
            np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64),
            np.empty(n, dtype=np.int64), np.zeros(cr.CR_SIZE, dtype=np.int64))


def reactivate(act: np.ndarray, state: np.ndarray, member: np.ndarray) -> None:
    """Make the variables ``member`` the active set again (in index order, the others
    after them) and restart the count of steps to the next shrinking."""
    act[:] = np.concatenate([np.flatnonzero(member), np.flatnonzero(~member)])
    state[sc.STATE_NACT] = int(member.sum())
    state[sc.STATE_SHRINK] = 0


def smo_column(col: Column, cache: RowCache, alpha: np.ndarray, *, tol: float,
               max_updates: int, shrinking: bool = True, subset: np.ndarray | None = None,
               grow: str = "all", on_chunk=None, chunk: int = 65536, timings: dict):
    """Solve one column by SMO, starting from the feasible ``alpha`` (modified in place).

    Parameters
    ----------
    subset : ndarray of bool, shape (n,), optional
        Start with only these variables active (the others keep their values); the final
        full KKT check adds the violators. Default: every variable with U_i > 0.
    grow : {"all", "violators"}
        After a failed full check, reactivate every variable (libsvm's unshrinking) or
        only the current subset plus the violators (the hybrid's subset method).
    on_chunk : callable, optional
        ``on_chunk(updates, F)`` every ``chunk`` steps; returning True stops.

    Returns
    -------
    alpha, bias, curve (ndarray of F after every step), violation, updates
    """
    n = col.y.shape[0]
    valid = col.U > 0
    G, F, start, QD = column_state(col, alpha, timings)
    pieces = [np.asarray(start, dtype=np.float64)]  # F after every step, as the loop wrote it
    member = valid.copy() if subset is None else (np.asarray(subset, bool) & valid)
    act = np.concatenate([np.flatnonzero(member), np.flatnonzero(~member)]).astype(np.int64)
    state = np.zeros(sc.STATE_SIZE, dtype=np.int64)
    state[sc.STATE_PEND_I] = state[sc.STATE_PEND_J] = -1
    state[sc.STATE_NACT] = int(member.sum())
    guard = StallGuard(tol)  # its gap_tol: libsvm's eps (module notes)
    buf = np.empty(chunk)
    violation, bias = np.inf, 0.0
    shrink_every = min(n, 1000)
    data, slot_of, stamp, clock = cache.arrays
    compact = compact_rows(n, data.dtype) if col.equality else None
    # a hard margin: is the dual bounded? (muflow.solvers.unbounded)
    scale = hard_margin_scale(col.U, QD)
    stopped = False
    best = (np.inf, None, 0.0, 0.0)  # (violation, alpha, bias, F) of the best point certified
    # libsvm's unshrinking, once: the shrunk variables come back where the gap first falls
    # to 10 tol (module notes)
    unshrink_gap = UNSHRINK_GAP * guard.gap_tol if shrinking else -np.inf
    while True:
        t = time.perf_counter()
        if col.equality:
            status = pc.smo_pairs(col.y, col.U, alpha, G, QD, act, data, slot_of, stamp, clock,
                                  state, F, buf, guard.gap_tol, unshrink_gap, max_updates,
                                  shrinking, shrink_every, *compact)
        else:
            status = sc.smo_single(col.y, col.U, alpha, G, QD, act, data, slot_of, stamp,
                                   clock, state, F, buf, guard.gap_tol, max_updates, shrinking,
                                   shrink_every)
        timings["updates"] = timings.get("updates", 0.0) + time.perf_counter() - t
        if status == sc.NEED_ROW:
            cache.fetch([state[sc.STATE_NEED]])
            continue
        if status == sc.UNSHRINK:  # the curve's chunk goes on: the callbacks keep their pace
            unshrink_gap = -np.inf
            if int(state[sc.STATE_NACT]) < int(member.sum()):
                G = col.gradient(alpha)  # the shrunk variables' gradient was not kept
                F[0] = col.objective(alpha, G)
                reactivate(act, state, member)
            continue
        # a pending choice of i belongs to the loop that made it: recompute after a pause
        state[sc.STATE_PEND_I] = state[sc.STATE_PEND_J] = -1
        pieces.append(buf[: state[sc.STATE_CURVE]].copy())
        state[sc.STATE_CURVE] = 0
        if status == sc.CURVE_FULL:
            if scale is not None:  # C = inf: G = Q alpha + p where alpha > 0 (never shrunk)
                check_bounded(alpha, G - col.p, col.p, col.U, scale)
            if on_chunk is not None and on_chunk(int(state[sc.STATE_ITER]), F[0]):
                stopped = True
            elif not guard.flat(pieces[-1], int(state[sc.STATE_ITER])):
                continue
        # the active set is solved, its steps no longer lower F (a gap below rounding: the
        # pairs cycle) or the budget is spent: certify on the whole set
        t = time.perf_counter()
        G = col.gradient(alpha)
        F[0] = col.objective(alpha, G)
        violation, bias = col.kkt(alpha, G, bias)
        timings["kkt"] = timings.get("kkt", 0.0) + time.perf_counter() - t
        if violation < best[0]:
            best = (violation, alpha.copy(), bias, F[0])
        if scale is not None and violation > tol:
            check_bounded(alpha, G - col.p, col.p, col.U, scale)
        if violation <= tol or status == sc.MAX_ITER or stopped:
            break
        n_act = int(state[sc.STATE_NACT])
        if grow == "violators":
            r = col.residuals(alpha, G, bias)
            new = member | ((r > 0.5 * tol) & valid)
            go_on = guard.go_on(shrunk=new.sum() > member.sum(), violation=violation)
            member = new
        else:
            go_on = guard.go_on(shrunk=n_act < int(valid.sum()), violation=violation)
            member = valid.copy()
        if not go_on:
            break
        reactivate(act, state, member)
    if best[0] < violation:  # a later round ended worse (a stop amid cycling): the best back
        violation, alpha[:], bias, F[0] = best[0], best[1], best[2], best[3]
    curve = np.concatenate(pieces)
    curve[-1] = F[0]
    return alpha, bias, curve, violation, int(state[sc.STATE_ITER])


def solve_smo(problem: DualProblem, *, init=None, tol: float = 1e-3, max_iter: int = 10_000,
              callback=None, cache_mb: float = DEFAULT_CACHE_MB, shrinking: bool = True,
              callback_every: int | None = None, libsvm_iterations: bool = False) -> DualSolution:
    """SMO (WSS 2, shrinking) on every column of ``problem``.

    Parameters
    ----------
    problem : DualProblem
        Any intercept mode; with ``equality`` the pair steps keep sum_i y_i alpha_i = 0.
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
        Warm start; clipped to the box and, with the sum constraint, balanced by scaling
        the heavier class down.
    tol : float, default=1e-3
        Common KKT measure (:func:`muflow.solvers.kkt.kkt_violation`) to reach.
    max_iter : int, default=10000
        Sweeps at most, a sweep being n pair steps (libsvm's steps counted in units of the
        problem size): at most ``max_iter * n`` steps per column.
    callback : callable, optional
        ``callback(sweep, alpha, objective)`` every ``callback_every`` steps, ``sweep``
        counting sweeps begun; returning True stops (a :class:`muflow.time_limit.Deadline`).
    cache_mb : float, default=256
        Size of the row cache in MB.
    shrinking : bool, default=True
    callback_every : int, optional
        Steps between callbacks; default :func:`callback_interval` (once a sweep of n
        steps up to n = 2048, then fewer: the same work between checks at any n).
    libsvm_iterations : bool, default=False
        Count ``max_iter``, ``n_iter`` and the callback's iteration in libsvm's unit, single
        pair steps, instead of sweeps (:class:`muflow.SVC` does, as scikit-learn's SVC).

    Returns
    -------
    DualSolution
        ``n_iter`` counts sweeps begun, ceil(steps / n) (or steps), for the column with the
        most steps (at most ``max_iter``); ``timings["pair_steps"]`` holds those steps and
        ``objective_curve`` F after every step.
    """
    require_rows(problem.operator, "smo")
    t_start = time.perf_counter()
    timings = {}
    cache = row_cache(problem.operator, cache_mb)
    alpha0, bias0 = problem.check_init(init)
    n = max(problem.n, 1)
    size = iteration_size(n, libsvm_iterations)
    alphas, biases, curves, viols, iters, steps = [], [], [], [], 0, []
    for j in range(problem.m):
        col = Column(problem, j)
        alpha = col.start(None if alpha0 is None else alpha0[:, j])
        on_sweep = column_callback(callback, problem, alphas, curves, j, alpha)
        on_chunk = None if on_sweep is None else (lambda steps, F: on_sweep(sweeps(steps, size), F))
        a, b, curve, v, it = smo_column(
            col, cache, alpha, tol=tol, max_updates=max(0, max_iter) * size,
            shrinking=shrinking, on_chunk=on_chunk,
            chunk=(callback_every or callback_interval(n)) if callback is not None else 65536,
            timings=timings)
        alphas.append(a)
        biases.append(b)
        curves.append(curve)
        viols.append(v)
        iters = max(iters, it)
        steps.append(it)
    timings["pair_steps"] = iters
    timings.update(cache.stats())
    timings["total"] = time.perf_counter() - t_start
    return assemble(problem, alphas, biases, curves, viols, tol, timings, "smo", sweeps(iters, size),
                    column_iters=steps)
