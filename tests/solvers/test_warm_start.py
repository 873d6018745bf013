"""Warm starts along C: the same solution as a cold fit, in fewer iterations."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.problem import DualProblem
from muflow.solvers.registry import get_solver


def steps(solution) -> int:
    """The work in the finest unit a solver reports: SMO's pair steps (its iterations are
    sweeps of n steps, too coarse to see a warm start's saving), the hybrid's passes plus
    steps, epochs otherwise."""
    t = solution.timings
    if "pair_steps" in t:
        return t["pair_steps"]
    if "subset_steps" in t:
        return t["multiplicative_passes"] + t["subset_steps"]
    return solution.n_iter


@pytest.mark.parametrize("name, equality", [
    ("smo", True), ("smo", False), ("cd", False), ("adatron", False), ("hybrid", True),
])
def test_warm_start_along_C(breast_cancer_split, name, equality):
    Xtr, _, ytr, _ = breast_cancer_split
    y = ytr.astype(float)
    K = Kernel("rbf", gamma=0.5, offset=0.0 if equality else 1.0).block(Xtr, Xtr)
    solve = get_solver(name).solve

    def problem(C):
        return DualProblem(DenseGram(K), y, upper=C, equality=equality)

    first = solve(problem(1.0), tol=1e-4, max_iter=10_000, callback=None)
    cold = solve(problem(1.3), tol=1e-4, max_iter=10_000, callback=None)
    warm = solve(problem(1.3), init=(first.alpha, first.bias), tol=1e-4, max_iter=10_000,
                 callback=None)
    assert warm.converged.all() and cold.converged.all()
    np.testing.assert_allclose(warm.objective, cold.objective, rtol=1e-4)
    assert steps(warm) < steps(cold)
    # a DualSolution is accepted as init as well
    again = solve(problem(1.3), init=warm, tol=1e-4, max_iter=10_000, callback=None)
    assert steps(again) <= 1 or steps(again) < steps(warm)


def test_a_start_at_a_solution_keeps_its_bounded_variables_at_their_bounds():
    """Balancing a start whose class sums differ by rounding scales the heavier class's free
    variables alone: a variable at its bound stays there (scaled by 1 - 1e-16 it became
    free, with a gradient pointing out of the box, and a solved problem started over)."""
    from muflow.operators import DenseGram
    from muflow.solvers._subset import Column
    from muflow.solvers.problem import DualProblem

    rng = np.random.default_rng(5)
    n = 40
    y = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    problem = DualProblem(DenseGram(np.eye(n)), y, upper=1.0, equality=True)
    alpha = np.where(rng.random(n) < 0.5, 1.0, rng.uniform(0.1, 0.9, n))
    pos = y > 0
    alpha[~pos] *= alpha[pos].sum() / alpha[~pos].sum()
    alpha[~pos] = np.minimum(alpha[~pos], 1.0)
    alpha[np.flatnonzero(pos)[0]] = 1.0
    free_neg = np.flatnonzero(~pos & (alpha > 0) & (alpha < 1))
    alpha[free_neg[0]] += alpha[pos].sum() - alpha[~pos].sum() + 1e-15  # a rounding's excess
    start = Column(problem, 0).start(alpha)
    at_bound = alpha >= 1.0
    assert np.all(start[at_bound] == 1.0)
    assert abs(start[pos].sum() - start[~pos].sum()) <= 1e-13
    assert np.all((start >= 0) & (start <= 1.0))
    # an excess larger than the free variables hold: the whole class is scaled, as before
    heavy = np.where(pos, 1.0, 0.05)
    start = Column(problem, 0).start(heavy)
    assert abs(start[pos].sum() - start[~pos].sum()) <= 1e-12 and np.all(start <= 1.0)
