"""Kernel Adatron against the SciPy box QP, its monotone objective and its bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from muflow.exceptions import SolverCombinationError
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.adatron import solve_adatron
from muflow.solvers.problem import DualProblem
from tests._references import box_qp


@pytest.mark.parametrize("data, gamma, C, offset", [
    ("breast_cancer_split", 0.5, 1.0, 1.0),
    ("sonar_split", 1.0, 10.0, 0.0),
])
def test_adatron_matches_box_qp(data, gamma, C, offset, request):
    Xtr, Xte, ytr, _ = request.getfixturevalue(data)
    y = np.where(np.asarray(ytr) > 0, 1.0, -1.0)
    kern = Kernel("rbf", gamma=gamma, offset=offset)
    K = kern.block(Xtr, Xtr)
    problem = DualProblem(DenseGram(K), y, upper=C)
    sol = solve_adatron(problem, tol=1e-4)
    assert sol.converged.all() and sol.solver == "adatron"
    a_ref, f_ref = box_qp(K, y, np.full(len(y), C), -np.ones(len(y)))
    assert abs(sol.objective[0] - f_ref) <= 1e-3 * abs(f_ref)
    Kte = kern.block(Xte, Xtr)
    assert np.mean(np.sign(Kte @ (y * sol.alpha[:, 0])) == np.sign(Kte @ (y * a_ref))) >= 0.99


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), eta=st.floats(0.2, 1.8), C=st.floats(0.1, 10.0))
def test_adatron_objective_never_increases(seed, eta, C):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] + rng.normal(size=40) > 0, 1.0, -1.0)
    problem = DualProblem(DenseGram(Kernel("rbf", gamma=0.5, offset=1.0).block(X, X)), y, upper=C)
    sol = solve_adatron(problem, tol=1e-5, eta=eta, max_iter=5000)
    curve = sol.objective_curve[:, 0]
    assert np.all(np.diff(curve) <= 1e-10 * (1 + abs(curve[0])))
    assert np.all((sol.alpha >= 0) & (sol.alpha <= C))


def test_adatron_bad_input():
    problem = DualProblem(DenseGram(np.eye(2)), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="eta"):
        solve_adatron(problem, eta=2.5)
    with pytest.raises(SolverCombinationError):
        solve_adatron(DualProblem(DenseGram(np.eye(2)), np.array([1.0, -1.0]), equality=True))
