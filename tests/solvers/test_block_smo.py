"""The working set's dense subproblem solver against the library's SMO and the KKT conditions.

:func:`muflow.solvers._block_compiled.block_smo` (through
:func:`muflow.solvers.working_set_loop.solve_subproblem`) on random positive definite blocks
with per-variable bounds, from a feasible start: the same objective as SMO over a row cache
(:func:`muflow.solvers.smo.solve_smo`, libsvm's algorithm) to 1e-9, a KKT violation within
the asked gap, the sum y'a kept, and the reported objective change equal to the change of
F computed afresh.
"""

from __future__ import annotations

import numpy as np
import pytest

from muflow.operators import DenseGram
from muflow.solvers.kkt import kkt_violation
from muflow.solvers.problem import DualProblem
from muflow.solvers.smo import solve_smo
from muflow.solvers.working_set_loop import solve_subproblem


def _block(q, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((q, 5))
    K = np.exp(-0.3 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    y = np.where(rng.random(q) < 0.5, -1.0, 1.0)
    U = rng.uniform(0.5, 3.0, q)
    return K, y, U


def _objective(K, y, p, a):
    v = y * a
    return 0.5 * v @ K @ v + p @ a


@pytest.mark.parametrize("equality", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_block_solver_reaches_smo_s_optimum(equality, seed):
    K, y, U = _block(60, seed)
    p = -np.ones(60)
    a0 = np.zeros(60)
    G0 = y * (K @ (y * a0)) + p
    # the internal gap asked is a tenth of max(gap, gap_tol): here 1e-9
    new, change, steps = solve_subproblem(K, y, U, a0, G0, equality=equality, gap=1e-8,
                                          gap_tol=1e-8)
    assert steps > 10
    assert np.all(new >= 0) and np.all(new <= U)
    if equality:
        assert abs(y @ new) <= 1e-9
    F = _objective(K, y, p, new)
    assert change == pytest.approx(F - _objective(K, y, p, a0), rel=1e-10)
    reference = solve_smo(DualProblem(DenseGram(K), y, upper=U, equality=equality), tol=1e-9)
    assert F == pytest.approx(float(reference.objective[0]), rel=1e-9)
    grad = y * (K @ (y * new)) + p
    violation, _ = kkt_violation(DualProblem(DenseGram(K), y, upper=U, equality=equality),
                                 new[:, None], grad[:, None])
    assert float(np.max(violation)) <= 1e-8


def test_a_start_at_the_optimum_takes_no_step():
    K, y, U = _block(30, 5)
    p = -np.ones(30)
    reference = solve_smo(DualProblem(DenseGram(K), y, upper=U, equality=True), tol=1e-10)
    a = reference.alpha[:, 0].copy()
    G = y * (K @ (y * a)) + p
    new, change, steps = solve_subproblem(K, y, U, a, G, equality=True, gap=1e-3, gap_tol=1e-3)
    assert steps == 0 and change == 0.0 and np.array_equal(new, a)
