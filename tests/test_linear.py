"""muflow.LinearSVC against liblinear and against the SciPy primal for the variants."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize

from muflow.exceptions import MuflowInputError
from muflow.linear import LinearSVC
from tests._references import a8a


@pytest.fixture
def a8a_sparse():
    X, y = a8a(3000)
    X = sp.csr_matrix(X)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X[:2000], X[2000:], y[:2000], y[2000:]


def primal(model_coef, b, X, y, C_i, offset, regularized_b):
    hinge = np.maximum(0.0, 1.0 - y * (X @ model_coef + b + offset))
    return 0.5 * model_coef @ model_coef + (0.5 * b * b if regularized_b else 0.0) + C_i @ hinge


def primal_reference(X, y, upper, offset, positive):
    """min 1/2||beta||^2 + sum C_i xi_i s.t. y_i (x_i'beta + d_i) >= 1 - xi_i (beta >= 0)."""
    n, d = X.shape
    A = np.hstack([y[:, None] * X, np.eye(n)])
    rhs = 1.0 - y * offset

    def f(z):
        return 0.5 * z[:d] @ z[:d] + upper @ z[d:], np.concatenate([z[:d], upper])

    res = minimize(f, np.zeros(d + n), jac=True, method="SLSQP",
                   bounds=[(0.0 if positive else None, None)] * d + [(0.0, None)] * n,
                   constraints=[{"type": "ineq", "fun": lambda z: A @ z - rhs, "jac": lambda z: A}],
                   options={"ftol": 1e-13, "maxiter": 3000})
    # status 8 (no descent direction left) is SLSQP at the limit of its precision
    assert res.success or res.status == 8, res.message
    assert np.min(A @ res.x - rhs) > -1e-7
    return res.x[:d], res.fun


@pytest.mark.parametrize("intercept, fit_intercept", [("none", False), ("regularized", True)])
def test_matches_liblinear_on_a8a(a8a_sparse, intercept, fit_intercept):
    from sklearn.svm import LinearSVC as LiblinearSVC

    Xtr, Xte, ytr, yte = a8a_sparse
    ours = LinearSVC(C=0.5, intercept=intercept, tol=1e-4, max_iter=20_000, random_state=0).fit(Xtr, ytr)
    ref = LiblinearSVC(C=0.5, loss="hinge", dual=True, fit_intercept=fit_intercept,
                       intercept_scaling=1.0, tol=1e-8, max_iter=200_000).fit(Xtr, ytr)
    yy = np.where(ytr > 0, 1.0, -1.0)
    C_i = np.full(len(yy), 0.5)
    p_ours = primal(ours.coef_[0], ours.intercept_[0], Xtr, yy, C_i, 0.0, fit_intercept)
    p_ref = primal(ref.coef_[0], float(np.ravel(ref.intercept_)[0]), Xtr, yy, C_i, 0.0, fit_intercept)
    assert abs(p_ours - p_ref) <= 1e-3 * p_ref
    assert abs(-ours.objective_[0] - p_ref) <= 1e-3 * p_ref
    np.testing.assert_allclose(ours.primal_objective(Xtr, ytr), p_ours)
    assert np.mean(ours.predict(Xte) == ref.predict(Xte)) >= 0.99
    assert ours.kkt_violation_[0] <= 1e-4


# the default 1000 epochs stop above tol=1e-5 here (warned): the point is that both row
# formats take the same steps
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_dense_and_sparse_agree(a8a_sparse):
    Xtr, _, ytr, _ = a8a_sparse
    Xtr, ytr = Xtr[:500], ytr[:500]
    a = LinearSVC(intercept="regularized", tol=1e-5, random_state=3).fit(Xtr, ytr)
    b = LinearSVC(intercept="regularized", tol=1e-5, random_state=3).fit(Xtr.toarray(), ytr)
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-10)
    np.testing.assert_allclose(a.intercept_, b.intercept_, atol=1e-10)


@pytest.mark.parametrize("positive, weighted, drifted", [
    (False, True, False), (False, False, True), (False, True, True), (True, False, True), (True, True, False),
])
def test_variants_match_scipy_primal(breast_cancer_split, positive, weighted, drifted):
    Xtr, Xte, ytr, _ = breast_cancer_split
    # signed features, three of them reversed, so that beta >= 0 is an active constraint
    flip = np.array([-1.0, -1, -1, 1, 1, 1, 1, 1, 1])
    X = (Xtr[:150] - 0.4) * flip
    y = ytr[:150].astype(float)
    rng = np.random.default_rng(17)
    w = rng.uniform(0.2, 3.0, len(y)) if weighted else np.ones(len(y))
    d = rng.normal(scale=0.5, size=len(y)) if drifted else np.zeros(len(y))
    model = LinearSVC(C=0.7, positive=positive, tol=1e-5, max_iter=50_000, random_state=0)
    model.fit(X, y, sample_weight=w, offset=d)
    beta_ref, p_ref = primal_reference(X, y, 0.7 * w, d, positive)
    p_ours = primal(model.coef_[0], 0.0, X, y, 0.7 * w, d, False)
    assert abs(p_ours - p_ref) <= 1e-3 * p_ref
    assert abs(-model.objective_[0] - p_ref) <= 1e-3 * p_ref
    if positive:
        assert np.all(model.coef_ >= 0) and np.any(beta_ref < 1e-8)
    Xt = (Xte - 0.4) * flip
    assert np.mean(np.sign(Xt @ model.coef_[0]) == np.sign(Xt @ beta_ref)) >= 0.99


def test_multiclass_one_vs_rest():
    from sklearn.svm import LinearSVC as LiblinearSVC

    rng = np.random.default_rng(0)
    centers = np.array([[2.0, 0, 0], [0, 2.0, 0], [0, 0, 2.0]])
    labels = rng.integers(0, 3, 300)
    X = centers[labels] + rng.normal(size=(300, 3))
    y = np.array(["a", "b", "c"])[labels]
    ours = LinearSVC(C=1.0, intercept="regularized", tol=1e-5, random_state=0).fit(X, y)
    ref = LiblinearSVC(C=1.0, loss="hinge", dual=True, tol=1e-8, max_iter=100_000).fit(X, y)
    assert ours.coef_.shape == (3, 3) and ours.intercept_.shape == (3,)
    assert ours.decision_function(X).shape == (300, 3)
    assert np.mean(ours.predict(X) == ref.predict(X)) >= 0.99
    assert ours.score(X, y) > 0.8


def test_bad_input():
    X = np.random.default_rng(0).normal(size=(10, 2))
    y = np.array([1, -1] * 5)
    with pytest.raises(MuflowInputError, match="offset"):
        LinearSVC().fit(X, y, offset=np.zeros(9))
    with pytest.raises(MuflowInputError, match="sample_weight"):
        LinearSVC().fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(MuflowInputError, match="smo"):
        LinearSVC(intercept="exact").fit(X, y)
    with pytest.raises(MuflowInputError, match="C must"):
        LinearSVC(C=-1).fit(X, y)
    with pytest.raises(MuflowInputError, match="single class"):
        LinearSVC().fit(X, np.ones(10))
    with pytest.raises(MuflowInputError, match="NaN"):
        LinearSVC().fit(np.where(X > 1, np.nan, X), y)
    model = LinearSVC().fit(X, y)
    with pytest.raises(MuflowInputError, match="features"):
        model.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError):  # MuflowInputError is a ValueError (sklearn convention)
        LinearSVC(max_iter=0).fit(X, y)


def test_sklearn_conventions():
    from sklearn.base import clone

    model = LinearSVC(C=2.0, positive=True)
    assert clone(model).get_params()["C"] == 2.0
    assert not hasattr(model, "coef_")


def test_warm_start_reaches_the_cold_solution_in_fewer_epochs(a8a_sparse):
    Xtr, _, ytr, _ = a8a_sparse
    kw = dict(intercept="regularized", tol=1e-3, max_iter=20_000, random_state=0)
    cold = LinearSVC(C=1.0, **kw).fit(Xtr, ytr)
    previous = LinearSVC(C=0.8, **kw).fit(Xtr, ytr)
    # along C, alpha scaled with C (the sweeps' continuation); and from the solution itself
    for init, most in ((previous.dual_coef_ / 0.8, 0.9 * cold.n_iter_), (cold, 10),
                       ((cold.dual_coef_[0], cold.intercept_[0]), 10)):
        warm = LinearSVC(C=1.0, **kw).fit(Xtr, ytr, init=init)
        assert abs(warm.objective_[0] - cold.objective_[0]) <= 1e-5 * abs(cold.objective_[0])
        assert warm.kkt_violation_[0] <= 1e-3
        assert warm.n_iter_ <= most
    with pytest.raises(MuflowInputError, match="init"):
        LinearSVC().fit(Xtr, ytr, init=np.zeros(5))
    with pytest.raises(MuflowInputError, match="init"):
        LinearSVC().fit(Xtr, ytr, init=np.full(Xtr.shape[0], np.nan))


@pytest.mark.parametrize("positive", [False, True])
def test_row_formats_agree_with_the_bias_feature(positive):
    """Dense rows, CSR with int32 and with int64 indices: the same steps, the same result
    (the bias feature is implicit in the loop; with positive=True the intercept stays free)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 8)) * (rng.random((300, 8)) < 0.4)
    y = np.sign(X @ rng.normal(size=8) + 0.3 + 0.3 * rng.normal(size=300))
    S = sp.csr_matrix(X)
    S64 = S.copy()
    S64.indices = S64.indices.astype(np.int64)
    S64.indptr = S64.indptr.astype(np.int64)
    fits = [LinearSVC(intercept="regularized", positive=positive, tol=1e-6, random_state=1).fit(A, y)
            for A in (X, S, S64)]
    for other in fits[1:]:
        np.testing.assert_allclose(other.coef_, fits[0].coef_, atol=1e-10)
        np.testing.assert_allclose(other.intercept_, fits[0].intercept_, atol=1e-10)
    if positive:
        assert np.all(fits[0].coef_ >= 0)
    p = fits[0].primal_objective(X, y)
    np.testing.assert_allclose(-fits[0].objective_, p, rtol=1e-4)


def test_linear_cd_curve_is_the_decreasing_dual_objective():
    from muflow.solvers._linear_compiled import linear_cd

    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 5))
    y = np.sign(X[:, 0] + 0.5 * rng.normal(size=200))
    n = len(y)
    alpha = np.zeros(n)
    v = np.empty(6)
    curve = np.full(51, np.nan)
    F, info = linear_cd(X, y, -np.ones(n), np.ones(n), alpha, v, np.zeros(6, dtype=bool),
                        tol=1e-12, max_epochs=50, seed=0, curve=curve, bias=1.0)
    epochs = int(info[0])
    assert epochs == 50
    assert np.all(np.diff(curve[1:epochs + 1]) <= 1e-9)
    assert curve[epochs] == pytest.approx(F, rel=1e-10)
    w = (alpha * y) @ np.hstack([X, np.ones((n, 1))])
    np.testing.assert_allclose(v, w, atol=1e-10)
    assert F == pytest.approx(0.5 * w @ w - alpha.sum(), rel=1e-12)


def test_stopping_at_max_iter_warns_and_measures_the_violation():
    """C=1e4 on 400 x 8 data: 1000 epochs leave the dual objective far from its minimum.
    The fit ended silently with kkt_violation_ inf (the measure was taken only once the
    shrunk set's gap passed tol); liblinear warns in the same case. Now the violation is
    the common KKT measure over every sample at the returned alpha, the fit warns, and
    converged_ / fit_status_ say it, as muflow.SVC's do."""
    from sklearn.exceptions import ConvergenceWarning

    from muflow.solvers.kkt import kkt_violation_reference

    rng = np.random.default_rng(10)
    X = rng.normal(size=(400, 8))
    y = (X[:, 0] + 0.5 * X[:, 1] + 0.5 * rng.normal(size=400) > 0).astype(int)
    with pytest.warns(ConvergenceWarning, match=r"max_iter=1000.*KKT violation.*max_iter.*C"):
        model = LinearSVC(C=1e4, tol=1e-8, random_state=0).fit(X, y)
    yy = np.where(y == 1, 1.0, -1.0)
    alpha = model.dual_coef_[0]
    grad = yy * (X @ model.coef_[0]) - 1.0
    expected, _ = kkt_violation_reference(alpha, grad, yy, np.full(400, 1e4), equality=False)
    assert np.isfinite(model.kkt_violation_).all()
    np.testing.assert_allclose(model.kkt_violation_, expected, rtol=1e-8)
    assert model.kkt_violation_[0] > 1e-8
    assert model.converged_.tolist() == [False] and model.fit_status_ == 1
    assert model.n_iter_ == 1000
    # a fit that meets tol: measured, no warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        easy = LinearSVC(C=1.0, tol=1e-4, random_state=0).fit(X, y)
    assert easy.kkt_violation_[0] <= 1e-4
    assert easy.converged_.tolist() == [True] and easy.fit_status_ == 0


def test_dataframe_column_names_are_kept_and_checked():
    """As scikit-learn's estimators: a model fitted on named columns refuses the same
    columns in another order (which would predict with the wrong coefficients)."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(3)
    X = pd.DataFrame(rng.normal(size=(60, 3)), columns=["age", "height", "weight"])
    y = np.where(X["age"] + 0.3 * X["weight"] > 0, 1, -1)
    model = LinearSVC().fit(X, y)
    assert list(model.feature_names_in_) == ["age", "height", "weight"]
    np.testing.assert_array_equal(model.predict(X), model.predict(X.to_numpy()[:, :]))
    with pytest.raises(ValueError, match="feature names"):
        model.predict(X[["weight", "height", "age"]])
    assert not hasattr(LinearSVC().fit(X.to_numpy(), y), "feature_names_in_")


@pytest.fixture
def small_binary():
    """Two classes, 40 samples of 3 signed features (seeded)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1, -1)
    return X, y


def test_random_state_takes_a_randomstate_and_refuses_text(small_binary):
    """The docstring allows a RandomState instance: it seeds the coordinate order as an
    integer does (it was cast to an integer and raised TypeError); text is a ValueError."""
    X, y = small_binary
    first = LinearSVC(random_state=np.random.RandomState(0)).fit(X, y)
    again = LinearSVC(random_state=np.random.RandomState(0)).fit(X, y)
    np.testing.assert_array_equal(first.coef_, again.coef_)
    assert first.converged_.all()
    with pytest.raises(ValueError, match="seed"):
        LinearSVC(random_state="zero").fit(X, y)


def test_sample_weights_must_leave_two_classes(small_binary):
    """As muflow.SVC (and libsvm): weights of zero everywhere, or positive on one class
    only, leave no classifier to fit; they fitted a model predicting one class."""
    X, y = small_binary
    with pytest.raises(MuflowInputError, match="zero or negative weights"):
        LinearSVC().fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(MuflowInputError, match="same class"):
        LinearSVC().fit(X, y, sample_weight=(y == 1) * 1.0)
    with pytest.raises(MuflowInputError, match="zero or negative weights"):
        LinearSVC().fit(X, y, sample_weight=0.0)


def test_x_without_features_or_samples_is_refused(small_binary):
    X, y = small_binary
    with pytest.raises(ValueError, match="0 feature"):
        LinearSVC().fit(np.empty((len(y), 0)), y)
    with pytest.raises(ValueError, match="0 sample"):
        LinearSVC().fit(np.empty((0, 3)), y[:0])
    model = LinearSVC().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.empty((3, 0)))


def test_shrinking_must_be_a_bool(small_binary):
    X, y = small_binary
    with pytest.raises(MuflowInputError, match="shrinking must be True or False"):
        LinearSVC(shrinking="no").fit(X, y)


def test_sparse_tag_says_what_fit_accepts(small_binary):
    X, y = small_binary
    assert LinearSVC().__sklearn_tags__().input_tags.sparse
    dense = LinearSVC(random_state=0).fit(X, y)
    sparse = LinearSVC(random_state=0).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, atol=1e-10)


def test_column_y_is_ravelled_with_a_warning(small_binary):
    """scikit-learn's DataConversionWarning and a 1-D y, where (n, 1) was refused."""
    from sklearn.exceptions import DataConversionWarning

    X, y = small_binary
    with pytest.warns(DataConversionWarning):
        column = LinearSVC(random_state=0).fit(X, y[:, None])
    np.testing.assert_array_equal(column.coef_, LinearSVC(random_state=0).fit(X, y).coef_)
    with pytest.raises(ValueError, match="1d array"):
        LinearSVC().fit(X, np.column_stack([y, y]))


def test_input_checks_follow_scikit_learn(small_binary):
    """What validate_data gives: numbers held in an object array are read, text is
    refused as a TypeError; a 1-D X at predict names the reshape; y=None and a single sample are named."""
    X, y = small_binary
    model = LinearSVC(random_state=0).fit(X.astype(object), y)
    np.testing.assert_array_equal(model.coef_, LinearSVC(random_state=0).fit(X, y).coef_)
    with_a_dict = X.astype(object)
    with_a_dict[0, 0] = {"a": 1}
    with pytest.raises(TypeError, match="not 'dict'"):
        LinearSVC().fit(with_a_dict, y)
    with pytest.raises(ValueError, match="Reshape your data"):
        model.predict(X[0])
    with pytest.raises(ValueError, match="requires y to be passed"):
        LinearSVC().fit(X, None)
    with pytest.raises(ValueError, match="1 class"):
        LinearSVC().fit(X[:1], y[:1])
