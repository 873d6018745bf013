"""The input-space margin (muflow.input_margin; input-space-margin.txt, Akaho).

Oracles: the exact margin of a hyperplane (linear kernel) and of a circle (one RBF basis),
the boundary itself (|f| at the projection points), the ordinary SVM (the special case of
section 3.2), the algebra of eq. (8)-(11) (the Gram of the QP against the updated
discriminant of eq. 10), eq. (22), and input_space_margin as the independent measure of
what InputMarginSVC keeps.
"""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import (
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
)

from muflow.exceptions import MuflowInputError
from muflow.input_margin import (
    Discriminant,
    InputMarginSVC,
    check_metric,
    default_qp_solver,
    full_step_problem,
    input_space_margin,
    project_hyperplane,
    project_onto_boundary,
    simplified_g,
    update_parameters,
)
from muflow.kernel_derivatives import kernel_gradient, kernel_value
from muflow.kernels import Kernel, gamma_from_sigma
from muflow.model import SVC
from muflow.solvers import SOLVERS

GAMMA = gamma_from_sigma(1.0)


def section4_data(seed, n_per_class=10):
    """One training set of the paper's section 4 simulation."""
    rng = np.random.default_rng(seed)
    X = []
    for _ in range(2):
        centres = rng.random((3, 2))
        X.append(centres[rng.integers(0, 3, n_per_class)] + 0.2 * rng.standard_normal((n_per_class, 2)))
    return np.vstack(X), np.r_[np.ones(n_per_class), -np.ones(n_per_class)]


def simulation_run(seed):
    """The training set of run ``seed`` of benchmarks/bench_input_margin_simulation.py
    (section 4: per class 3 centres uniform on [0, 1)^2, 10 points with sigma 0.2)."""
    rng = np.random.default_rng(seed)
    centres = [rng.random((3, 2)), rng.random((3, 2))]
    X = np.vstack([c[rng.integers(0, 3, 10)] + 0.2 * rng.standard_normal((10, 2)) for c in centres])
    return X, np.r_[np.ones(10), -np.ones(10)]


@pytest.fixture
def mixture():
    return section4_data(2)


@pytest.fixture
def separable_linear():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(30, 3))
    w = np.array([1.0, -2.0, 0.5])
    y = np.where(X @ w + 0.3 > 0, 1.0, -1.0)
    keep = np.abs(X @ w + 0.3) > 0.3  # a clear gap
    return X[keep], y[keep]


def hard_svm(X, y, **kw):
    return SVC(C=float("inf"), solver=default_qp_solver(), tol=1e-8, max_iter=10**6, **kw).fit(X, y)


def _svm_discriminant(svm, X):
    a = np.zeros(len(X))
    a[svm.support_] = svm.dual_coef_[0]
    return Discriminant(svm.kernel_, X.copy(), a, np.zeros_like(X), float(svm.intercept_[0]))


# -- input_space_margin ---------------------------------------------------------------
@pytest.mark.parametrize("metric", [None, np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]])])
def test_linear_kernel_gives_the_exact_margin_of_the_hyperplane(separable_linear, metric):
    X, y = separable_linear
    svm = hard_svm(X, y, kernel="linear")
    w = svm.dual_coef_[0] @ svm.support_vectors_
    f = X @ w + svm.intercept_[0]
    G_inv = np.eye(3) if metric is None else np.linalg.inv(metric)
    exact = y * f / np.sqrt(w @ G_inv @ w)  # distance to a hyperplane in the metric G
    res = input_space_margin(svm, X, y, metric=metric)
    np.testing.assert_allclose(res.distances, exact, rtol=1e-10)
    assert res.margin == pytest.approx(exact.min(), rel=1e-10)
    # projections: on the hyperplane and at that distance
    np.testing.assert_allclose(res.projections @ w + svm.intercept_[0], 0.0, atol=1e-9)
    d = res.projections - X
    G = np.eye(3) if metric is None else metric
    np.testing.assert_allclose(np.sqrt(np.einsum("is,st,it->i", d, G, d)), exact, rtol=1e-8)


def test_rbf_projections_lie_on_the_boundary(mixture):
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    res = input_space_margin(svm, X, y, max_iter=200)
    assert res.converged.all()
    assert np.abs(svm.decision_function(res.projections)).max() < 1e-6
    # a critical point of the distance: x* - x_i parallel to grad f(x*) (eq. 13)
    grad = _svm_discriminant(svm, X).gradient(res.projections)
    d = res.projections - X
    cos = np.abs(np.einsum("is,is->i", d, grad)) / (np.linalg.norm(d, axis=1) * np.linalg.norm(grad, axis=1))
    np.testing.assert_allclose(cos, 1.0, atol=1e-6)
    # at convergence eq. (3) is the length of x* - x_i; hard margin: all positive
    np.testing.assert_allclose(res.distances, np.linalg.norm(d, axis=1), rtol=1e-6)
    assert res.margin > 0 and res.margin == res.distances.min()


def test_projection_is_not_farther_than_a_dense_search_of_the_boundary(mixture):
    """In 2-D the nearest boundary point can be found by brute force on a fine grid."""
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    res = input_space_margin(svm, X, y, max_iter=200)
    g = np.linspace(-1.0, 2.0, 601)
    gx, gy = np.meshgrid(g, g)
    f = svm.decision_function(np.c_[gx.ravel(), gy.ravel()]).reshape(gx.shape)
    cross = (np.sign(f[:, 1:]) != np.sign(f[:, :-1]))
    pts = np.c_[gx[:, 1:][cross], gy[:, 1:][cross]]
    brute = np.sqrt(((X[:, None, :] - pts[None]) ** 2).sum(-1)).min(axis=1)
    i = np.argmin(res.distances)
    # the margin sample: the local projection is the global one, up to the grid spacing
    assert abs(res.distances[i] - brute[i]) < 2 * (g[1] - g[0])


def test_metric_scaling_scales_distances(mixture):
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    base = input_space_margin(svm, X, y)
    scaled = input_space_margin(svm, X, y, metric=4.0 * np.eye(2))
    np.testing.assert_allclose(scaled.distances, 2.0 * base.distances, rtol=1e-6)
    per_sample = input_space_margin(svm, X, y, metric=np.broadcast_to(4.0 * np.eye(2), (len(X), 2, 2)))
    np.testing.assert_allclose(per_sample.distances, scaled.distances, rtol=1e-12)


def test_slow_down_converges_where_the_plain_iteration_may_not():
    """Section 3.4: damping the oscillating tangential axes at a local minimum."""
    X, y = section4_data(3)
    svm = hard_svm(X, y, gamma=GAMMA)
    slow = input_space_margin(svm, X, y, max_iter=200, slow_down=True)
    plain = input_space_margin(svm, X, y, max_iter=200, slow_down=False)
    assert slow.converged.all()
    assert slow.converged.sum() >= plain.converged.sum()
    both = plain.converged
    np.testing.assert_allclose(slow.projections[both], plain.projections[both], atol=1e-6)


def _circle(r0=1.0, gamma=0.5):
    """f(x) = exp(-gamma |x|^2) - exp(-gamma r0^2): its boundary is the circle |x| = r0."""
    kernel = Kernel("rbf", gamma=gamma)
    return Discriminant(kernel, np.zeros((1, 2)), np.ones(1), np.zeros((1, 2)), -np.exp(-gamma * r0**2))


def test_projection_from_where_grad_f_vanishes_stays_finite():
    """Started 25 from the basis (grad f ~ 1e-135), eq. (12) aims 1e134 away; the next step
    back, with another sample at an unstable local minimum, overflowed in the slow-down
    (RuntimeWarning: overflow encountered in multiply). Moves are now bounded by the reach."""
    disc = _circle()
    X = np.array([[-2.0, 0.0], [2.0, 0.3]])
    _, G_inv, L = check_metric(None, *X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        x_hat, _, converged, diverged = project_onto_boundary(
            disc, X, G_inv, L, x_start=np.array([[-25.0, 0.0], [2.0, 0.3]]))
    assert converged.all() and not diverged.any()
    np.testing.assert_allclose(np.linalg.norm(x_hat, axis=1), 1.0, rtol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(x_hat - X, axis=1), np.linalg.norm(X, axis=1) - 1.0, rtol=1e-9)


@pytest.mark.parametrize("seed", [24, 76, 85])
def test_projection_converges_where_plain_eq_12_cycles(seed):
    """The SVMs of these runs: from some samples (run 24: sample 17, through three points
    off the boundary) the iteration (12) did not settle in 200 iterations without the
    backtracking on the merit function (runs 76, 85) or without it and the slow-down kept
    to the boundary (runs 24, 85)."""
    X, y = simulation_run(seed)
    svm = hard_svm(X, y, gamma=GAMMA)
    res = input_space_margin(svm, X, y)
    assert res.converged.all() and not res.diverged.any()
    assert np.abs(svm.decision_function(res.projections)).max() < 1e-6


def test_a_sample_without_boundary_in_reach_is_reported(mixture):
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    far = np.vstack([X, [[40.0, 40.0]]])  # grad f underflows to 0 there
    found = r"1 sample\(s\) \(indices \[20\]\) found no boundary within reach"
    with pytest.warns(ConvergenceWarning, match=found):
        res = input_space_margin(svm, far, np.r_[y, -1.0])
    assert res.diverged.tolist() == [False] * len(X) + [True]
    assert res.converged[:-1].all() and np.isfinite(res.distances).all()


# -- Algorithm 1: the special case and the algebra of one step --------------------------
def test_step_zero_with_identity_simplification_is_the_ordinary_svm(mixture):
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    disc = _svm_discriminant(svm, X)
    _, G_inv, _ = check_metric(None, *X.shape)
    step = full_step_problem(disc, X, y, G_inv, float("inf"), identity=True)
    np.testing.assert_allclose(step.gram, svm.kernel_.block(X), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(step.problem.linear[:, 0], -1.0)
    sol = SOLVERS[default_qp_solver()].solve(step.problem, tol=1e-8, max_iter=10**6)
    coef = sol.alpha[:, 0] * y
    np.testing.assert_allclose(coef[svm.support_], svm.dual_coef_[0], rtol=1e-6, atol=1e-6 * np.abs(coef).max())
    assert sol.bias[0] == pytest.approx(svm.intercept_[0], rel=1e-6)
    # and the estimator at step 0 is the ordinary SVM
    model = InputMarginSVC(gamma=GAMMA, n_steps=0).fit(X, y)
    grid = np.random.default_rng(0).random((50, 2))
    np.testing.assert_allclose(model.decision_function(grid), svm.decision_function(grid), rtol=1e-6, atol=1e-6)
    assert model.input_margin_ == pytest.approx(input_space_margin(svm, X, y).margin, rel=1e-9)


def test_qp_step_matches_the_parameter_update(mixture):
    """K'(alpha y) = omega . z_i for omega of eq. (10), constraint (5) holds, with equality on
    the support set (eq. 11)."""
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    disc = _svm_discriminant(svm, X)
    _, G_inv, L = check_metric(None, *X.shape)
    x_new = project_onto_boundary(disc, X, G_inv, L, max_iter=10)[0]
    support = np.flatnonzero(disc.a)
    projected = project_hyperplane(disc, x_new, X, support)
    T = np.vstack([X, x_new])
    assert np.abs(projected.value(T) - disc.value(T)).max() < 1e-4 * np.abs(disc.value(T)).max()
    step = full_step_problem(projected, X, y, G_inv, float("inf"))
    sol = SOLVERS[default_qp_solver()].solve(step.problem, tol=1e-10, max_iter=10**6)
    alpha = sol.alpha[:, 0]
    new = update_parameters(projected, step, alpha, sol.bias[0], y)
    f_xhat = new.value(x_new) - new.f0
    grad = new.gradient(x_new)
    w_phi = f_xhat - np.einsum("is,is->i", step.d_hat, grad)
    w_what = projected.a @ f_xhat + np.einsum("is,is->", projected.b, grad)
    N = np.einsum("is,is->i", step.q, step.Gq)
    w_eta = (np.einsum("is,is->i", step.Gq, grad) - N / step.r * w_what) / (step.g * step.r)
    scale = np.abs(step.gram @ (alpha * y)).max()
    np.testing.assert_allclose(step.gram @ (alpha * y), w_phi - y * w_eta, atol=1e-8 * scale)
    slack = y * (w_phi + new.f0) - w_eta - step.g
    assert slack.min() > -1e-6
    active = alpha > 1e-8 * alpha.max()
    np.testing.assert_allclose(slack[active], 0.0, atol=1e-6)


def test_simplified_g_is_eq_22(mixture):
    X, y = mixture
    svm = hard_svm(X, y, gamma=GAMMA)
    disc = _svm_discriminant(svm, X)
    _, G_inv, _ = check_metric(None, *X.shape)
    a = disc.a
    num = np.linalg.norm(np.einsum("ijs,j->is", kernel_gradient(svm.kernel_, X, X), a), axis=1)
    den = np.sqrt(a @ kernel_value(svm.kernel_, X, X) @ a)
    np.testing.assert_allclose(simplified_g(disc, X, G_inv), num / den, rtol=1e-8)


# -- the estimator -------------------------------------------------------------------
@pytest.mark.parametrize("method", ["full", "simplified"])
def test_fit_improves_the_margin_and_evaluates_eq_2(mixture, method):
    X, y = mixture
    model = InputMarginSVC(gamma=GAMMA, method=method, n_steps=5).fit(X, y)
    assert model.margin_history_.shape == model.estimated_margin_history_.shape == (6,)
    assert model.best_step_ == np.argmax(model.margin_history_)
    assert model.input_margin_ == model.margin_history_[model.best_step_] == model.margin_history_.max()
    assert model.initial_margin_ == model.margin_history_[0]
    assert model.input_margin_ > model.initial_margin_
    # the measured figures are what input_space_margin says of the model and of the SVM
    res = input_space_margin(model, X, y)
    assert res.margin == pytest.approx(model.input_margin_, rel=1e-12)
    np.testing.assert_allclose(model.projections_, res.projections, rtol=1e-12)
    # the SVC's discriminant sums over its support vectors, step 0's over every sample (zero
    # coefficients included): one function, rounded differently through the projection's steps
    assert input_space_margin(model.svm_, X, y).margin == pytest.approx(model.initial_margin_, rel=1e-9)
    # decision_function is eq. (2) with the fitted a_i, b_i, x_hat_i, f0
    Z = np.random.default_rng(5).random((40, 2))
    k = model.kernel_
    expected = (kernel_value(k, Z, model.x_hat_) @ model.a_
                + np.einsum("jis,js->i", kernel_gradient(k, model.x_hat_, Z), model.b_) + model.f0_)
    np.testing.assert_allclose(model.decision_function(Z), expected, rtol=1e-12)
    assert set(model.predict(Z)) <= set(model.classes_)
    assert model.score(X, y) == 1.0  # the kept hard-margin solution separates the training set
    if method == "simplified":
        assert not np.any(model.b_)
        np.testing.assert_array_equal(model.x_hat_, X[model.support_])


@pytest.mark.parametrize("seed, n_steps", [(20, 1), (3, 5), (17, 3), (4, 5), (83, 5)])
def test_kept_margin_is_the_largest_measured_and_never_below_the_svm(seed, n_steps):
    """The step kept has the largest measured margin and that margin, measured on its own,
    is at least the ordinary SVM's. On these runs the estimate would keep another step
    (3, 17, 20, 83); on run 20 that step's measured margin is below the SVM's."""
    X, y = simulation_run(seed)
    model = InputMarginSVC(gamma=GAMMA, n_steps=n_steps).fit(X, y)
    svm_margin = input_space_margin(model.svm_, X, y).margin
    model_margin = input_space_margin(model, X, y).margin
    assert model_margin >= svm_margin
    assert model_margin == pytest.approx(model.margin_history_.max(), rel=1e-12)
    by_estimate = int(np.argmax(model.estimated_margin_history_))
    assert model.margin_history_[model.best_step_] >= model.margin_history_[by_estimate]
    if seed == 20:  # the disagreement of issue 20: estimated up, measured down
        assert model.estimated_margin_history_[1] > 4 * model.estimated_margin_history_[0]
        assert model.margin_history_[1] < model.margin_history_[0]
        assert model.best_step_ == 0


def test_estimate_is_the_measure_once_its_projection_converges(mixture):
    """Eq. (3) is exact at a converged projection (section 3.1): with as many iterations of
    eq. (12) from the samples, step 0's estimate is the measured margin."""
    X, y = mixture
    model = InputMarginSVC(gamma=GAMMA, n_steps=0, n_projection_iter=200).fit(X, y)
    assert model.margin_history_.shape == model.estimated_margin_history_.shape == (1,)
    assert model.best_step_ == 0
    assert model.estimated_margin_history_[0] == pytest.approx(model.margin_history_[0], rel=1e-9)


def test_labels_metric_and_soft_margin(mixture):
    X, y = mixture
    labels = np.where(y > 0, "pos", "neg")
    G = np.broadcast_to(np.diag([1.0, 3.0]), (len(X), 2, 2))
    model = InputMarginSVC(gamma=GAMMA, C=10.0, metric=G, n_steps=2, max_iter=20_000).fit(X, labels)
    assert list(model.classes_) == ["neg", "pos"]
    assert model.margin_history_.shape == (3,)
    assert np.isfinite(model.decision_function(X)).all()
    res = input_space_margin(model, X, labels, metric=G)
    assert res.distances.shape == (len(X),)


def test_poly_kernel_runs(mixture):
    X, y = mixture
    model = InputMarginSVC("poly", gamma=1.0, degree=3, coef0=1.0, C=10.0, n_steps=2, max_iter=20_000).fit(X, y)
    assert model.input_margin_ >= model.initial_margin_


def test_sklearn_conventions():
    model = InputMarginSVC(C=2.0, metric="not validated here", method="bogus")
    assert model.get_params()["method"] == "bogus"  # __init__ stores, fit validates
    assert clone(model).get_params()["C"] == 2.0
    # __init__ sets exactly its parameters, under their own names, with its defaults
    check_no_attributes_set_in_init("InputMarginSVC", InputMarginSVC())
    check_parameters_default_constructible("InputMarginSVC", InputMarginSVC())


# -- bad input -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "metric, match",
    [
        (np.array([[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
        (np.array([[1.0, 2.0], [2.0, 1.0]]), "positive definite"),
        (np.eye(3), "shape"),
        (np.ones((4, 2, 2)), "shape"),
    ],
)
def test_bad_metric(mixture, metric, match):
    X, y = mixture
    with pytest.raises(MuflowInputError, match=match):
        InputMarginSVC(gamma=GAMMA, metric=metric).fit(X, y)


@pytest.mark.parametrize("kernel", ["sigmoid", "laplacian"])
def test_kernel_without_derivatives(mixture, kernel):
    X, y = mixture
    with pytest.raises(MuflowInputError, match="rbf, poly, linear"):
        InputMarginSVC(kernel).fit(X, y)
    svm = SVC(kernel, C=1.0).fit(X, y)
    with pytest.raises(MuflowInputError, match="rbf, poly, linear"):
        input_space_margin(svm, X, y)


def test_memory_limit_refuses_unless_forced(mixture):
    X, y = mixture
    with pytest.raises(MuflowInputError, match=r"O\(m\^2 n\^2\)"):
        InputMarginSVC(gamma=GAMMA, max_bytes=1000, n_steps=1).fit(X, y)
    InputMarginSVC(gamma=GAMMA, max_bytes=1000, force=True, n_steps=1).fit(X, y)
    InputMarginSVC(gamma=GAMMA, max_bytes=1000, method="simplified", n_steps=1).fit(X, y)


@pytest.mark.parametrize("params, match", [
    ({"C": 0.0}, "C must be a positive number"),
    ({"C": "1"}, "C must be a positive number"),
    ({"n_steps": -1}, "n_steps must be an integer >= 0"),
    ({"n_steps": 1.5}, "n_steps must be an integer"),
    ({"n_projection_iter": 0}, "n_projection_iter must be an integer >= 1"),
    ({"qp_tol": 0.0}, "qp_tol must be a positive number"),
    ({"max_iter": 0}, "max_iter must be an integer >= 1"),
    ({"force": "yes"}, "force must be True or False"),
    ({"qp_solver": "nope"}, "qp_solver must be one of"),
])
def test_bad_parameters_are_named_in_fit(mixture, params, match):
    X, y = mixture
    with pytest.raises(MuflowInputError, match=match):
        InputMarginSVC(gamma=GAMMA, **params).fit(X, y)


def test_other_bad_input(mixture):
    X, y = mixture
    y3 = y.copy()
    y3[:3] = 7
    with pytest.raises(MuflowInputError, match="binary"):
        InputMarginSVC(gamma=GAMMA).fit(X, y3)
    with pytest.raises(MuflowInputError, match="method"):
        InputMarginSVC(method="bogus").fit(X, y)
    with pytest.raises(MuflowInputError, match="binary"):
        input_space_margin(SVC(gamma=GAMMA).fit(X, y3), X, y3)
    svm = SVC(gamma=GAMMA).fit(X, y)
    with pytest.raises(MuflowInputError, match="shape"):
        input_space_margin(svm, X[:, :1], y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_step_whose_measure_diverged_is_never_kept():
    """Soft margin on overlapping classes: every step had samples whose projection found no
    boundary, and eq. (3) at their last points (down to -1e149) made the margins; the step
    kept scored 0.60 where the SVM it started from scores 0.975. With no step measured
    throughout, the SVM is kept."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=120, n_features=2, n_redundant=0, n_informative=2,
                               random_state=3, class_sep=2.0)
    model = InputMarginSVC("rbf", gamma=0.5, C=1.0).fit(X[:80], y[:80])
    assert model.best_step_ == 0
    assert model.score(X[:80], y[:80]) == model.svm_.score(X[:80], y[:80]) == 0.975


def test_step_zero_with_diverged_far_samples_is_kept_over_worse_steps():
    """Hard margin on separable data: the projections of the SVM's far samples (correctly
    classified, where grad f of the RBF vanishes) diverged, so step 0 was dropped and a step
    with a negative measured margin (-1.50, training accuracy 0.60) was kept against the
    SVM's 0.633. Step 0, the SVM, is always a fallback: a later step must be measured
    throughout and beat its margin over the samples it measured. Not improving is warned."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(60, 2))
    y = X[:, 0] > 0
    X[y, 0] += 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = InputMarginSVC("rbf", gamma=0.5, n_steps=3).fit(X, y)
    assert model.score(X, y) == model.svm_.score(X, y) == 1.0
    assert model.input_margin_ >= model.initial_margin_ > 0
    assert model.best_step_ == 0
    assert any(issubclass(w.category, ConvergenceWarning) and "did not improve" in str(w.message)
               for w in caught)


def test_best_step_compares_with_what_step_zero_measured():
    """StepTrace.best on made-up measures: step 0's diverged samples do not set the figure
    to beat when correctly classified, and cap it at 0 when misclassified; a later step with
    a diverged projection, or a margin not above that figure, is never kept."""
    from muflow.input_margin import InputMargin, StepTrace

    def measure(distances, diverged=()):
        d = np.asarray(distances, dtype=float)
        div = np.isin(np.arange(len(d)), diverged)
        return InputMargin(np.zeros((len(d), 2)), d, float(d.min()), ~div, 1, div)

    def best(*measures):
        return StepTrace([0.0] * len(measures), list(measures), [None] * len(measures), [None] * len(measures)).best

    far = measure([0.6, 0.9, 1e149], diverged=[2])  # correctly classified, flat f: reference 0.6
    assert best(far, measure([0.5, 0.7, 0.8]), measure([-1.5, 0.2, 0.3])) == 0
    assert best(far, measure([0.5, 0.7, 0.8]), measure([0.65, 0.7, 0.8])) == 2
    assert best(far, measure([9.0, 9.0, -1e8], diverged=[2])) == 0
    lost = measure([0.6, 0.9, -3.0], diverged=[2])  # misclassified, unmeasured: reference 0
    assert best(lost, measure([-0.1, 0.7, 0.8])) == 0
    assert best(lost, measure([0.1, 0.7, 0.8])) == 1
    assert best(measure([1e149, 1e149], diverged=[0, 1]), measure([5.0, 5.0])) == 0
