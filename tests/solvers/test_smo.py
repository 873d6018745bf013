"""SMO against libsvm (exact bias), SciPy primal references for the variants, and invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import minimize

from muflow.exceptions import SolverCombinationError
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.problem import DualProblem
from muflow.solvers.smo import solve_smo
from tests._references import a8a
from tests.solvers._operators import RowsOnlyGram

TOL = 1e-3


def libsvm(K, y, C, sample_weight=None):
    from sklearn.svm import SVC

    ref = SVC(kernel="precomputed", C=C, tol=1e-8, max_iter=10**8).fit(K, y, sample_weight=sample_weight)
    alpha = np.zeros(len(y))
    alpha[ref.support_] = np.abs(ref.dual_coef_[0])
    return alpha, ref


def primal_reference(X, y, upper, offset, *, intercept, positive=False):
    """min 1/2||beta||^2 + sum C_i xi_i s.t. y_i (x_i'beta + b + d_i) >= 1 - xi_i, xi >= 0
    (b only with ``intercept``, beta >= 0 with ``positive``), by SLSQP to 1e-12."""
    n, d = X.shape
    nb = int(intercept)
    A = np.hstack([y[:, None] * X, y[:, None] * np.ones((n, nb)), np.eye(n)])
    rhs = 1.0 - y * offset

    def f(z):
        beta, xi = z[:d], z[d + nb:]
        grad = np.concatenate([beta, np.zeros(nb), upper])
        return 0.5 * beta @ beta + upper @ xi, grad

    bounds = [(0.0 if positive else None, None)] * d + [(None, None)] * nb + [(0.0, None)] * n
    res = minimize(f, np.zeros(d + nb + n), jac=True, method="SLSQP", bounds=bounds,
                   constraints=[{"type": "ineq", "fun": lambda z: A @ z - rhs, "jac": lambda z: A}],
                   options={"ftol": 1e-13, "maxiter": 2000})
    # status 8 (no descent direction left) is SLSQP at the limit of its precision
    assert res.success or res.status == 8, res.message
    assert np.min(A @ res.x - rhs) > -1e-7
    z = res.x
    return z[:d], (z[d] if intercept else 0.0), res.fun


def rbf(A, B, gamma):
    return Kernel("rbf", gamma=gamma).block(A, B)


def _agree(a, b):
    return np.mean(np.sign(a) == np.sign(b))


@pytest.fixture
def a8a_subset():
    X, y = a8a(1200)
    X = X.toarray()
    return X[:800], X[800:], y[:800], y[800:]


@pytest.mark.parametrize("data, gamma, C", [
    ("breast_cancer_split", 0.5, 1.0),
    ("sonar_split", 1.0, 10.0),
    ("generated_split", 0.3, 1.0),
    ("a8a_subset", 0.05, 1.0),
])
def test_smo_matches_libsvm(data, gamma, C, request):
    Xtr, Xte, ytr, yte = request.getfixturevalue(data)
    ytr = np.where(np.asarray(ytr) > 0, 1.0, -1.0)
    K = rbf(Xtr, Xtr, gamma)
    problem = DualProblem(DenseGram(K), ytr, upper=C, equality=True)
    sol = solve_smo(problem, tol=TOL)
    assert sol.converged.all()
    # the solver's own report agrees with an independent evaluation of the KKT measure
    assert problem.kkt_violation(sol.alpha)[0][0] <= TOL * (1 + 1e-9)
    assert abs(np.sum(ytr * sol.alpha[:, 0])) < 1e-8 * max(1.0, sol.alpha.sum())
    alpha_ref, ref = libsvm(K, ytr, C)
    f_ref = problem.objective(alpha_ref[:, None])[0]
    assert abs(sol.objective[0] - f_ref) <= 1e-3 * abs(f_ref)
    Kte = rbf(Xte, Xtr, gamma)
    ours = Kte @ (ytr * sol.alpha[:, 0]) + sol.bias[0]
    assert _agree(ours, ref.decision_function(Kte)) >= 0.99


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), C=st.floats(0.05, 20.0), n=st.integers(5, 60))
def test_smo_feasible_and_certified(seed, C, n):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    y[0], y[1] = 1.0, -1.0
    upper = C * rng.uniform(0.0, 2.0, n)
    upper[:2] = C
    problem = DualProblem(RowsOnlyGram(rbf(X, X, 0.7)), y, upper=upper, equality=True)
    sol = solve_smo(problem, tol=1e-4, cache_mb=0.001)  # two rows: eviction on every step
    a = sol.alpha[:, 0]
    assert np.all(a >= 0) and np.all(a <= upper)
    assert abs(y @ a) <= 1e-9 * max(1.0, a.sum())
    assert sol.kkt_violation[0] <= 1e-4
    assert np.all(np.diff(sol.objective_curve[:, 0]) <= 1e-9 * (1 + abs(sol.objective_curve[0, 0])))


def test_smo_batch_equals_columns(generated_split):
    Xtr, _, ytr, _ = generated_split
    Y = np.stack([ytr, -ytr, np.where(Xtr[:, 1] > 0, 1, -1)], axis=1).astype(float)
    K = rbf(Xtr, Xtr, 0.3)
    batch = solve_smo(DualProblem(DenseGram(K), Y, upper=1.0, equality=True), tol=1e-4)
    for j in range(3):
        one = solve_smo(DualProblem(DenseGram(K), Y[:, j], upper=1.0, equality=True), tol=1e-4)
        np.testing.assert_allclose(batch.alpha[:, j], one.alpha[:, 0], atol=1e-12)


def test_operator_without_rows_is_refused():
    from muflow.operators import GramOperator
    from muflow.solvers.registry import choose_solver

    class ProductsOnly(GramOperator):
        n, nonnegative = 4, True

        def matmul(self, V):
            return V

    assert not ProductsOnly().has_rows
    problem = DualProblem(ProductsOnly(), np.array([1.0, -1, 1, -1]), equality=True)
    with pytest.raises(SolverCombinationError, match="DenseGram"):
        solve_smo(problem)
    with pytest.raises(SolverCombinationError, match="solver 'smo' reads rows"):
        choose_solver("auto", intercept="exact", kernel_nonnegative=True, operator=ProductsOnly())
    assert choose_solver("m3", intercept="exact", kernel_nonnegative=True,
                         operator=ProductsOnly()).needs == "products"


def test_a_problem_refuses_what_is_not_an_operator():
    from muflow.exceptions import MuflowInputError

    with pytest.raises(MuflowInputError, match="DenseGram"):
        DualProblem(np.eye(2), np.array([1.0, -1.0]))


def test_the_callback_interval_does_not_grow_with_n():
    """A deadline hears from SMO every callback_interval(n) pair steps: a sweep of n steps on
    small problems, a fixed amount of work on large ones (a sweep of n steps is n^2 work,
    which let a time limit on a large stored K run several times over: issue 38)."""
    from muflow.solvers.smo import CALLBACK_WORK, callback_interval

    assert callback_interval(1) == 1 and callback_interval(500) == 500
    for n in (3000, 40_000, 10**6):
        assert 64 <= callback_interval(n) < n and callback_interval(n) * n <= max(CALLBACK_WORK, 64 * n)
    rng = np.random.default_rng(5)
    n = 3000
    X = rng.normal(size=(n, 4))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)  # random labels: many steps
    K = rbf(X, X, 0.1)
    steps = []

    def hear(iteration, alpha, objective):  # libsvm_iterations: the iteration is the step
        steps.append(iteration)
        return len(steps) == 3

    sol = solve_smo(DualProblem(DenseGram(K), y, 100.0, equality=True), tol=1e-6,
                    callback=hear, libsvm_iterations=True)
    assert len(steps) == 3 and np.diff([0] + steps).max() <= callback_interval(n) < n
    assert sol.timings["pair_steps"] == steps[-1]  # stopped at the third check


def test_smo_stops_where_a_tol_below_rounding_cannot_be_met_with_its_best_point():
    """At tol = 1e-15 the pair steps cycle at rounding level and never meet their gap: SMO
    notices that its objective no longer falls, certifies, and gives up where certificates
    stop improving (the working-set loop's stall rule), long before max_iter, returning
    the best point it certified: no worse than what tol = 1e-12 reaches."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 5))
    y = np.where(X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=300) > 0, 1.0, -1.0)
    problem = DualProblem(DenseGram(Kernel("rbf", gamma=0.5).block(X)), y, upper=100.0,
                          equality=True)
    reachable = solve_smo(problem, tol=1e-12, max_iter=40_000)
    assert reachable.converged.all()
    below = solve_smo(problem, tol=1e-15, max_iter=40_000)
    assert below.n_iter < 40_000 and not below.converged.all()
    assert below.kkt_violation.max() <= max(reachable.kkt_violation.max(), 1e-13)


def badly_scaled_cubic(loc=10.0):
    """100 points about (loc, loc) and the cubic kernel (gamma x'z)^3 with scikit-learn's
    gamma = "scale": K has rank 4 and entries near 1e6 at loc = 10. Each entry is the exact
    value correctly rounded (fractions), so that the steps do not depend on how a BLAS sums."""
    from fractions import Fraction

    rng = np.random.RandomState(0)
    X = rng.normal(loc=loc, size=(100, 2))
    gamma = Fraction(1.0 / (X.shape[1] * X.var()))
    F = [[Fraction(v) for v in row] for row in X]
    K = np.array([[float((gamma * (a[0] * b[0] + a[1] * b[1])) ** 3) for b in F] for a in F])
    return X, K, np.array([-1.0, 1.0] * 50)


def test_smo_brings_shrunk_variables_back_before_a_crawling_active_set_is_solved():
    """On a badly scaled cubic kernel the pair steps shrink to a nearly singular block of
    free variables whose gap then stays between tol and 10 tol for millions of steps, while
    a shrunk variable violates the KKT conditions by 0.8: without libsvm's unshrinking at
    10 tol the objective stopped at -83.22 (its optimum, by the primal in the kernel's
    4 features, is -86.337). With it SMO does at least as well as libsvm (scikit-learn's
    SVC on the same K, whose float32 kernel cache ends it at -86.04) in fewer steps."""
    from sklearn.svm import SVC

    X, K, y = badly_scaled_cubic()
    problem = DualProblem(DenseGram(K), y, upper=1.0, equality=True)
    steps = 3_000_000
    sol = solve_smo(problem, tol=TOL, max_iter=steps, libsvm_iterations=True)
    assert sol.timings["pair_steps"] <= steps
    alpha = sol.alpha[:, 0]
    assert abs(y @ alpha) < 1e-10 and alpha.min() >= 0.0 and alpha.max() <= 1.0

    def objective(a):
        return 0.5 * (y * a) @ K @ (y * a) - a.sum()

    ref = SVC(kernel="precomputed", tol=TOL).fit(K, y)
    assert ref.n_iter_[0] > steps
    ref_alpha = np.zeros(len(y))
    ref_alpha[ref.support_] = np.abs(ref.dual_coef_[0])
    assert objective(alpha) <= objective(ref_alpha)
    a, b = X[:, 0], X[:, 1]  # (gamma x'z)^3 = phi(x)'phi(z), centred (the bias absorbs it)
    gamma = 1.0 / (X.shape[1] * X.var())
    phi = gamma**1.5 * np.stack([a**3, 3**0.5 * a * a * b, 3**0.5 * a * b * b, b**3], axis=1)
    *_, primal = primal_reference(phi - phi.mean(axis=0), y, np.ones(len(y)), np.zeros(len(y)),
                                  intercept=True)
    np.testing.assert_allclose(objective(alpha), -primal, rtol=5e-3)


@pytest.mark.parametrize("shrinking", [True, False])
def test_a_column_whose_second_class_has_no_room_stops_at_zero(shrinking):
    """All of one class's bounds 0 (a one-vs-one pair with a class weighted 0): I_low is
    empty, the gap -inf, and the pair loop returned UNSHRINK forever (the fit hung)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20, 2))
    y = np.r_[np.ones(10), -np.ones(10)]
    problem = DualProblem(DenseGram(rbf(X, X, 0.5)), y, upper=np.r_[np.ones(10), np.zeros(10)],
                          equality=True)
    sol = solve_smo(problem, tol=TOL, shrinking=shrinking)
    np.testing.assert_array_equal(sol.alpha[:, 0], 0.0)
    assert sol.converged.all()
