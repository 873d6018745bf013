"""The solves of one kernel setting: every (C, fold, class) column of one Gram, and the
refit on all samples.

For one kernel setting (one Gram matrix K of all n samples) every (C, fold, class)
problem is a column of the dual batch (:class:`muflow.solvers.DualProblem`):

- the labels of column j are those of its binary problem (one-vs-one pairs for more than
  two classes, as :func:`muflow.multiclass.binary_problems` poses them for muflow.SVC);
- its upper bounds are ``U_ij = C_j`` for the training samples of its fold that belong to
  its problem and ``0`` for the others (held-out samples, samples outside the pair), which
  pins them at alpha = 0: a fold or a pair is a mask, not a copy of K
  (:func:`muflow.selection.columns.columns`).

Two paths solve the batch (:func:`solve_kernel`):

- ``"batched"``: one ``solve`` call on all columns (:mod:`muflow.selection.batched`),
  optionally in successive-halving rungs (:mod:`muflow.selection.halving`). A subset solver
  (SMO) works column by column anyway: there "batched" means independent cold solves per C,
  run as chains of one C;
- ``"continuation"``: C in ascending order, each C's columns warm-started from the
  solution at the previous C (:mod:`muflow.selection.continuation`), chains that
  ``n_jobs`` forked processes share (:mod:`muflow.selection.fork_pool`).

``path="auto"`` takes continuation for the solvers that read rows and the batched path for
multiplicative ones (:func:`muflow.routing.sweep_path`); ``path="compare"`` solves the
first kernel setting both ways and keeps the faster path for the rest.

Notes
-----
Memory per kernel setting: K (``8 n^2`` bytes in memory; a Dask operator keeps it on the
workers) plus ``3 * 8 * n * m`` bytes of iterates, with m = folds * P * len(C)
(batched) or folds * P (continuation), P the binary problems (1, or k(k-1)/2 pairs).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

from muflow.selection.batched import solve_batched
from muflow.selection.columns import columns, labelled  # noqa: F401  (columns: its home before)
from muflow.selection.continuation import solve_chains
from muflow.selection.grid import SUBSET_SOLVERS
from muflow.selection.records import KernelSolve, Refit
from muflow.solvers import DualProblem
from muflow.subproblems import decision_values, solve_by_rule


def solve_kernel(operator, Y, masks, Cs, info, path, intercept, tol, max_iter, halving,
                 halving_min_iter, callback=None, n_jobs=1, member=None, y_enc=None,
                 options=None) -> KernelSolve:
    """Solve every (C, fold, problem) column of one Gram by ``path`` ("batched" or
    "continuation"); ``halving`` as :mod:`muflow.selection.halving` says. ``member`` and
    ``y_enc``: the samples of each binary problem and the class index of each sample
    (:func:`muflow.multiclass.binary_problems`); ``options``: the solver's keywords beyond
    the common signature (the row cache: :meth:`muflow.solvers.registry.SolverInfo.options`)."""
    n, P = Y.shape
    per_c = masks.shape[1] * P
    m = len(Cs) * per_c
    out = SimpleNamespace(alpha=np.zeros((n, m)), bias=np.zeros(m), viol=np.zeros(m),
                          n_iter=np.zeros(len(Cs), dtype=np.int64), seconds=np.zeros(len(Cs)),
                          stopped=np.zeros(len(Cs), dtype=bool), curves=[None] * len(Cs),
                          gradient=None)
    common = dict(per_c=per_c, P=P, info=info, equality=intercept == "exact", tol=tol,
                  max_iter=max_iter, callback=callback, options=options)
    t0 = time.perf_counter()
    if path == "continuation" or (halving is None and info.name in SUBSET_SOLVERS):
        if getattr(operator, "partitioned", False):
            n_jobs = 1  # the workers hold X: this process only drives them (no fork)
        solve_chains(operator, Y, masks, member, out, Cs=Cs, warm=path == "continuation",
                     n_jobs=n_jobs, **common)
    else:
        ycols, upper = columns(Y, masks, Cs, member)
        solve_batched(operator, ycols, upper, out, n_c=len(Cs), halving=halving,
                      halving_min_iter=halving_min_iter, masks=masks, y_enc=y_enc, **common)
        del ycols, upper
    solve_seconds = time.perf_counter() - t0
    worst = out.viol.reshape(len(Cs), per_c).max(axis=1)  # every fold and problem of a C
    D = decision_values(operator, labelled(Y, out.alpha), out.bias, masks, P)
    products = None
    if hasattr(operator, "cross_matmul") and out.gradient is not None \
            and not np.isnan(out.gradient).all():
        products = known_products(out.gradient, D, out.bias, Y, masks)
    return KernelSolve(path=path, solver=info.name, solve_seconds=solve_seconds, decision=D,
                       alpha=out.alpha, bias=out.bias, n_problems=P, per_c=per_c,
                       n_iter=out.n_iter, seconds=out.seconds, stopped=out.stopped,
                       curves=out.curves, kkt_violation=worst, converged=worst <= tol,
                       products=products)


def known_products(gradient, D, bias, Y, masks) -> np.ndarray:
    """``K @ (y * alpha)`` of every column where it is known without a product, NaN
    elsewhere: at the samples its solve saw from the gradient the solver kept,
    ``y (G - p)`` with the sweep's linear term p = -1, and at its fold's held-out samples
    from the decision values less the bias (summed in float64:
    :meth:`muflow.kernel_rows.KernelRows.cross_matmul`). Every sample is a training sample
    of all folds but one and held out of that one, so the refit's start (the mean of the
    folds' solutions) gets its gradient from these (:func:`refit`)."""
    F, P = masks.shape[1], Y.shape[1]
    fold = (np.arange(gradient.shape[1]) % (F * P)) // P
    held = ~masks[:, fold]
    return np.where(held, D - bias[None, :], labelled(Y, gradient + 1.0))


def refit(operator, Y, C, res: KernelSolve, c, info, intercept, tol, max_iter, member=None,
          options=None) -> Refit:
    """Solve the configuration (this Gram, C) on all samples while its operator is open, by
    the engine :meth:`muflow.SVC.fit` runs on that operator (on rows computed on demand: the
    working-set solver, one-vs-one pairs on their own samples).

    Warm start: the mean of the fold solutions at C. Each is feasible for the full problem
    (0 <= alpha <= C, held-out samples at 0, sum_i y_i alpha_i = 0) and the feasible set is
    convex, so their mean is feasible too; it is close to the full solution because each
    sample is a training sample in folds - 1 of the folds. Where the folds' products
    ``K @ (y alpha_f)`` are known at every sample (rows on demand: :func:`known_products`),
    the start's gradient is their mean, which spares the working set the start's product
    (n x |support vectors| kernel values). ``options``: the solver's keywords beyond the
    common signature (the row cache).

    The start made, ``res.alpha`` and ``res.products`` are let go (None): the refit is
    their last reader, and the client of a sweep on X partitioned over the workers then
    holds the refit's vectors, not the folds' n x m solutions besides (issue 39).
    """
    P, per_c = res.n_problems, res.per_c
    F = per_c // P
    block = res.alpha[:, res.block(c)].reshape(-1, F, P)
    init = (block.mean(axis=1), res.bias[res.block(c)].reshape(F, P).mean(axis=0))
    upper = float(C) if member is None else np.where(member, float(C), 0.0)
    problem = DualProblem(operator, Y, upper, equality=intercept == "exact")
    if res.products is not None:  # the start's gradient from the folds' (known_products)
        mean_product = res.products[:, res.block(c)].reshape(-1, F, P).mean(axis=1)
        init = init + (Y * mean_product + problem.linear,)
    del block
    res.alpha = res.products = None
    t = time.perf_counter()

    def solve(p, init=None, callback=None):
        return info.solve(p, init=init, tol=tol, max_iter=max_iter, callback=callback,
                          **(options or {}))

    # the path SVC.fit takes on this operator: one-vs-one pairs on their own samples on rows
    sol = solve_by_rule(problem, member, solve, info.name, init=init)
    return Refit(c_index=c, alpha=sol.alpha, bias=sol.bias, kkt_violation=sol.kkt_violation,
                 n_iter=int(sol.n_iter), curve=sol.objective_curve, seconds=time.perf_counter() - t,
                 pair_steps=sol.timings.get("pair_steps") if sol.solver == "smo" else None)
