"""Hybrid: multiplicative passes find the support set, a subset method finishes.

Both multiplicative papers point here (m3-multiplicative-updates-large-margin.txt,
section 4: the updates are parallel but slow to finish; subset methods are fast once the
working set is right). The hybrid runs in three phases:

1. batched multiplicative updates (:mod:`muflow.solvers.multiplicative`, every column in
   one pass over K) until the support set {i : alpha_i > threshold * scale} has stopped
   changing for ``stable_checks`` consecutive checks (every ``check_every`` passes);
2. per column, the coefficients below the threshold are set to zero (the papers' updates
   cannot reach zero themselves), the start is made feasible (box, sum constraint) and
   SMO (:mod:`muflow.solvers.smo`: pairs with the sum constraint, single coordinates
   without) optimises over the support set only;
3. a KKT check on the whole set with one product K @ v brings back every violator
   (natural residual above tol / 2) into the subset; phases 2-3 repeat until the common
   KKT measure holds.

``DualSolution.timings`` reports "multiplicative", "subset" and "kkt" seconds.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.operators import require_rows
from muflow.solvers._subset import Column, assemble, column_callback
from muflow.solvers.multiplicative import solve_multiplicative
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.rowcache import DEFAULT_CACHE_MB, row_cache
from muflow.solvers.smo import callback_interval, smo_column, sweeps


def _support(alpha, upper, threshold):
    scale = np.where(np.isfinite(upper), upper, np.maximum(alpha.max(axis=0, keepdims=True), 1e-300))
    return alpha > threshold * scale


def _subset_callback(callback, history, problem, alphas, curves, j, alpha, passes):
    """SMO's ``on_chunk`` for column j of the subset phase: ``callback`` (a
    :class:`muflow.time_limit.Deadline`) heard every :func:`callback_interval` steps, as
    :func:`muflow.solvers.smo.solve_smo` hears it, with the iteration counted after the
    multiplicative passes; once the callback has stopped the solve (in either phase), every
    later chunk stops at once, so the remaining columns are only certified."""
    if callback is None:
        return None
    on_sweep = column_callback(callback, problem, alphas, curves, j, alpha)
    n = max(problem.n, 1)

    def on_chunk(steps, F):
        if history["stopped"] or on_sweep(passes + sweeps(steps, n), F):
            history["stopped"] = True
        return history["stopped"]

    return on_chunk


def solve_hybrid(problem: DualProblem, *, init=None, tol: float = 1e-3, max_iter: int = 10_000,
                 callback=None, cache_mb: float = DEFAULT_CACHE_MB, rule: str | None = None,
                 box: str = "clip", check_every: int = 5, stable_checks: int = 2,
                 max_passes: int = 20, threshold: float = 1e-3) -> DualSolution:
    """Multiplicative phase, then SMO on the support set with KKT-driven growth.

    Parameters
    ----------
    problem : DualProblem
        Any intercept mode.
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
        Warm start of the multiplicative phase.
    tol : float, default=1e-3
        Common KKT measure to reach.
    max_iter : int, default=10000
        Iterations at most, multiplicative passes and subset sweeps (n SMO steps each)
        together: the subset phase gets ``(max_iter - passes) * n`` steps per column.
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` after every multiplicative pass, then
        every :func:`muflow.solvers.smo.callback_interval` steps of the subset phase
        (``iteration`` counting passes plus sweeps begun); returning True stops both phases
        (a :class:`muflow.time_limit.Deadline`: the subset phase is where most of the time
        goes).
    cache_mb : float, default=256
        Row cache of the subset phase, in MB.
    rule : {"m3", "munk", "seminmf", "musik"}, optional
        Multiplicative rule; default "munk" on a non-negative kernel, else "m3".
    box : {"clip", "flip"}, default="clip"
    check_every : int, default=5
        Passes between support-set comparisons.
    stable_checks : int, default=2
        Consecutive unchanged comparisons that end the multiplicative phase (a change of at
        most 1% of n counts as unchanged).
    max_passes : int, default=20
        Cap on the multiplicative phase (in memory a pass costs about as much as a few
        dozen SMO steps, so a long phase does not pay; see benchmarks/); ``max_iter``
        caps it too.
    threshold : float, default=1e-3
        A coefficient counts as support when above threshold * C_i (hard margin: times the
        column's largest coefficient).

    Returns
    -------
    DualSolution
        ``n_iter`` = multiplicative passes + subset sweeps begun (ceil(steps / n) for the
        column with the most steps), at most ``max_iter``; ``timings`` holds
        ``"multiplicative_passes"`` and ``"subset_steps"``; ``objective_curve`` is the
        multiplicative curve followed by the subset phase's.
    """
    require_rows(problem.operator, "hybrid")
    t_start = time.perf_counter()
    if rule is None:
        rule = "munk" if problem.operator.nonnegative else "m3"
    U = problem.upper
    history = {"prev": None, "stable": 0, "stopped": False}
    slack = max(2, int(0.01 * problem.n))

    def watch(iteration, alpha, objective):
        if callback is not None and callback(iteration, alpha, objective):
            history["stopped"] = True
            return True
        if iteration == 0 or iteration % check_every:
            return False
        support = _support(alpha, U, threshold)
        prev = history["prev"]
        history["prev"] = support
        if prev is not None and int((support != prev).sum(axis=0).max()) <= slack:
            history["stable"] += 1
        else:
            history["stable"] = 0
        return history["stable"] >= stable_checks

    mult = solve_multiplicative(problem, rule=rule, box=box, init=init, tol=tol,
                                max_iter=max(0, min(max_passes, max_iter)), callback=watch,
                                solver_name="hybrid")
    n = max(problem.n, 1)
    max_updates = max(0, max_iter - mult.n_iter) * n
    timings = {"multiplicative": time.perf_counter() - t_start, "multiplicative_passes": mult.n_iter}
    sub_timings: dict = {}
    alphas, biases, curves, viols, steps = [], [], [], [], 0
    cache = row_cache(problem.operator, cache_mb)
    t_sub = time.perf_counter()
    for j in range(problem.m):
        col = Column(problem, j)
        if mult.kkt_violation[j] <= tol:
            alphas.append(mult.alpha[:, j].copy())
            biases.append(mult.bias[j])
            curves.append(mult.objective_curve[:, j].copy())
            viols.append(mult.kkt_violation[j])
            continue
        support = _support(mult.alpha[:, [j]], U[:, [j]], threshold)[:, 0]
        alpha = col.start(np.where(support, mult.alpha[:, j], 0.0))
        on_chunk = _subset_callback(callback, history, problem, alphas, curves, j, alpha,
                                    mult.n_iter)
        a, b, curve, v, it = smo_column(col, cache, alpha, tol=tol, max_updates=max_updates,
                                        subset=support, grow="violators", on_chunk=on_chunk,
                                        chunk=callback_interval(n) if on_chunk else 65536,
                                        timings=sub_timings)
        alphas.append(a)
        biases.append(b)
        curves.append(np.concatenate([mult.objective_curve[:, j], _at_sweep_ends(curve, n)]))
        viols.append(v)
        steps = max(steps, it)
    subset_total = time.perf_counter() - t_sub
    timings["kkt"] = sub_timings.get("kkt", 0.0)
    timings["subset"] = subset_total - timings["kkt"]
    timings["subset_steps"] = steps
    timings.update(cache.stats())
    timings["total"] = time.perf_counter() - t_start
    return assemble(problem, alphas, biases, curves, viols, tol, timings, "hybrid",
                    mult.n_iter + sweeps(steps, n))


def _at_sweep_ends(curve, n: int) -> np.ndarray:
    """SMO's objective curve (its start, then F after every pair step) at the end of each
    sweep of ``n`` steps and at its last step: one value per iteration as hybrid counts
    them (:func:`muflow.solvers.smo.sweeps`), so that ``objective_curve`` has ``n_iter + 1``
    rows, as every solver's has (it had one per pair step)."""
    steps = len(curve) - 1
    ends = list(range(n, steps + 1, n)) + ([steps] if steps % n else [])
    return np.asarray(curve)[ends]
