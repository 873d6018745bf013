"""Solve paths: every (C, fold, class) column of one Gram, and the refit on all samples.

For one kernel setting (one Gram matrix K of all n samples) every (C, fold, class)
problem is a column of the dual batch (:class:`muflow.solvers.DualProblem`):

- the labels of column j are those of its binary problem (one-vs-one pairs for more than
  two classes, as :func:`muflow.multiclass.binary_problems` poses them for muflow.SVC);
- its upper bounds are ``U_ij = C_j`` for the training samples of its fold that belong to
  its problem and ``0`` for the others (held-out samples, samples outside the pair), which
  pins them at alpha = 0: a fold or a pair is a mask, not a copy of K.

Two paths solve the batch:

- ``"batched"``: one ``solve`` call on all columns. A multiplicative solver advances every
  column with one product ``K @ V`` per iteration (m3-multiplicative-updates-large-margin.txt
  eq. (12): the update of alpha_i needs only (A+ alpha)_i and (A- alpha)_i, so m problems
  sharing A need one pass with an n x 2m right-hand side). A subset solver (SMO) works
  column by column anyway: there "batched" means independent cold solves per C.
- ``"continuation"``: C in ascending order, each C's columns warm-started from the
  solution at the previous C (feasible: 0 <= alpha <= C_prev <= C, the sum constraint is
  untouched). Subset solvers (SMO) profit most: the support set changes little between
  neighbouring C.

``path="auto"`` takes continuation for subset solvers (on a8a, 2000 and 8000 rows, it beat
cold solves by 15-20%) and the batched path for multiplicative ones; ``path="compare"``
solves the first kernel setting both ways and keeps the faster path for the rest.

Successive halving (``halving=eta``, off by default): batched path only. The solve runs in
rungs of ``halving_min_iter * eta**r`` iterations (r = 0, 1, ...), each warm-started from
the previous rung. After each rung, the configurations (C values of the kernel setting)
still running are ranked by their current mean validation accuracy; the best
``ceil(k / eta)`` of the k go on, the others stop there and are reported with the accuracy
of that rung (``stopped_early`` in the table). Ties keep the smaller C. The last
configuration standing runs to convergence (or ``max_iter`` iterations in all).

Notes
-----
Memory per kernel setting: K (``8 n^2`` bytes in memory; a Dask operator keeps it on the
workers) plus ``3 * 8 * n * m`` bytes of iterates, with m = folds * P * len(C)
(batched) or folds * P (continuation), P the binary problems (1, or k(k-1)/2 pairs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.kernels import kernel_from_setting
from muflow.selection.grid import SUBSET_SOLVERS
from muflow.selection.records import KernelSolve, Refit
from muflow.selection.scoring import cv_accuracy


def pick_solver(name, path, setting, X, intercept, client):
    """The solver and path for one kernel setting (refusing impossible combinations)."""
    from muflow.solvers.registry import choose_solver

    nonneg = kernel_from_setting(setting, X, intercept=intercept).is_nonnegative(X)
    if name == "auto" and client is not None:
        # X partitioned over the workers, the working-set solver there
        name = "working_set"
    info = choose_solver(name, intercept=intercept, kernel_nonnegative=nonneg)
    if client is not None and info.name in SUBSET_SOLVERS:
        raise MuflowInputError(
            f"solver {info.name!r} reads rows of K, which the Dask operator does not serve; "
            "with a client/scheduler use solver='working_set' (X on the workers) or a "
            "multiplicative solver ('m3', 'munk') on a Gram store")
    if path == "auto":
        path = "continuation" if info.name in CHAINED_SOLVERS else "batched"
    return info, path


#: Solvers whose warm starts pay (continuation over C by default).
CHAINED_SOLVERS = (*SUBSET_SOLVERS, "working_set")


def gram(X, setting, intercept, client, cache_dir, buffer=None, solver=None):
    """The kernel of ``setting`` and an operator for K(X, X) from the one factory
    (:func:`muflow.backends.gram_operator`): on the cluster of ``client`` (X partitioned
    over the workers for the working-set solver, and with resident kernel panels for the
    multiplicative solvers when they fit: :func:`muflow.backends.partitioned_operator`;
    else a Gram store), read from the store cache, or in memory, into ``buffer`` (the
    previous setting's K) when it has the right shape and dtype."""
    from muflow.backends import gram_operator, partitioned_operator

    kernel = kernel_from_setting(setting, X, intercept=intercept)
    if client is not None and solver is not None:
        operator = partitioned_operator(X, kernel, client, solver=solver)
        if operator is not None:
            return kernel, operator
    return kernel, gram_operator(X, kernel, client=client, cache_dir=cache_dir, out=buffer)


def columns(Y, masks, Cs, member=None):
    """Labels and upper bounds of the columns (C, fold, problem), problem fastest.

    Column ``(c * folds + f) * P + p``: labels of binary problem p, ``U = C_c`` on the
    training samples of fold f that belong to problem p (``member``, default all) and 0 on
    the others.
    """
    n, P = Y.shape
    F = masks.shape[1]
    member = np.ones((n, P), dtype=bool) if member is None else member
    ycols = np.tile(Y, (1, len(Cs) * F))
    upper = np.empty_like(ycols)
    j = 0
    for C in Cs:
        for f in range(F):
            upper[:, j:j + P] = np.where(masks[:, f][:, None] & member, C, 0.0)
            j += P
    return ycols, upper


def solve_kernel(operator, Y, masks, Cs, info, path, intercept, tol, max_iter, halving,
                 halving_min_iter, callback=None, n_jobs=1, member=None, y_enc=None) -> KernelSolve:
    """Solve every (C, fold, problem) column of one Gram by ``path`` ("batched" or
    "continuation"); ``halving`` as the module docstring says. ``member`` and ``y_enc``:
    the samples of each binary problem and the class index of each sample
    (:func:`muflow.multiclass.binary_problems`)."""
    n, P = Y.shape
    F = masks.shape[1]
    per_c = F * P
    equality = intercept == "exact"
    alpha = np.zeros((n, len(Cs) * per_c))
    bias = np.zeros(len(Cs) * per_c)
    viol = np.zeros(len(Cs) * per_c)
    n_iter = np.zeros(len(Cs), dtype=np.int64)
    seconds = np.zeros(len(Cs))
    stopped = np.zeros(len(Cs), dtype=bool)
    curves = [None] * len(Cs)
    ycols, upper = columns(Y, masks, Cs, member)
    t0 = time.perf_counter()
    # subset solvers solve column by column anyway: in "batched" their columns are cold,
    # independent solves, one task per (C, fold); "continuation" is one task per fold,
    # ascending C, warm-started. Tasks are shared out to forked processes, costliest first.
    chained = path == "continuation" or (halving is None and info.name in SUBSET_SOLVERS)
    if getattr(operator, "partitioned", False):
        n_jobs = 1  # the workers hold X: this process only drives them (no fork)
    if chained:
        warm = path == "continuation"
        # one process: every fold's columns in one solve call per C; more: a task per fold
        folds_cols = ([list(range(per_c))] if n_jobs == 1 else
                      [[f * P + p for p in range(P)] for f in range(F)])
        if warm:
            tasks = [(local, list(range(len(Cs)))) for local in folds_cols]
        else:  # larger C, more steps: start those first
            tasks = [(local, [c]) for c in reversed(range(len(Cs))) for local in folds_cols]
        state = _ChainState(operator, ycols, upper, Cs, per_c, P, info, equality, tol, max_iter, warm)
        if n_jobs == 1:
            chains = [state.run(local, cs, callback) for local, cs in tasks]
        else:
            chains = _forked_chains(state, tasks, n_jobs)
        for (local, cs), chain in zip(tasks, chains):
            for k, c in enumerate(cs):
                cols = [c * per_c + j for j in local]
                alpha[:, cols], bias[cols], viol[cols] = chain.alpha[k], chain.bias[k], chain.viol[k]
                n_iter[c] = max(n_iter[c], chain.n_iter[k])
                seconds[c] = max(seconds[c], chain.seconds[k])
                if local[0] == 0:
                    curves[c] = chain.curves[k]
    else:
        from muflow.solvers import DualProblem

        active = list(range(len(Cs)))
        init = None
        budget = max_iter if halving is None else min(max_iter, halving_min_iter)
        spent = 0
        while True:
            cols = np.concatenate([np.arange(c * per_c, (c + 1) * per_c) for c in active])
            problem = DualProblem(operator, ycols[:, cols], upper[:, cols], equality=equality)
            t = time.perf_counter()
            sol = info.solve(problem, init=init, tol=tol, max_iter=budget, callback=callback)
            dt = time.perf_counter() - t
            alpha[:, cols], bias[cols], viol[cols] = sol.alpha, sol.bias, sol.kkt_violation
            spent += sol.n_iter
            for k, c in enumerate(active):
                n_iter[c] = spent
                seconds[c] += dt / len(active)
                curve = sol.objective_curve[:, k * per_c:k * per_c + P]  # fold 0's columns
                curves[c] = curve if curves[c] is None else np.vstack([curves[c], curve[1:]])
            if halving is None or sol.converged.all() or spent >= max_iter:
                break
            if len(active) > 1:
                acc = cv_accuracy(operator, ycols[:, cols], alpha[:, cols], bias[cols], masks, y_enc)
                keep_n = math.ceil(len(active) / halving)
                order = sorted(range(len(active)), key=lambda k: (-acc[k], k))
                keep = sorted(order[:keep_n])
                for k in set(range(len(active))) - set(keep):
                    stopped[active[k]] = True
                active = [active[k] for k in keep]
                cols = np.concatenate([np.arange(c * per_c, (c + 1) * per_c) for c in active])
            init = (alpha[:, cols], bias[cols])
            budget = max_iter - spent if len(active) == 1 else min(max_iter - spent, budget * halving)
    solve_seconds = time.perf_counter() - t0
    # decision values of every column at every sample: ONE product with K
    D = operator.matmul(ycols * alpha) + bias[None, :]
    return KernelSolve(path=path, solver=info.name, solve_seconds=solve_seconds, decision=D,
                       alpha=alpha, bias=bias, n_problems=P, per_c=per_c, n_iter=n_iter,
                       seconds=seconds, stopped=stopped, curves=curves)


@dataclass
class _Chain:
    """Per C index of one chain: the solution of its columns and what it cost."""

    alpha: list = field(default_factory=list)
    bias: list = field(default_factory=list)
    viol: list = field(default_factory=list)
    n_iter: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    curves: list = field(default_factory=list)


@dataclass
class _ChainState:
    """What every chain of one Gram shares (and forked children inherit)."""

    operator: object
    ycols: np.ndarray
    upper: np.ndarray
    Cs: list
    per_c: int
    P: int
    info: object
    equality: bool
    tol: float
    max_iter: int
    warm: bool

    def run(self, local, c_indices, callback=None) -> _Chain:
        """Solve the columns ``local`` (indices within one C's block) for the C values
        ``Cs[c_indices]``, in that (ascending) order.

        With ``warm``, each C starts from the previous C's solution scaled by C / C_prev
        ("alpha seeding", DeCoste & Wagstaff, KDD 2000): scaling keeps 0 <= alpha <= C and
        sum_i y_i alpha_i = 0, and the samples at the old bound (the margin errors, which
        mostly stay errors) land on the new bound.
        """
        from muflow.solvers import DualProblem

        out = _Chain()
        init = None
        for k, c in enumerate(c_indices):
            cols = [c * self.per_c + j for j in local]
            problem = DualProblem(self.operator, self.ycols[:, cols], self.upper[:, cols],
                                  equality=self.equality)
            t = time.perf_counter()
            sol = self.info.solve(problem, init=init, tol=self.tol, max_iter=self.max_iter,
                                  callback=callback)
            out.seconds.append(time.perf_counter() - t)
            out.alpha.append(sol.alpha)
            out.bias.append(sol.bias)
            out.viol.append(sol.kkt_violation)
            out.n_iter.append(int(sol.n_iter))
            out.curves.append(sol.objective_curve[:, :self.P] if local[0] == 0 else None)
            if self.warm and k + 1 < len(c_indices):
                init = (sol.alpha * (self.Cs[c_indices[k + 1]] / self.Cs[c]), sol.bias)
        return out


#: What forked workers read: set just before the fork, so K is shared copy-on-write.
_FORK_STATE = None


def _chain_in_child(k):
    from muflow.inmemory import _blas_single_threaded

    state, tasks = _FORK_STATE
    local, c_indices = tasks[k]
    # the chains' products (a warm start's gradient, each certificate) are BLAS calls whose
    # idle threads would spin on the cores the other chains need: one thread per chain
    with _blas_single_threaded():
        return state.run(local, c_indices)


def _forked_chains(state: _ChainState, tasks, n_jobs):
    """Run the tasks ``(local columns, C indices)`` in ``n_jobs`` forked processes, in the
    order given (each process takes the next task when it is free).

    The tasks are independent (a column's warm start comes from the same column at the
    previous C, inside one task), and the subset solvers hold the GIL, so processes rather
    than threads; fork shares the in-memory K with the children without a copy.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from muflow.operators import DenseGram, operand_dtype
    from muflow.solvers import DualProblem

    # load (or compile) the solver's loops here once, not in every child: for K's dtype,
    # which selects the compiled version (a float32 Gram compiled apart took 8 s per child)
    warm_up = DenseGram(np.eye(2, dtype=operand_dtype(state.operator)))
    state.info.solve(DualProblem(warm_up, [1.0, -1.0], 1.0, equality=state.equality),
                     tol=state.tol, max_iter=5)
    global _FORK_STATE
    _FORK_STATE = (state, tasks)
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(pool_size(len(tasks), n_jobs), mp_context=ctx) as pool:
            futures = [pool.submit(_chain_in_child, k) for k in range(len(tasks))]
            return [f.result() for f in futures]
    finally:
        _FORK_STATE = None


def makespan(tasks: int, processes: int, cores: int) -> float:
    """Wall time of ``tasks`` equal tasks (1 each) on ``processes`` processes sharing
    ``cores`` cores evenly: rounds of up to ``processes`` tasks, each round as long as its
    tasks' total work over the cores it can use."""
    full, last = divmod(tasks, processes)
    rounds = [processes] * full + ([last] if last else [])
    return sum(max(1.0, k / cores) for k in rounds)


def pool_size(tasks: int, n_jobs: int) -> int:
    """Processes for ``tasks`` chains on ``n_jobs`` cores.

    With 5 folds on 2 cores, 2 processes take 3 rounds while the work is 2.5 rounds: the
    last fold runs alone and a core idles. A few more processes than cores (the kernel
    time-shares them) end together instead: the smallest count, at most 2 * n_jobs,
    whose makespan for equal tasks is the least. On full a8a this took the 5-fold
    chains of gamma = 0.05 from 59.6 s (2 processes) to 53.0 s (3).
    """
    if tasks <= n_jobs:
        return max(1, tasks)
    candidates = range(n_jobs, min(tasks, 2 * n_jobs) + 1)
    return min(candidates, key=lambda p: (makespan(tasks, p, n_jobs), p))


def refit(operator, Y, C, res: KernelSolve, c, info, intercept, tol, max_iter, member=None) -> Refit:
    """Solve the configuration (this Gram, C) on all samples while K is in memory.

    Warm start: the mean of the fold solutions at C. Each is feasible for the full problem
    (0 <= alpha <= C, held-out samples at 0, sum_i y_i alpha_i = 0) and the feasible set is
    convex, so their mean is feasible too; it is close to the full solution because each
    sample is a training sample in folds - 1 of the folds.
    """
    from muflow.solvers import DualProblem

    P, per_c = res.n_problems, res.per_c
    F = per_c // P
    block = res.alpha[:, res.block(c)].reshape(-1, F, P)
    init = (block.mean(axis=1), res.bias[res.block(c)].reshape(F, P).mean(axis=0))
    upper = float(C) if member is None else np.where(member, float(C), 0.0)
    problem = DualProblem(operator, Y, upper, equality=intercept == "exact")
    t = time.perf_counter()
    sol = info.solve(problem, init=init, tol=tol, max_iter=max_iter)
    return Refit(c_index=c, alpha=sol.alpha, bias=sol.bias, kkt_violation=sol.kkt_violation,
                 n_iter=int(sol.n_iter), curve=sol.objective_curve, seconds=time.perf_counter() - t)
