"""The one KKT measure: its compiled forms against the NumPy reference, and every solver's
reported violation against the reference at the solution it returns."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.kernels import Kernel
from muflow.linear import LinearSVC
from muflow.operators import DenseGram
from muflow.solvers._compiled import class_products_summary, pass_summary
from muflow.solvers._kkt_compiled import residuals_column
from muflow.solvers.kkt import kkt_violation, kkt_violation_reference, residuals_reference
from muflow.solvers.problem import DualProblem
from muflow.solvers.registry import SOLVERS


def random_columns(rng, n, m, *, hard_margin=False):
    """alpha, g, y, U of m columns: alpha at 0, at U and inside the box; some samples pinned
    (U = 0, alpha = 0); U = inf on some samples with ``hard_margin``. The gradient is
    -y b + noise, with a column-specific b, so that the minimising bias is not 0."""
    y = np.where(rng.random((n, m)) < 0.5, 1.0, -1.0)
    U = rng.uniform(0.5, 2.0, (n, m))
    U[rng.random((n, m)) < 0.15] = 0.0
    if hard_margin:
        U[rng.random((n, m)) < 0.3] = np.inf
    box = np.minimum(U, 3.0)
    near = rng.uniform(0.0, 0.02, (n, m))  # within a typical level of a bound
    alpha = np.choose(rng.integers(0, 5, (n, m)),
                      [np.zeros((n, m)), box, rng.uniform(0.0, 1.0, (n, m)) * box, near,
                       box - near])
    alpha = np.where(U > 0.0, np.clip(alpha, 0.0, U), 0.0)
    b = rng.normal(0.0, 2.0, m)
    noise = rng.normal(0.0, 1.0, (n, m)) * rng.choice([1e-3, 0.1, 1.0], m)
    g = -y * b + noise
    return alpha, g, y, U


class _Columns:
    """The minimum of a DualProblem that :func:`kkt_violation` reads."""

    def __init__(self, y, upper, equality):
        self.y, self.upper, self.equality = y, upper, equality


def _scale(g):
    return 1.0 + np.abs(g).max()


@pytest.mark.parametrize("equality", [False, True])
@pytest.mark.parametrize("hard_margin", [False, True])
def test_compiled_measure_matches_reference(equality, hard_margin):
    rng = np.random.default_rng(7 + 2 * equality + hard_margin)
    for _ in range(200):
        n, m = int(rng.integers(1, 30)), int(rng.integers(1, 5))
        alpha, g, y, U = random_columns(rng, n, m, hard_margin=hard_margin)
        bias = _agrees_with_reference(alpha, g, y, U, equality)
        if not equality:
            assert np.all(bias == 0.0)


def _agrees_with_reference(alpha, g, y, U, equality):
    """The compiled measure equals the reference, and its bias attains its violation; the
    bias."""
    viol, bias = kkt_violation(_Columns(y, U, equality), alpha, g)
    ref, _ = kkt_violation_reference(alpha, g, y, U, equality)
    eps = 1e-9 * _scale(g)
    np.testing.assert_allclose(viol, ref, rtol=0, atol=eps)
    at_bias = residuals_reference(alpha, g, y, U, bias).max(axis=0, initial=0.0)
    np.testing.assert_allclose(at_bias, viol, rtol=0, atol=eps)
    return bias


@pytest.mark.parametrize("equality", [False, True])
def test_compiled_measure_matches_reference_in_boxes_below_one(equality):
    """Bounds far below 1 (C = 1e-5 to 1e-2): the step s_i = U_i, in the compiled measure
    as in the reference."""
    rng = np.random.default_rng(11 + equality)
    for _ in range(100):
        n, m = int(rng.integers(1, 30)), int(rng.integers(1, 4))
        alpha, g, y, U = random_columns(rng, n, m)
        box = 10.0 ** rng.uniform(-5, -2, m)
        _agrees_with_reference(alpha * box, g, y, U * box, equality)


@pytest.mark.parametrize("upper", [1e-4, 0.5, 1.0, 100.0])
def test_a_violating_gradient_counts_in_full_however_small_the_box(upper):
    """A sample at 0 whose gradient says it should grow (g = -0.3) violates by 0.3 whatever
    C: with a step of 1 its residual stopped at U, so below C = tol every point passed
    (every alpha of breast cancer at C = 1e-4 did, with the bias left at 0)."""
    alpha, g = np.array([[0.0], [upper]]), np.array([[-0.3], [-0.3]])
    y, U = np.ones((2, 1)), np.full((2, 1), upper)
    viol, _ = kkt_violation(_Columns(y, U, False), alpha, g)
    np.testing.assert_allclose(viol, [min(0.3, max(upper, 1.0))], rtol=1e-12)
    ref, _ = kkt_violation_reference(alpha, g, y, U, False)
    np.testing.assert_allclose(ref, viol, rtol=1e-12)


def test_equality_bias_is_not_the_hint():
    """A hint far from the optimum does not change the measure (it only seeds the search)."""
    rng = np.random.default_rng(3)
    alpha, g, y, U = random_columns(rng, 30, 3)
    cols = _Columns(y, U, True)
    base, _ = kkt_violation(cols, alpha, g)
    hinted, _ = kkt_violation(cols, alpha, g, bias_hint=np.array([50.0, -50.0, 0.0]))
    np.testing.assert_allclose(hinted, base, rtol=0, atol=1e-9 * _scale(g))


@pytest.mark.parametrize("equality", [False, True])
def test_per_pass_test_agrees_with_reference(equality):
    """The per-pass summary says "violation <= tol" exactly when the reference does."""
    rng = np.random.default_rng(11 + equality)
    for _ in range(20):
        n, m = int(rng.integers(1, 40)), 6
        alpha, g, y, U = random_columns(rng, n, m)
        ref, _ = kkt_violation_reference(alpha, g, y, U, equality)
        linear = rng.normal(size=(n, m))
        q = g - linear
        for factor in (1 - 1e-6, 1 + 1e-6, 0.5, 2.0):
            tol = float(np.median(ref)) * factor
            F, ok, top = np.empty(m), np.empty(m, np.bool_), np.empty(m)
            pass_summary(alpha, q, linear, y, U, equality, tol, F, ok, top)
            np.testing.assert_array_equal(ok, ref <= tol)


@pytest.mark.parametrize("equality", [False, True])
def test_fused_class_products_summary_agrees_with_reference(equality):
    """The fused pass (products split by class, then the summary) gives the same verdict."""
    rng = np.random.default_rng(5 + equality)
    n, m = 41, 4
    alpha, g, y, U = random_columns(rng, n, m)
    y = np.repeat(y[:, :1], m, axis=1)  # one label vector: KV = K @ split(alpha, y)
    KV = rng.normal(size=(n, 2 * m)).astype(np.float32)
    pos = y > 0
    kp, kn = KV[:, :m].astype(np.float64), KV[:, m:].astype(np.float64)
    q = y * (kp - kn)
    linear = g - q
    ref, _ = kkt_violation_reference(alpha, q + linear, y, U, equality)
    for tol in (0.5 * ref.min(), float(np.median(ref)) * (1 + 1e-6), 2 * ref.max()):
        P, N, q_out = np.empty((n, m)), np.empty((n, m)), np.empty((n, m))
        F, ok, top = np.empty(m), np.empty(m, np.bool_), np.empty(m)
        class_products_summary(KV, y, alpha, linear, U, equality, tol, P, N, q_out, F, ok, top)
        np.testing.assert_array_equal(q_out, q)
        np.testing.assert_array_equal(P, np.where(pos, kp, kn))
        np.testing.assert_array_equal(ok, ref <= tol)


def test_residuals_column_matches_reference():
    rng = np.random.default_rng(2)
    alpha, g, y, U = random_columns(rng, 50, 1, hard_margin=True)
    a, gg, yy, uu = (np.ascontiguousarray(v[:, 0]) for v in (alpha, g, y, U))
    for b in (0.0, 1.7, -3.2):
        out = np.empty(50)
        residuals_column(a, gg, yy, uu, b, out)
        np.testing.assert_array_equal(out, residuals_reference(a, gg, yy, uu, b)[:, 0])


def test_reference_is_a_minimum_over_biases():
    """The reference's own check: no bias on a fine grid does better than its minimum."""
    rng = np.random.default_rng(9)
    alpha, g, y, U = random_columns(rng, 25, 2, hard_margin=True)
    ref, bias = kkt_violation_reference(alpha, g, y, U, True)
    for j in range(2):
        grid = bias[j] + np.linspace(-5.0, 5.0, 20001)
        values = residuals_reference(alpha[:, j], g[:, j], y[:, j], U[:, j], grid).max(axis=0)
        assert values.min() >= ref[j] - 1e-12 * _scale(g)


def _problem(equality, n=60, m=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.where(X[:, 0] + 0.4 * rng.normal(size=n) > 0, 1.0, -1.0)
    K = Kernel("rbf", gamma=0.5).block(X, X)
    upper = np.column_stack([np.full(n, 0.5 + j) for j in range(m)])
    upper[::9, -1] = 0.0  # a fold's held-out samples
    return DualProblem(DenseGram(K), np.repeat(y[:, None], m, axis=1), upper=upper,
                       equality=equality)


@pytest.mark.parametrize("name", sorted(SOLVERS))
@pytest.mark.parametrize("intercept", ["exact", "none"])
def test_solver_reports_the_reference_violation(name, intercept):
    """Each solver's reported kkt_violation is the reference measure at its alpha."""
    info = SOLVERS[name]
    if intercept not in info.intercepts:
        pytest.skip(f"{name} does not support intercept={intercept!r}")
    problem = _problem(intercept == "exact")
    sol = info.solve(problem, tol=1e-3)
    grad = problem.gradient(sol.alpha)
    ref, _ = kkt_violation_reference(sol.alpha, grad, problem.y, problem.upper, problem.equality)
    eps = 1e-9 * _scale(grad)
    np.testing.assert_allclose(sol.kkt_violation, ref, rtol=1e-7, atol=eps)
    at_bias = residuals_reference(sol.alpha, grad, problem.y, problem.upper, sol.bias)
    np.testing.assert_allclose(at_bias.max(axis=0), sol.kkt_violation, rtol=1e-7, atol=eps)


@pytest.mark.parametrize("intercept", ["none", "regularized"])
def test_linear_cd_reports_the_reference_violation(intercept):
    rng = np.random.default_rng(4)
    n, d = 300, 5
    X = rng.normal(size=(n, d))
    y = np.where(X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0, 1, -1)
    weight = np.where(rng.random(n) < 0.1, 0.0, 1.0)  # pinned samples
    est = LinearSVC(C=0.7, tol=1e-4, random_state=0, intercept=intercept).fit(
        X, y, sample_weight=weight)
    yc = np.where(y == est.classes_[1], 1.0, -1.0)
    grad = yc * (X @ est.coef_[0] + est.intercept_[0]) - 1.0
    ref, _ = kkt_violation_reference(est.dual_coef_[0], grad, yc, 0.7 * weight, False)
    assert ref[0] <= 1e-4 * (1 + 1e-9)
    np.testing.assert_allclose(est.kkt_violation_, ref, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("equality", [False, True])
@pytest.mark.parametrize("where", ["alpha", "grad"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_state_measures_inf_never_zero(equality, where, value):
    """A NaN compares false: a running maximum would stay 0 and call the state converged.
    Both the certificate and the per-pass test say "not a KKT point" instead (issue 33)."""
    rng = np.random.default_rng(21)
    n, m = 30, 3
    alpha, g, y, U = random_columns(rng, n, m)
    alpha[:] = 0.0  # a column at zero with a zero gradient would measure 0
    g[:] = 0.0
    {"alpha": alpha, "grad": g}[where][4, 1] = value
    viol, _ = kkt_violation(_Columns(y, U, equality), alpha, g)
    assert viol[1] == np.inf and viol[0] == 0.0 and viol[2] == 0.0
    F, ok, top = np.empty(m), np.empty(m, np.bool_), np.empty(m)
    linear = np.zeros((n, m))
    pass_summary(alpha, g - linear, linear, y, U, equality, 1e-3, F, ok, top)
    assert ok.tolist() == [True, False, True]


@pytest.mark.parametrize("name", ["smo", "working_set", "m3", "cd"])
def test_a_solver_refuses_a_non_finite_start(name):
    from muflow.exceptions import MuflowInputError

    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    problem = DualProblem(DenseGram(Kernel("rbf", gamma=0.5).block(X)), y, upper=1.0,
                          equality=name in ("smo", "working_set"))
    start = np.full(40, 0.1)
    start[[3, 9]] = np.nan
    with pytest.raises(MuflowInputError, match=r"init alpha holds 2 non-finite value\(s\)"):
        SOLVERS[name].solve(problem, init=start, tol=1e-3, max_iter=10)
    with pytest.raises(MuflowInputError, match=r"init bias holds 1 non-finite"):
        SOLVERS[name].solve(problem, init=(np.zeros(40), np.inf), tol=1e-3, max_iter=10)


def test_the_bias_of_an_iterate_far_from_kkt_is_libsvms():
    """After libsvm's first pair step (max_iter=1) both alphas sit at C: every residual is
    at its cap and every b minimises V. The measure then gives libsvm's bias of the
    iterate (the middle of its bound sets), not 0, so that a fit stopped early predicts
    as libsvm's does."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics.pairwise import rbf_kernel
    from sklearn.svm import SVC

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 5))
    labels = (X[:, 0] + 0.5 * rng.normal(size=600) > 1.0).astype(int)
    K = rbf_kernel(X, X, gamma=0.2)
    with pytest.warns(ConvergenceWarning):
        ref = SVC(kernel="precomputed", C=1.0, max_iter=1).fit(K, labels)
    y = np.where(labels == 1, 1.0, -1.0)
    alpha = np.zeros(600)
    alpha[ref.support_] = np.abs(ref.dual_coef_[0])
    g = y * (K @ (y * alpha)) - 1.0
    U = np.ones(600)
    viol, bias = kkt_violation(_Columns(y[:, None], U[:, None], True), alpha[:, None], g[:, None])
    assert viol[0] == pytest.approx(1.0)  # saturated: V says nothing about b
    assert bias[0] == pytest.approx(ref.intercept_[0], abs=1e-7) and abs(bias[0]) > 0.01
