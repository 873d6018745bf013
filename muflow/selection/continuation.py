"""The continuation path: C in ascending order, each C's columns warm-started from the
solution at the previous C (feasible: 0 <= alpha <= C_prev <= C, the sum constraint is
untouched). Subset solvers (SMO) profit most: the support set changes little between
neighbouring C, so a warm start leaves few variables to move (docs/benchmarks.md,
"Model selection").

Subset solvers work column by column anyway, so their batched path runs here too, as
cold, independent solves per C. Either way the work is a list of independent chains (a
fold's columns along C, or one C), run in this process or shared out to forked processes
(:mod:`muflow.selection.fork_pool`), costliest first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from muflow.routing import reads_rows, solves_on_own_samples
from muflow.selection.columns import columns
from muflow.selection.fork_pool import forked_chains
from muflow.solvers import DualProblem
from muflow.subproblems import close_kept, solve_by_rule
from muflow.solvers.registry import svc_iterations


def solve_chains(operator, Y, masks, member, out, *, Cs, per_c, P, info, equality, tol,
                 max_iter, warm, n_jobs, callback=None, options=None):
    """Solve the columns (column ``c * per_c + j``; their labels and bounds from ``Y``,
    ``masks`` and ``member``, :func:`muflow.selection.columns.columns`) as chains: with
    ``warm`` one chain per fold along ascending C (all folds in one chain in one process on
    a stored K), else one per (C, fold), larger C first. Writes ``out.alpha``, ``out.bias``,
    ``out.viol``, ``out.n_iter``, ``out.seconds``, ``out.curves`` and, where the solver kept
    it, ``out.gradient`` (made here then: None until a solver keeps one) in place.

    On rows computed on demand, where each fold is solved on its own samples, a chain is
    one fold's path in this process as in a forked one: its operator over the fold's
    samples and that operator's row cache serve every C of it (:meth:`ChainState.run`),
    one cache of ``cache_mb`` alive per process at a time.

    ``n_jobs`` is the sweep's thread budget (:func:`muflow.threads.thread_budget`): 1 solves
    the chains here in turn, more shares them out to forked processes
    (:func:`muflow.selection.fork_pool.forked_chains`)."""
    F = per_c // P
    held = np.repeat(masks, P, axis=1) & np.tile(np.ones((1, P), dtype=bool) if member is None
                                                  else member, (1, F))  # the columns at one C
    own = solves_on_own_samples(operator, info.name, held)
    # a chain per fold's columns, except in one process on a stored K: every fold's columns
    # in one solve call per C there (their warm starts' gradients in one product, one pass
    # over K). On X partitioned over the workers the working set solves a column at a time
    # anyway, and a chain per fold holds one fold's labels and bounds, not every fold's
    apart = own or (getattr(operator, "partitioned", False) and reads_rows(info.name))
    folds_cols = ([list(range(per_c))] if n_jobs == 1 and not apart else
                  [[f * P + p for p in range(P)] for f in range(F)])
    if warm:
        tasks = [(local, list(range(len(Cs)))) for local in folds_cols]
    else:  # larger C, more steps: start those first
        tasks = [(local, [c]) for c in reversed(range(len(Cs))) for local in folds_cols]
    state = ChainState(operator, Y, masks, member, Cs, per_c, P, info, equality, tol, max_iter,
                       warm, options or {})
    if n_jobs == 1:
        chains = [state.run(local, cs, callback) for local, cs in tasks]
    else:
        chains = forked_chains(state, tasks, n_jobs)
    rows = np.zeros(len(Cs), dtype=np.int64)  # the longest objective curve of each C
    for (local, cs), chain in zip(tasks, chains):
        for k, c in enumerate(cs):
            cols = [c * per_c + j for j in local]
            out.alpha[:, cols], out.bias[cols], out.viol[cols] = chain.alpha[k], chain.bias[k], chain.viol[k]
            if chain.gradient[k] is not None:
                if out.gradient is None:  # made when a solver kept one (rows in process)
                    out.gradient = np.full(out.alpha.shape, np.nan)
                out.gradient[:, cols] = chain.gradient[k]
            out.n_iter[c] = max(out.n_iter[c], chain.n_iter[k])
            # chains in turn here add up; forked ones ran side by side
            out.seconds[c] = (out.seconds[c] + chain.seconds[k] if n_jobs == 1 else
                              max(out.seconds[c], chain.seconds[k]))
            rows[c] = max(rows[c], chain.rows[k])
            if local[0] == 0:
                out.curves[c] = chain.curves[k]
    if apart and not own:  # fold 0's curve as one solve call of every fold pads it
        out.curves = [pad_rows(curve, rows[c]) for c, curve in enumerate(out.curves)]


@dataclass
class Chain:
    """Per C index of one chain: the solution of its columns and what it cost."""

    alpha: list = field(default_factory=list)
    bias: list = field(default_factory=list)
    viol: list = field(default_factory=list)
    n_iter: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    curves: list = field(default_factory=list)
    rows: list = field(default_factory=list)  # the length of each solve's objective curve
    gradient: list = field(default_factory=list)


@dataclass
class ChainState:
    """What every chain of one Gram shares (and forked children inherit): each solve's labels
    and bounds are made from ``Y``, ``masks`` and ``member`` for its own columns
    (:meth:`problem`)."""

    operator: object
    Y: np.ndarray
    masks: np.ndarray
    member: np.ndarray | None
    Cs: list
    per_c: int
    P: int
    info: object
    equality: bool
    tol: float
    max_iter: int
    warm: bool
    options: dict = field(default_factory=dict)

    def problem(self, cols) -> DualProblem:
        """The problem of the columns ``cols``: their labels and bounds
        (:func:`muflow.selection.columns.columns`)."""
        y, upper = columns(self.Y, self.masks, self.Cs, self.member, cols)
        return DualProblem(self.operator, y, upper, equality=self.equality)

    def solve(self, problem, *, init=None, callback=None, kept=None):
        """One solve of a chain. On rows computed on demand each column (a fold's training
        samples, of one binary problem) is solved on K restricted to the samples it holds,
        rows 1/(k-1) shorter for k folds (:func:`muflow.routing.solves_on_own_samples`, the
        rule of one-vs-one pairs; :func:`muflow.subproblems.solve_on_own_samples`), on the
        operators of ``kept`` when given (kept across the chain's solves); on a stored K
        every column reads it in place."""
        def solve(p, init=None, callback=None):
            return self.info.solve(p, init=init, tol=self.tol, max_iter=self.max_iter,
                                   callback=callback, **self.options)

        return solve_by_rule(problem, problem.upper > 0, solve, self.info.name, init=init,
                             callback=callback, kept=kept)

    def run(self, local, c_indices, callback=None) -> Chain:
        """Solve the columns ``local`` (indices within one C's block) for the C values
        ``Cs[c_indices]``, in that (ascending) order.

        With ``warm``, each C starts from the previous C's solution scaled by C / C_prev
        (:func:`scaled_start`), its gradient with it, and the columns' operators over their
        own samples, with their row caches, stay from one C to the next (the support
        vectors change little: their rows are computed once for the whole path).
        """
        out = Chain()
        init = None
        kept = {} if self.warm else None
        try:
            for k, c in enumerate(c_indices):
                problem = self.problem([c * self.per_c + j for j in local])
                t = time.perf_counter()
                sol = self.solve(problem, init=init, callback=callback, kept=kept)
                out.seconds.append(time.perf_counter() - t)
                out.alpha.append(sol.alpha)
                out.bias.append(sol.bias)
                out.viol.append(sol.kkt_violation)
                out.gradient.append(sol.gradient)
                out.n_iter.append(svc_iterations(sol))  # SVC's unit: SMO's pair steps
                out.curves.append(sol.objective_curve[:, :self.P] if local[0] == 0 else None)
                out.rows.append(len(sol.objective_curve))
                if self.warm and k + 1 < len(c_indices):
                    init = scaled_start(sol, self.Cs[c_indices[k + 1]] / self.Cs[c], problem.linear)
        finally:
            if kept:
                close_kept(kept)
        return out


def pad_rows(curve, rows: int):
    """``curve`` (points x columns) with its last row repeated up to ``rows`` rows, as
    :func:`muflow.solvers._subset.pad_curves` pads the shorter columns of one solve."""
    if curve is None or len(curve) >= rows:
        return curve
    return np.concatenate([curve, np.repeat(curve[-1:], rows - len(curve), axis=0)])


def scaled_start(sol, ratio: float, linear: np.ndarray) -> tuple:
    """The warm start at C' = ratio * C from the solution at C: alpha scaled by C' / C
    ("alpha seeding", DeCoste & Wagstaff, KDD 2000), which keeps 0 <= alpha <= C' and
    sum_i y_i alpha_i = 0 and lands the samples at the old bound (the margin errors, which
    mostly stay errors) on the new one; and its gradient, exactly, without a product:
    Q (r alpha) + p = r (G - p) + p for the solution's G = Q alpha + p where the solver
    kept it (:attr:`muflow.solvers.DualSolution.gradient`; the product it saves reads n
    rows of K, a sizeable share of a fold's solve on rows)."""
    if sol.gradient is None:
        return sol.alpha * ratio, sol.bias
    return sol.alpha * ratio, sol.bias, ratio * sol.gradient + (1.0 - ratio) * linear
