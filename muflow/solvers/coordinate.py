"""Dual coordinate descent on the kernel dual (the d >= n form; LIBLINEAR style).

svm-variants-coordinate-descent.txt, eq. (4) and the "d >= n" update after it: visit the
coordinates one at a time and take the exact one-variable step

    delta_i = max(-alpha_i, min(U_i - alpha_i, -G_i / Q_ii)),    G = Q alpha + p,

keeping G up to date with the row K_i (G_t += delta_i y_i y_t K_it). The same update
solves the paper's variants unchanged: the weighted SVM through U_i = C_i, the drifted SVM
through p = -(e - dbar) (dbar_i = y_i d_i). There is no sum constraint, so this serves
``intercept="none"`` and ``"regularized"`` (the kernel's offset carries the bias).

As LIBLINEAR (Hsieh et al. 2008, sec. 3.1-3.2): a random permutation of the active
coordinates every epoch, and shrinking of bounded variables whose gradient lies outside
the previous epoch's projected-gradient range. When an epoch's projected gradient is
within ``tol`` the full gradient is recomputed with one product (shrunk variables' entries
are stale) and the point is certified with the common KKT measure; a failed check
brings every variable back.

A hard margin (C = inf) on data that are not separable raises, certified every epoch by
the direction of the iterate (:mod:`muflow.solvers.unbounded`).

The Kernel Adatron (:mod:`muflow.solvers.adatron`) is this loop in its original form:
sequential sweeps in index order, rate eta / K_ii, no shrinking.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.operators import require_rows
from muflow.solvers import _subset_compiled as sc
from muflow.solvers._subset import Column, assemble, column_callback
from muflow.solvers.unbounded import check_bounded, hard_margin_scale
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.rowcache import DEFAULT_CACHE_MB, RowCache, row_cache


def column_state(col: Column, alpha: np.ndarray, timings: dict):
    """What a column's loop starts from: the exact gradient G (one product, timed as
    ``"full_gradient"``), F in a one-element array the compiled loop updates, the curve
    [F] and the diagonal of Q (= diagonal of K, as y_i^2 = 1)."""
    t = time.perf_counter()
    G = col.gradient(alpha)
    timings["full_gradient"] = timings.get("full_gradient", 0.0) + time.perf_counter() - t
    F = np.array([col.objective(alpha, G)])
    QD = col.problem.operator.diagonal().astype(np.float64)
    return G, F, [F[0]], QD


def cd_column(col: Column, cache: RowCache, alpha: np.ndarray, *, tol: float, max_epochs: int,
              rng, shuffle: bool, shrinking: bool, eta: float, on_epoch=None, timings: dict):
    """Coordinate descent on one column from ``alpha`` (modified in place).

    Returns alpha, bias, curve (F per epoch), violation, epochs, updates.
    """
    valid = col.U > 0
    G, F, curve, QD = column_state(col, alpha, timings)
    active = valid.copy()
    bounds = np.array([np.inf, -np.inf, -np.inf, np.inf])
    state = np.zeros(sc.STATE_SIZE, dtype=np.int64)
    data, slot_of, stamp, clock = cache.arrays
    batch = max(1, min(cache.slots // 2, 256))
    stale = False
    violation, bias = np.inf, 0.0
    epochs = 0
    checked = False
    # a hard margin: is the dual bounded? (muflow.solvers.unbounded)
    scale = hard_margin_scale(col.U, QD)
    while epochs < max_epochs:
        act = np.flatnonzero(active).astype(np.int64)
        order = rng.permutation(act) if shuffle else act
        bounds[2], bounds[3] = -np.inf, np.inf
        state[sc.STATE_POS] = 0
        t = time.perf_counter()
        while True:
            status = sc.cd_epoch(col.y, col.U, alpha, G, QD, order, act, act.size, active,
                                 data, slot_of, stamp, clock, state, F, bounds, shrinking, eta)
            if status != sc.NEED_ROW:
                break
            pos = int(state[sc.STATE_POS])
            window = order[pos: pos + 4 * batch]
            missing = window[slot_of[window] < 0][:batch]
            cache.fetch(missing)
        timings["updates"] = timings.get("updates", 0.0) + time.perf_counter() - t
        epochs += 1
        if active.sum() < act.size:
            stale = True
        curve.append(F[0])
        pg_max, pg_min = bounds[2], bounds[3]
        if act.size == 0 or max(abs(pg_max), abs(pg_min)) <= tol:
            t = time.perf_counter()
            if stale:
                G = col.gradient(alpha)
                F[0] = col.objective(alpha, G)
                curve[-1] = F[0]
                stale = False
            violation, bias = col.kkt(alpha, G)
            timings["kkt"] = timings.get("kkt", 0.0) + time.perf_counter() - t
            checked = True
            if violation <= tol:
                break
            active = valid.copy()
            bounds[0], bounds[1] = np.inf, -np.inf
        else:
            checked = False
            bounds[0] = pg_max if pg_max > 0 else np.inf
            bounds[1] = pg_min if pg_min < 0 else -np.inf
        if scale is not None:  # G = Q alpha + p wherever alpha > 0 (never shrunk there)
            check_bounded(alpha, G - col.p, col.p, col.U, scale)
        if on_epoch is not None and on_epoch(epochs, F[0]):
            break
    if not checked:
        G = col.gradient(alpha)
        F[0] = col.objective(alpha, G)
        curve[-1] = F[0]
        violation, bias = col.kkt(alpha, G)
    return alpha, bias, curve, violation, epochs, int(state[sc.STATE_ITER])


def solve_coordinate(problem: DualProblem, *, init=None, tol: float = 1e-3,
                     max_iter: int = 10_000, callback=None, cache_mb: float = DEFAULT_CACHE_MB,
                     shuffle: bool = True, shrinking: bool = True, eta: float = 1.0,
                     random_state=0, solver_name: str = "cd") -> DualSolution:
    """Dual coordinate descent on every column of ``problem`` (no sum constraint).

    Parameters
    ----------
    problem : DualProblem
        ``equality`` must be False (use ``smo`` for the exact intercept).
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
        Warm start, clipped to the box.
    tol : float, default=1e-3
        Common KKT measure to reach.
    max_iter : int, default=10000
        Epochs at most, an epoch being one step on every active coordinate.
    callback : callable, optional
        ``callback(epoch, alpha, objective)`` after every epoch; returning True stops.
    cache_mb : float, default=256
        Size of the row cache in MB.
    shuffle, shrinking : bool, default=True
        Random permutation per epoch; LIBLINEAR's shrinking.
    eta : float, default=1.0
        Step as a fraction of the exact coordinate minimiser (0 < eta < 2 converges).
    random_state : int, default=0

    Returns
    -------
    DualSolution
        ``n_iter`` counts epochs (the most of any column, at most ``max_iter``);
        ``timings["coordinate_updates"]`` the single steps.
    """
    from muflow.exceptions import SolverCombinationError

    require_rows(problem.operator, solver_name)
    if problem.equality:
        raise SolverCombinationError(
            f"solver {solver_name!r} has no sum constraint and cannot give the exact "
            "intercept; use solver='smo' (or 'hybrid'), or intercept='regularized'"
        )
    if not 0.0 < eta < 2.0:
        raise ValueError(f"eta must lie in (0, 2) for coordinate descent to converge, got {eta!r}")
    t_start = time.perf_counter()
    timings = {"coordinate_updates": 0}
    cache = row_cache(problem.operator, cache_mb)
    rng = np.random.default_rng(random_state)
    alpha0, _ = problem.check_init(init)
    alphas, biases, curves, viols, epochs_max, epochs = [], [], [], [], 0, []
    for j in range(problem.m):
        col = Column(problem, j)
        alpha = col.start(None if alpha0 is None else alpha0[:, j])
        on_epoch = column_callback(callback, problem, alphas, curves, j, alpha)
        a, b, curve, v, ep, upd = cd_column(col, cache, alpha, tol=tol, max_epochs=max_iter,
                                            rng=rng, shuffle=shuffle, shrinking=shrinking,
                                            eta=eta, on_epoch=on_epoch, timings=timings)
        alphas.append(a)
        biases.append(b)
        curves.append(curve)
        viols.append(v)
        epochs_max = max(epochs_max, ep)
        epochs.append(ep)
        timings["coordinate_updates"] += upd
    timings.update(cache.stats())
    timings["total"] = time.perf_counter() - t_start
    return assemble(problem, alphas, biases, curves, viols, tol, timings, solver_name, epochs_max,
                    column_iters=epochs)
