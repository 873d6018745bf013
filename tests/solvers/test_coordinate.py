"""Kernel dual coordinate descent (``cd``) against SciPy references, with its variants."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from muflow.exceptions import SolverCombinationError
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.coordinate import solve_coordinate
from muflow.solvers.problem import DualProblem
from muflow.solvers.registry import choose_solver
from tests._references import box_qp
from tests.solvers._operators import RowsOnlyGram

TOL = 1e-4


def primal_no_bias(X, y, upper, offset):
    """min 1/2||beta||^2 + sum C_i xi_i, y_i (x_i'beta + d_i) >= 1 - xi_i, by SLSQP."""
    n, d = X.shape
    A = np.hstack([y[:, None] * X, np.eye(n)])

    def f(z):
        return 0.5 * z[:d] @ z[:d] + upper @ z[d:], np.concatenate([z[:d], upper])

    res = minimize(f, np.zeros(d + n), jac=True, method="SLSQP",
                   bounds=[(None, None)] * d + [(0.0, None)] * n,
                   constraints=[{"type": "ineq", "fun": lambda z: A @ z - (1 - y * offset),
                                 "jac": lambda z: A}], options={"ftol": 1e-13, "maxiter": 2000})
    # status 8 (no descent direction left) is SLSQP at the limit of its precision
    assert res.success or res.status == 8, res.message
    assert np.min(A @ res.x - (1 - y * offset)) > -1e-7
    return res.x[:d], res.fun


@pytest.mark.parametrize("data, gamma, C, offset_kernel", [
    ("breast_cancer_split", 0.5, 1.0, 0.0),
    ("sonar_split", 1.0, 10.0, 1.0),
    ("generated_split", 0.3, 1.0, 1.0),
])
def test_cd_matches_box_qp(data, gamma, C, offset_kernel, request):
    Xtr, Xte, ytr, _ = request.getfixturevalue(data)
    y = np.where(np.asarray(ytr) > 0, 1.0, -1.0)
    kern = Kernel("rbf", gamma=gamma, offset=offset_kernel)  # offset 1: "regularized"
    K = kern.block(Xtr, Xtr)
    problem = DualProblem(DenseGram(K), y, upper=C)
    sol = solve_coordinate(problem, tol=TOL)
    assert sol.converged.all() and problem.kkt_violation(sol.alpha)[0][0] <= TOL * (1 + 1e-9)
    a_ref, f_ref = box_qp(K, y, np.full(len(y), C), -np.ones(len(y)))
    assert abs(sol.objective[0] - f_ref) <= 1e-3 * abs(f_ref)
    Kte = kern.block(Xte, Xtr)
    agree = np.mean(np.sign(Kte @ (y * sol.alpha[:, 0])) == np.sign(Kte @ (y * a_ref)))
    assert agree >= 0.99


def test_weighted_drifted_cd_matches_scipy_primal(breast_cancer_split):
    Xtr, Xte, ytr, _ = breast_cancer_split
    X, y = Xtr[:120], ytr[:120].astype(float)
    rng = np.random.default_rng(11)
    upper = rng.uniform(0.2, 2.0, len(y))
    offset = rng.normal(scale=0.5, size=len(y))
    problem = DualProblem(DenseGram(X @ X.T), y, upper=upper, linear=-1.0 + y * offset)
    sol = solve_coordinate(problem, tol=TOL, random_state=1)
    beta_ref, p_ref = primal_no_bias(X, y, upper, offset)
    assert abs(-sol.objective[0] - p_ref) <= 1e-3 * abs(p_ref)
    beta = X.T @ (y * sol.alpha[:, 0])
    assert np.mean(np.sign(Xte @ beta) == np.sign(Xte @ beta_ref)) >= 0.99


def test_cd_refuses_the_sum_constraint():
    problem = DualProblem(DenseGram(np.eye(3)), np.array([1.0, -1, 1]), equality=True)
    with pytest.raises(SolverCombinationError, match="smo"):
        solve_coordinate(problem)
    with pytest.raises(SolverCombinationError, match="intercept"):
        choose_solver("cd", intercept="exact", kernel_nonnegative=True)


def test_cd_with_tiny_cache_matches_large_cache(sonar_split):
    Xtr, _, ytr, _ = sonar_split
    y = ytr.astype(float)
    K = Kernel("rbf", gamma=1.0, offset=1.0).block(Xtr, Xtr)
    problem = DualProblem(RowsOnlyGram(K), y, upper=5.0)
    small = solve_coordinate(problem, tol=TOL, cache_mb=0.002, random_state=4)
    large = solve_coordinate(problem, tol=TOL, cache_mb=64, random_state=4)
    np.testing.assert_allclose(small.alpha, large.alpha, atol=1e-12)
    assert small.timings["rows_fetched"] > large.timings["rows_fetched"]
