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

import threading
import time

from types import SimpleNamespace

import numpy as np

from muflow.solvers.problem import DualProblem, DualSolution, start_gradient
from muflow.solvers._subset import pad_curves
from muflow.solvers.rowcache import keep_row_cache

#: Timings that are the most of any column, not a sum over them.
_MOST = ("q", "max_shrunk", "outer_iterations", "pair_steps")


def solve_by_rule(problem: DualProblem, member, solve, solver, *, init=None, callback=None,
                  kept: dict | None = None) -> DualSolution:
    """``problem`` solved on the path :class:`muflow.SVC` takes on its operator: each column
    on K restricted to the samples it holds (``member``) where
    :func:`muflow.routing.solves_on_own_samples` says so for the registered ``solver``
    (:func:`solve_on_own_samples`, with ``kept``), else as one batch, ``solve(problem, init,
    callback)``. The fit, its ``probability=True`` folds, the sweep's chains and its refit
    all call this."""
    from muflow.routing import solves_on_own_samples

    if member is not None and solves_on_own_samples(problem.operator, solver, member):
        return solve_on_own_samples(problem, member, solve, init=init, callback=callback, kept=kept)
    return solve(problem, init=init, callback=callback)


def solve_on_own_samples(problem: DualProblem, member: np.ndarray, solve, *, init=None,
                         callback=None, kept: dict | None = None) -> DualSolution:
    """Solve every column of ``problem`` on K restricted to the samples it holds.

    Columns that hold the same samples (the internal folds of one pair, pinned within it
    by their upper bounds) are solved together, as one batch on one restricted operator:
    a row computed for one serves the others from the shared row cache. The groups are
    independent: where :func:`muflow.routing.subproblem_processes` says so they are solved
    side by side in forked processes, each on its share of this process's thread budget
    (:func:`muflow.threads.divide_budget`: P processes of budget // P threads,
    :func:`muflow.forking.forked_map`),
    else one after the other in this process; the largest first either way, and the row
    caches of the groups that one process solves in turn share their storage
    (:func:`muflow.solvers.rowcache.reused_storage`).

    Parameters
    ----------
    problem : DualProblem
        Its operator answers ``restricted(idx)`` (an operator over ``K[idx][:, idx]``).
    member : ndarray of bool of shape (n, m)
        The samples column j holds; its upper bound is 0 outside them.
    solve : callable
        ``solve(problem, init=None, callback=None) -> DualSolution`` for a batch of columns
        (the registered solver with its tolerance, budget and options bound).
    init : ndarray of shape (n, m), tuple (alpha, bias[, gradient]) or DualSolution, optional
        Warm start of the whole batch; each column starts from its samples' entries (of
        its gradient too, when the start carries one: :func:`muflow.solvers.problem.start_gradient`).
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` as a batch solver calls it: ``alpha`` of
        shape (n, m) with the finished columns, the live ones and zeros for those to come,
        ``objective`` NaN for those to come; True stops. The groups are then solved one
        after the other in this process.
    kept : dict, optional
        Restricted operators that outlive this call, by group (its first column): a group's
        is reused while it holds the same samples, with its row cache
        (:func:`muflow.solvers.rowcache.keep_row_cache`), so that a later call on the same
        samples (the next C of a path) finds the rows this one computed. The groups are then
        solved in this process, where the operators live. The caller closes them
        (:func:`close_kept`). None: each group's operator lives for its solve.

    Returns
    -------
    DualSolution
        Of shape (n, m); ``n_iter`` the most of any column; ``timings`` summed over the
        groups of columns (the sizes in :data:`_MOST` the largest), plus
        "restricted_samples" (the samples of every restricted operator, summed) and
        "processes" (1: in this process). ``gradient``, where the solver kept it, on each
        column's samples (NaN elsewhere).

    Notes
    -----
    Memory: each group's row cache (the solver's ``cache_mb``) while it is solved, so up
    to ``processes`` caches at once when the groups are solved side by side.
    """
    from muflow.forking import forked_map
    from muflow.threads import divide_budget, scoped_budget, thread_budget
    from muflow.solvers.rowcache import hold_storage, reused_storage

    t0 = time.perf_counter()
    n, m = problem.n, problem.m
    member = np.asarray(member, dtype=bool)
    alpha0, bias0 = problem.check_init(init)
    G0 = start_gradient(init, n, m)
    batch = _Gathered(n, m)
    groups = _same_samples(member)
    samples = [np.flatnonzero(member[:, cols[0]]) for cols in groups]

    def solve_group(k, hear=None, idx=None, cols=None):
        idx = samples[k] if idx is None else idx
        cols = groups[k] if cols is None else cols
        operator = _restricted(problem.operator, idx, kept, cols[0])
        try:
            rows = np.ix_(idx, cols)
            sub = DualProblem(operator, problem.y[rows], upper=problem.upper[rows],
                              linear=problem.linear[rows], equality=problem.equality)
            return solve(sub, init=_group_start(alpha0, bias0, G0, rows, cols), callback=hear)
        finally:
            if kept is None:
                operator.close()

    sizes = np.array([idx.size for idx in samples])
    budget = thread_budget(scoped_budget())  # the fit's own budget
    processes = _processes(problem, sizes, budget, callback, kept)
    # the largest first: it ends last otherwise, and a smaller one's row cache then fits in
    # the storage the one before used (reused_storage)
    order = list(np.argsort(-sizes, kind="stable"))

    def in_child(t):
        hold_storage()  # this child's groups, one after another, share one cache's storage
        return solve_group(order[t])

    with reused_storage():
        if processes > 1:
            # the solver's compiled loops loaded here once (a few samples of one column),
            # not in every child (each fresh process would load them again)
            solve_group(order[0], idx=samples[order[0]][:8], cols=groups[order[0]][:1])
            share = divide_budget(len(order), budget)
            solved = iter(forked_map(in_child, len(order), processes, threads=share.threads))
        else:
            told_to_stop = []  # the callback said stop: the groups still to come stay at their start

            def in_turn(k):
                if told_to_stop:
                    left = _left_at_start(problem, samples[k], groups[k], alpha0, bias0, G0)
                    if left is not None:
                        return left
                return solve_group(k, _scattered(callback, batch.alpha, batch.final, samples[k],
                                                 groups[k], told_to_stop))

            solved = (in_turn(k) for k in order)
        # in process, each group is solved as the loop asks: its callback sees those before
        for k, sol in zip(order, solved):
            batch.add(samples[k], groups[k], sol)
    return batch.solution(processes, time.perf_counter() - t0)


def _processes(problem: DualProblem, sizes, budget: int, callback, kept) -> int:
    """How many processes solve the groups of :func:`solve_on_own_samples`: 1 where the
    groups' operators are kept (they live in this process), else the rule's
    (:func:`muflow.routing.subproblem_processes`), told whether this call is already nested
    in a forked child or a thread, or runs on an operator that cannot fork (a GPU's context
    does not)."""
    if kept is not None:
        return 1
    from muflow.forking import in_forked_child
    from muflow.routing import subproblem_processes

    return subproblem_processes(
        sizes, cores=budget, callback=callback,
        nested=in_forked_child() or threading.current_thread() is not threading.main_thread()
        or not getattr(problem.operator, "forkable", True))


def _group_start(alpha0, bias0, G0, rows, cols):
    """The warm start of one group, ``(alpha, bias, gradient)`` on its samples and columns
    (``rows``: their ``np.ix_``), or None without a start."""
    if alpha0 is None:
        return None
    return (alpha0[rows], None if bias0 is None else bias0[cols],
            None if G0 is None else G0[rows])


class _Gathered:
    """The batch's solution gathered from its groups' (:func:`solve_on_own_samples`): each
    group's columns scattered back onto their samples, timings summed (the sizes in
    :data:`_MOST` the largest)."""

    def __init__(self, n, m):
        self.alpha, self.bias = np.zeros((n, m)), np.zeros(m)
        self.gradient = np.full((n, m), np.nan)
        self.kept_gradient = True  # every group's solve kept its gradient
        self.curves, self.final = [None] * m, np.full(m, np.nan)
        self.violations, self.converged = np.zeros(m), np.zeros(m, dtype=bool)
        self.iters, self.solver = 0, ""
        self.each = np.zeros(m, dtype=np.int64)  # per column, SVC's unit
        self.timings: dict = {"restricted_samples": 0}

    def add(self, idx, cols, sol):
        self.alpha[np.ix_(idx, cols)] = sol.alpha
        self.bias[cols] = sol.bias
        self.kept_gradient = self.kept_gradient and sol.gradient is not None
        if self.kept_gradient:
            self.gradient[np.ix_(idx, cols)] = sol.gradient
        for c, j in enumerate(cols):
            self.curves[j] = sol.objective_curve[:, c]
            self.final[j] = self.curves[j][-1]
        self.violations[cols] = sol.kkt_violation
        self.converged[cols] = sol.converged
        self.iters = max(self.iters, int(sol.n_iter))
        if sol.column_iters is not None:
            self.each[cols] = sol.column_iters
        else:  # a batch that shares its passes: its count for each column
            from muflow.solvers.registry import svc_iterations

            self.each[cols] = svc_iterations(sol)
        self.solver = sol.solver or self.solver  # a group left at its start names none
        self.timings["restricted_samples"] += idx.size
        for key, value in sol.timings.items():
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                self.timings[key] = (max if key in _MOST else sum)((self.timings.get(key, 0), value))

    def solution(self, processes, seconds) -> DualSolution:
        timings = dict(self.timings, processes=processes, total=seconds)
        return DualSolution(alpha=self.alpha, bias=self.bias, n_iter=self.iters,
                            objective_curve=pad_curves(self.curves), kkt_violation=self.violations,
                            converged=self.converged, timings=timings, solver=self.solver,
                            gradient=self.gradient if self.kept_gradient else None,
                            column_iters=self.each)


def _restricted(operator, idx, kept, key):
    """The operator over the samples ``idx`` of the group ``key``: the one ``kept`` holds for
    it when it is over the same samples, else a new one (kept, with its row cache, when
    ``kept`` is given)."""
    if kept is None:
        return operator.restricted(idx)
    held = kept.get(key)
    if held is not None and np.array_equal(held[0], idx):
        return held[1]
    if held is not None:
        held[1].close()
    sub = keep_row_cache(operator.restricted(idx))
    kept[key] = (idx, sub)
    return sub


def close_kept(kept: dict) -> None:
    """Close the operators :func:`solve_on_own_samples` kept (its ``kept``), releasing their
    row caches."""
    for _, operator in kept.values():
        operator.close()
        operator.kept_row_caches.clear()
    kept.clear()


def _same_samples(member) -> list[np.ndarray]:
    """The columns of ``member`` grouped by the samples they hold, in order of first column."""
    _, first, group = np.unique(member.T, axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    return [np.flatnonzero(group == g) for g in np.argsort(first)]


def _scattered(callback, alpha, final, idx, cols, told_to_stop=None):
    """The batch ``callback`` seen from a group's restricted solve: its alpha scattered into
    the batch's (n, m), the finished columns' final objectives beside its own. A stop it
    answers is noted in ``told_to_stop``."""
    if callback is None:
        return None

    def call(iteration, sub_alpha, objective):
        full = alpha.copy()
        full[np.ix_(idx, cols)] = np.asarray(sub_alpha)
        values = final.copy()
        values[cols] = np.asarray(objective).reshape(-1)
        stop = bool(callback(iteration, full, values))
        if stop and told_to_stop is not None:
            told_to_stop.append(True)
        return stop

    return call


def _left_at_start(problem, idx, cols, alpha0, bias0, G0) -> DualSolution | None:
    """A group not started because the callback said stop (a time limit) during an earlier
    one: its start, certified (KKT measure of the start's gradient), where that gradient is
    known without a product (a cold start: G = p; a warm start that carries it); None
    otherwise. Solving it only to stop at its first check cost a step, which on rows
    computed on demand is the step that fetches the working set's rows: a pair's worth of
    kernel rows after the limit, for each pair left (a fit's time limit overran by that)."""
    from muflow.solvers.kkt import kkt_violation

    rows = np.ix_(idx, cols)
    y, upper, linear = problem.y[rows], problem.upper[rows], problem.linear[rows]
    if alpha0 is None:
        alpha, grad = np.zeros(y.shape), linear.copy()
    elif G0 is not None:
        alpha, grad = alpha0[rows], G0[rows]
    else:
        return None
    view = SimpleNamespace(y=y, upper=upper, equality=problem.equality)
    violation, bias = kkt_violation(view, alpha, grad, None if bias0 is None else bias0[cols])
    objective = 0.5 * np.sum(alpha * (grad + linear), axis=0)  # F = a'Qa/2 + p'a, Qa = G - p
    return DualSolution(alpha=alpha, bias=bias, n_iter=0, objective_curve=objective[None, :],
                        kkt_violation=violation, converged=np.zeros(len(cols), dtype=bool),
                        timings={}, solver="", gradient=grad)


def decision_values(operator, coef, bias, masks, P, held=None) -> np.ndarray:
    """Decision values ``K @ coef + bias`` of the columns (C, fold, problem), at least at the
    held-out samples of each column's fold, where scoring reads them.

    On a stored K: ONE product with K, every column at every sample. On rows computed on
    demand (an operator with ``cross_matmul``, :class:`muflow.kernel_rows.KernelRows`) a
    sub-problem computes only what it needs: fold f's columns at its held-out samples from
    its support vectors, ``K[held_f][:, sv_f] @ coef[sv_f]``, |held_f| x |sv_f| kernel
    values (the product would cost n x |sv of all folds|); the other entries are 0.

    Parameters
    ----------
    coef : ndarray of shape (n, m)
        ``y * alpha`` of the columns, column ``(c * folds + f) * P + p``.
    bias : ndarray of shape (m,)
    masks : ndarray of bool of shape (n, folds)
        The training samples of each fold.
    P : int
        The problems of a (C, fold).
    held : ndarray of bool of shape (n, folds), optional
        The samples each fold is scored on; default every sample outside its training part
        (``~masks``). The internal folds of ``probability=True`` (one fold per problem,
        ``P=1``) hold out only the problem's own samples
        (:func:`muflow.probability.out_of_fold_decisions`).
    """
    cross = getattr(operator, "cross_matmul", None)
    if cross is None:
        D = operator.matmul(coef)
        if D.dtype != np.float64 or not D.flags.writeable:
            return D + bias[None, :]
        D += bias[None, :]  # in place: one n x m array of decision values, not two
        return D
    held = ~masks if held is None else held
    n, m = coef.shape
    F = masks.shape[1]
    per_c = F * P
    D = np.zeros((n, m))
    for f in range(F):
        cols = np.array([c * per_c + f * P + p for c in range(m // per_c) for p in range(P)])
        rows = np.flatnonzero(held[:, f])
        sv = np.flatnonzero(np.any(coef[:, cols] != 0, axis=1))
        D[np.ix_(rows, cols)] = cross(rows, sv, coef[np.ix_(sv, cols)]) + bias[cols][None, :]
    return D


__all__ = ["close_kept", "decision_values", "solve_by_rule", "solve_on_own_samples"]
