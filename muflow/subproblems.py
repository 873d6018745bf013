"""Columns of a batch solved each on an operator over its own samples.

A column of a :class:`~muflow.solvers.DualProblem` may hold only some of the n samples, the
others pinned at alpha = 0 by an upper bound of 0: a one-vs-one pair holds the samples of
its two classes (:func:`muflow.multiclass.binary_problems`). On a stored K that costs
nothing; on rows computed on demand every row of the column is computed over all n samples
where the column reads 2n/k of them, and a row cache of ``cache_mb`` holds k/2 times fewer
rows than it could. :func:`solve_on_own_samples` instead solves column j on
``operator.restricted(idx_j)`` (:meth:`muflow.kernel_rows.KernelRows.restricted`), K over
its samples alone, and scatters the solution back: libsvm's one-vs-one does the same
(``svm_train`` copies each pair's samples into a problem of its own, with its own cache).

The solution is the batch's: a pinned sample's alpha is 0 in both, the objective
1/2 a'Qa + p'a and the KKT conditions only involve the column's samples, so every column
solves the same problem and certifies with the same measure. Whether a fit takes this path
is :func:`muflow.routing.solves_on_own_samples`'s rule.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.solvers.problem import DualProblem, DualSolution, start_gradient
from muflow.solvers._subset import pad_curves
from muflow.solvers.rowcache import keep_row_cache

#: Timings that are the most of any column, not a sum over them.
_MOST = ("q", "max_shrunk", "outer_iterations", "pair_steps")


def solve_on_own_samples(problem: DualProblem, member: np.ndarray, solve, *, init=None,
                         callback=None, kept: dict | None = None) -> DualSolution:
    """Solve every column of ``problem`` on K restricted to the samples it holds.

    Parameters
    ----------
    problem : DualProblem
        Its operator answers ``restricted(idx)`` (an operator over ``K[idx][:, idx]``).
    member : ndarray of bool of shape (n, m)
        The samples column j holds; its upper bound is 0 outside them.
    solve : callable
        ``solve(problem, init=None, callback=None) -> DualSolution`` for one column
        (the registered solver with its tolerance, budget and options bound).
    init : ndarray of shape (n, m), tuple (alpha, bias[, gradient]) or DualSolution, optional
        Warm start of the whole batch; each column starts from its samples' entries (of
        its gradient too, when the start carries one: :func:`muflow.solvers.problem.start_gradient`).
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` as a batch solver calls it: ``alpha`` of
        shape (n, m) with the finished columns, the live one and zeros for those to come,
        ``objective`` NaN for those to come; True stops.
    kept : dict, optional
        Restricted operators that outlive this call, by column: column j's is reused while
        it holds the same samples, with its row cache
        (:func:`muflow.solvers.rowcache.keep_row_cache`), so that a later call on the same
        samples (the next C of a path) finds the rows this one computed. The caller closes
        them (:func:`close_kept`). None: each column's operator lives for its solve.

    Returns
    -------
    DualSolution
        Of shape (n, m); ``n_iter`` the most of any column; ``timings`` summed over the
        columns (the sizes in :data:`_MOST` the largest), plus "restricted_samples" (the
        samples of every column's operator, summed). ``gradient``, where the solver kept
        it, on each column's samples (NaN elsewhere).
    """
    t0 = time.perf_counter()
    n, m = problem.n, problem.m
    member = np.asarray(member, dtype=bool)
    alpha0, bias0 = problem.check_init(init)
    G0 = start_gradient(init, n, m)
    alpha = np.zeros((n, m))
    bias = np.zeros(m)
    gradient = np.full((n, m), np.nan)
    curves, violations, converged, iters, solver = [], np.zeros(m), np.zeros(m, dtype=bool), 0, ""
    timings: dict = {"restricted_samples": 0}
    kept_gradient = True  # every column's solve kept its gradient
    for j in range(m):
        idx = np.flatnonzero(member[:, j])
        operator = _restricted(problem.operator, idx, kept, j)
        try:
            sub = DualProblem(operator, problem.y[idx, j], upper=problem.upper[idx, j],
                              linear=problem.linear[idx, j], equality=problem.equality)
            start = None
            if alpha0 is not None:
                start = (alpha0[idx, j], None if bias0 is None else bias0[[j]],
                         None if G0 is None else G0[idx, j])
            sol = solve(sub, init=start, callback=_scattered(callback, alpha, curves, idx, j, m))
        finally:
            if kept is None:
                operator.close()
        alpha[idx, j] = sol.alpha[:, 0]
        bias[j] = sol.bias[0]
        kept_gradient = kept_gradient and sol.gradient is not None
        if kept_gradient:
            gradient[idx, j] = sol.gradient[:, 0]
        curves.append(sol.objective_curve[:, 0])
        violations[j] = sol.kkt_violation[0]
        converged[j] = sol.converged[0]
        iters = max(iters, int(sol.n_iter))
        solver = sol.solver
        timings["restricted_samples"] += idx.size
        for key, value in sol.timings.items():
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                timings[key] = (max if key in _MOST else sum)((timings.get(key, 0), value))
    timings["total"] = time.perf_counter() - t0
    return DualSolution(alpha=alpha, bias=bias, n_iter=iters, objective_curve=pad_curves(curves),
                        kkt_violation=violations, converged=converged, timings=timings,
                        solver=solver, gradient=gradient if kept_gradient else None)


def _restricted(operator, idx, kept, j):
    """Column j's operator over its samples ``idx``: the one ``kept`` holds for it when it
    is over the same samples, else a new one (kept, with its row cache, when ``kept`` is
    given)."""
    if kept is None:
        return operator.restricted(idx)
    held = kept.get(j)
    if held is not None and np.array_equal(held[0], idx):
        return held[1]
    if held is not None:
        held[1].close()
    sub = keep_row_cache(operator.restricted(idx))
    kept[j] = (idx, sub)
    return sub


def close_kept(kept: dict) -> None:
    """Close the operators :func:`solve_on_own_samples` kept (its ``kept``), releasing their
    row caches."""
    for _, operator in kept.values():
        operator.close()
        operator.kept_row_caches.clear()
    kept.clear()


def _scattered(callback, alpha, curves, idx, j, m):
    """The batch ``callback`` seen from column j's restricted solve: its alpha scattered
    into the batch's (n, m), the finished columns' final objectives beside its own."""
    if callback is None:
        return None

    def call(iteration, sub_alpha, objective):
        full = alpha.copy()
        full[idx, j] = np.asarray(sub_alpha)[:, 0]
        values = np.full(m, np.nan)
        values[:j] = [c[-1] for c in curves]
        values[j] = np.asarray(objective).reshape(-1)[0]
        return bool(callback(iteration, full, values))

    return call


__all__ = ["close_kept", "solve_on_own_samples"]
