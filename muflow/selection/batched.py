"""The batched path: every (C, fold, class) column of one Gram in one ``solve`` call.

A multiplicative solver advances every column with one product ``K @ V`` per iteration
(m3-multiplicative-updates-large-margin.txt eq. (12): the update of alpha_i needs only
(A+ alpha)_i and (A- alpha)_i, so m problems sharing A need one pass with an n x 2m
right-hand side). With ``halving`` the solve runs in rungs and the weaker C values stop
early (:mod:`muflow.selection.halving`).
"""

from __future__ import annotations

import time

import numpy as np

from muflow.selection.halving import first_budget, next_budget, survivors
from muflow.selection.scoring import cv_accuracy
from muflow.solvers import DualProblem
from muflow.solvers.registry import svc_iterations


def solve_batched(operator, ycols, upper, out, *, n_c, per_c, P, info, equality, tol, max_iter,
                  halving, halving_min_iter, masks, y_enc, callback=None, options=None):
    """Solve the columns (C fastest-varying last: column ``c * per_c + j``) in one call, or
    in halving rungs; writes ``out.alpha``, ``out.bias``, ``out.viol``, ``out.n_iter``,
    ``out.seconds``, ``out.curves`` (fold 0's columns per C) and ``out.stopped`` in place.
    ``masks`` and ``y_enc`` score the rungs (:func:`muflow.selection.scoring.cv_accuracy`)."""
    options = options or {}
    active = list(range(n_c))
    init = None
    budget = first_budget(max_iter, halving, halving_min_iter)
    spent = reported = 0  # the solver's unit (the budget's) and SVC's (SMO: pair steps)
    while True:
        cols = np.concatenate([np.arange(c * per_c, (c + 1) * per_c) for c in active])
        problem = DualProblem(operator, ycols[:, cols], upper[:, cols], equality=equality)
        t = time.perf_counter()
        sol = info.solve(problem, init=init, tol=tol, max_iter=budget, callback=callback, **options)
        dt = time.perf_counter() - t
        out.alpha[:, cols], out.bias[cols], out.viol[cols] = sol.alpha, sol.bias, sol.kkt_violation
        spent += sol.n_iter
        reported += svc_iterations(sol)
        for k, c in enumerate(active):
            out.n_iter[c] = reported
            out.seconds[c] += dt / len(active)
            curve = sol.objective_curve[:, k * per_c:k * per_c + P]  # fold 0's columns
            out.curves[c] = curve if out.curves[c] is None else np.vstack([out.curves[c], curve[1:]])
        if halving is None or sol.converged.all() or spent >= max_iter:
            return
        if len(active) > 1:
            acc = cv_accuracy(operator, ycols[:, cols], out.alpha[:, cols], out.bias[cols], masks, y_enc)
            keep = survivors(acc, halving)
            for k in set(range(len(active))) - set(keep):
                out.stopped[active[k]] = True
            active = [active[k] for k in keep]
            cols = np.concatenate([np.arange(c * per_c, (c + 1) * per_c) for c in active])
        init = (out.alpha[:, cols], out.bias[cols])
        budget = next_budget(budget, spent=spent, max_iter=max_iter, running=len(active), eta=halving)
