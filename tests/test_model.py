"""muflow.SVC behaviour: attributes, multi-class, weights, offsets, persistence, bad input."""

import json

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC as LibsvmSVC

import muflow
import muflow.model
import muflow.routing
import muflow.prediction
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel


@pytest.fixture(scope="module")
def blobs():
    rng = np.random.default_rng(5)
    y = np.repeat([0, 1, 2], 30)
    centres = np.array([[0, 0], [3, 0], [0, 3]])
    X = centres[y] + rng.normal(scale=0.8, size=(90, 2))
    return X, y


@pytest.fixture(scope="module")
def binary(blobs):
    X, y = blobs
    keep = y < 2
    return X[keep], np.where(y[keep] == 1, "yes", "no")


def test_binary_attributes_follow_sklearn_conventions(binary):
    X, y = binary
    model = muflow.SVC(kernel="rbf", gamma=0.5, C=1.0, solver="munk").fit(X, y)
    assert list(model.classes_) == ["no", "yes"]
    n_sv = len(model.support_)
    assert model.dual_coef_.shape == (1, n_sv)
    assert model.support_vectors_.shape == (n_sv, 2)
    assert model.intercept_.shape == (1,)
    assert model.objective_curve_.shape[1] == 1
    assert model.kkt_violation_[0] <= model.tol
    # dual_coef_ = y_i alpha_i: positive for the class classes_[1], bounded by C
    y_sv = np.where(y[model.support_] == "yes", 1, -1)
    assert np.all(np.sign(model.dual_coef_[0]) == y_sv)
    assert np.all(np.abs(model.dual_coef_) <= 1.0 + 1e-12)
    # decision sign as libsvm's: positive means classes_[1]
    ref = LibsvmSVC(kernel="rbf", gamma=0.5, C=1.0).fit(X, y)
    assert np.mean(np.sign(model.decision_function(X)) == np.sign(ref.decision_function(X))) >= 0.99
    np.testing.assert_allclose(model.intercept_, ref.intercept_, atol=5e-3)


def test_multiclass_one_vs_one_pairs_share_one_gram(blobs):
    X, y = blobs
    model = muflow.SVC(kernel="rbf", gamma=0.5, solver="munk").fit(X, y)
    assert model.dual_coef_.shape == (2, len(model.support_))  # libsvm's (k - 1, n_SV)
    assert model.intercept_.shape == (3,)  # one per pair
    assert model.decision_function(X).shape == (90, 3)
    assert model.objective_curve_.shape[1] == 3  # three pair columns advanced together
    assert model.score(X, y) > 0.9


def test_multiclass_one_vs_rest_stays_available(blobs):
    X, y = blobs
    model = muflow.SVC(kernel="rbf", gamma=0.5, solver="munk", multiclass="ovr").fit(X, y)
    assert model.dual_coef_.shape == (3, len(model.support_))
    assert model.decision_function(X).shape == (90, 3)
    np.testing.assert_array_equal(model.predict(X),
                                  model.classes_[np.argmax(model.decision_function(X), axis=1)])
    assert model.score(X, y) > 0.9


def test_sample_weight_scales_C_per_sample(binary):
    X, y = binary
    w = np.where(np.arange(len(y)) % 2 == 0, 0.5, 2.0)
    model = muflow.SVC(kernel="rbf", gamma=0.5, C=1.0, solver="munk", tol=1e-5).fit(X, y, sample_weight=w)
    alpha = np.zeros(len(y))
    alpha[model.support_] = np.abs(model.dual_coef_[0])
    assert np.all(alpha <= w + 1e-9)
    ref = LibsvmSVC(kernel="rbf", gamma=0.5, C=1.0, tol=1e-8).fit(X, y, sample_weight=w)
    assert np.mean(model.predict(X) == ref.predict(X)) >= 0.99


@pytest.mark.parametrize("solver", ["smo", "working_set"])
def test_support_vectors_at_a_tiny_per_sample_bound_are_kept(solver):
    """libsvm keeps every alpha > 0 as a support vector. Half the samples weighted 1e-9
    sit at their bound C w_i = 1e-8; the threshold of 1e-8 times the problem's largest
    alpha dropped them (59, 49, 48 support vectors per class became 24, 25, 30) and their
    terms from the decision function."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(200, centers=3, cluster_std=2.5, random_state=0)
    w = np.ones(len(y))
    w[::2] = 1e-9
    ref = LibsvmSVC(C=10, tol=1e-8).fit(X, y, sample_weight=w)
    model = muflow.SVC(C=10, tol=1e-6, solver=solver).fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(model.support_, ref.support_)
    np.testing.assert_array_equal(model.n_support_, ref.n_support_)
    np.testing.assert_allclose(model.dual_coef_, ref.dual_coef_, atol=1e-3)
    np.testing.assert_allclose(model.decision_function(X), ref.decision_function(X), atol=1e-4)


def test_drifted_offset_changes_the_linear_term(binary):
    X, y = binary
    d = np.linspace(-0.5, 0.5, len(y))
    plain = muflow.SVC(kernel="rbf", gamma=0.5, intercept="none", solver="munk").fit(X, y)
    drifted = muflow.SVC(kernel="rbf", gamma=0.5, intercept="none", solver="munk").fit(X, y, offset=d)
    assert not np.allclose(plain.objective_, drifted.objective_)
    with pytest.raises(MuflowInputError, match="offset has length 3"):
        muflow.SVC().fit(X, y, offset=[0, 1, 2])


def test_precomputed_kernel(binary):
    X, y = binary
    K = Kernel("rbf", gamma=0.5).block(X)
    model = muflow.SVC(kernel="precomputed", solver="munk").fit(K, y)
    direct = muflow.SVC(kernel="rbf", gamma=0.5, solver="munk").fit(X, y)
    np.testing.assert_allclose(model.decision_function(K), direct.decision_function(X), atol=1e-8)
    with pytest.raises(MuflowInputError, match="square"):
        muflow.SVC(kernel="precomputed").fit(K[:, :10], y)
    with pytest.raises(MuflowInputError, match="K\\(X_test, X_train\\)"):
        model.predict(K[:, :10])


def test_sparse_input_gives_the_dense_result(binary):
    X, y = binary
    dense = muflow.SVC(kernel="rbf", gamma=0.5, solver="munk").fit(X, y)
    sparse = muflow.SVC(kernel="rbf", gamma=0.5, solver="munk").fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.objective_, sparse.objective_, rtol=1e-10)


def test_save_and_load_round_trip_without_pickle(binary, tmp_path):
    X, y = binary
    model = muflow.SVC(kernel="poly", degree=2, gamma=0.5, coef0=1.0, solver="m3").fit(X, y)
    path = muflow.save(model, tmp_path / "model")
    meta = json.loads((path / "model.json").read_text())
    assert meta["format_version"] == 3 and meta["estimator"] == "SVC"
    assert meta["digest"].startswith("sha256:")
    with np.load(path / "arrays.npz", allow_pickle=False) as data:
        assert "dual_coef_" in data.files
    loaded = muflow.load(path)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_allclose(loaded.decision_function(X), model.decision_function(X))
    # saving again replaces the model atomically; no temporary folders are left behind
    muflow.save(model, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_loaded_model_keeps_its_fitted_scalars(binary, tmp_path):
    """fit_status_ (scikit-learn's), fit_time_, n_threads_, rows_computed_ and timings_ come
    back from a save; a fit stopped at max_iter keeps fit_status_ = 1."""
    X, y = binary
    with pytest.warns(ConvergenceWarning):
        stopped = muflow.SVC(gamma=0.5, max_iter=3).fit(X, y)
    for model in (muflow.SVC(gamma=0.5).fit(X, y), stopped):
        loaded = muflow.load(muflow.save(model, tmp_path / "model"))
        for name in ("fit_status_", "fit_time_", "n_threads_", "rows_computed_", "timings_"):
            assert getattr(loaded, name) == getattr(model, name), name
    assert loaded.fit_status_ == 1


def test_a_loaded_model_checks_feature_names_as_the_fitted_one(binary, tmp_path):
    """A model fitted on a DataFrame keeps feature_names_in_ through save and load: columns
    given in another order are refused as by the fitted model (the loaded one took them in
    that order, said it was "fitted without feature names" and predicted other labels)."""
    pd = pytest.importorskip("pandas")
    X, y = binary
    frame = pd.DataFrame(X, columns=["a", "b"])
    model = muflow.SVC(gamma=0.5).fit(frame, y)
    loaded = muflow.load(muflow.save(model, tmp_path / "model"))
    np.testing.assert_array_equal(loaded.feature_names_in_, model.feature_names_in_)
    np.testing.assert_array_equal(loaded.predict(frame), model.predict(frame))
    for fitted in (model, loaded):
        with pytest.raises(ValueError, match="same order as they were in fit"):
            fitted.predict(frame[["b", "a"]])
        with pytest.warns(UserWarning, match="X does not have valid feature names"):
            fitted.predict(X)
    plain = muflow.load(muflow.save(muflow.SVC(gamma=0.5).fit(X, y), tmp_path / "plain"))
    assert not hasattr(plain, "feature_names_in_")


def _same_model(loaded, model, X, y):
    """The loaded model predicts as the fitted one, has its parameters, and trains the same
    model when cloned and fitted again."""
    from sklearn.base import clone

    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded.get_params() == model.get_params()
    refit, again = clone(loaded).fit(X, y), clone(model).fit(X, y)
    np.testing.assert_array_equal(refit.support_, again.support_)
    np.testing.assert_allclose(refit.dual_coef_, again.dual_coef_, rtol=1e-12)
    np.testing.assert_array_equal(refit.predict(X), again.predict(X))


def test_save_refuses_a_callable_kernel_and_says_what_saves_it(binary, tmp_path):
    """A callable kernel is code, which a saved model does not hold: save refuses it in one
    line naming pickle/joblib and the precomputed kernel (it saved a model that no load
    could read: "support_vectors_ has shape (0, 0)"). The precomputed kernel round trips."""
    X, y = binary
    model = muflow.SVC(kernel=lambda A, B: A @ B.T).fit(X, y)
    with pytest.raises(MuflowInputError, match=r"^kernel is a callable .*pickle or joblib.*"
                       r"kernel='precomputed'[^\n]*$"):
        muflow.save(model, tmp_path / "model")
    assert not (tmp_path / "model").exists()
    K = X @ X.T
    precomputed = muflow.SVC(kernel="precomputed").fit(K, y)
    loaded = muflow.load(muflow.save(precomputed, tmp_path / "precomputed"))
    _same_model(loaded, precomputed, K, y)
    np.testing.assert_array_equal(loaded.predict(K), model.predict(X))


@pytest.mark.parametrize("params", [
    {"class_weight": {"yes": 3}},
    {"class_weight": {"no": 0.5, "yes": np.float64(2)}},
    {"class_weight": "balanced"},
    {"C": np.float32(2), "gamma": np.float32(0.3), "tol": np.float64(1e-4)},
    {"kernel": "poly", "degree": np.int64(2), "coef0": np.float32(1), "max_iter": np.int32(-1)},
    {"shrinking": np.bool_(False), "kernel": np.str_("linear")},
], ids=["dict", "dict-numpy", "balanced", "numpy-floats", "numpy-ints", "numpy-bool-str"])
def test_a_loaded_model_keeps_every_parameter(binary, tmp_path, params):
    """Parameters that are not plain Python scalars (numpy scalars from a GridSearchCV over
    numpy grids, a class_weight dict) come back with their values: they came back as the
    defaults, so get_params differed and a clone of the loaded model trained another model."""
    X, y = binary
    model = muflow.SVC(**params).fit(X, y)
    _same_model(muflow.load(muflow.save(model, tmp_path / "model")), model, X, y)


@pytest.mark.parametrize("labels", [[0, 3], [1.0, -2.0], [True, False]], ids=["int", "float", "bool"])
def test_class_weight_keys_keep_their_type(binary, tmp_path, labels):
    X, y = binary
    target = np.asarray(labels)[(y == "yes").astype(int)]
    model = muflow.SVC(gamma=0.5, class_weight={labels[1]: 4, labels[0]: 0.5}).fit(X, target)
    loaded = muflow.load(muflow.save(model, tmp_path / "model"))
    assert [type(k) for k in loaded.class_weight] == [type(k) for k in model.class_weight]
    _same_model(loaded, model, X, target)


@pytest.mark.parametrize("params, name", [
    ({"random_state": np.random.RandomState(0)}, "random_state"),
    ({"class_weight": {"yes": object()}}, "class_weight"),
])
def test_save_refuses_a_parameter_it_cannot_hold_naming_it(binary, tmp_path, params, name):
    X, y = binary
    model = muflow.SVC(gamma=0.5).fit(X, y).set_params(**params)
    with pytest.raises(MuflowInputError, match=rf"^{name} = .* cannot be saved[^\n]*$"):
        muflow.save(model, tmp_path / "model")
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("labels", [
    np.array([2**63 + 5, 1], dtype=np.uint64), np.array([-3, 7], dtype=np.int8),
    np.array([3.0, -2.0], dtype=np.float32), np.array(["no", "yes"], dtype=object),
    np.array(["no", "yes!"]), np.array([False, True]),
], ids=["uint64", "int8", "float32", "object", "str", "bool"])
def test_a_loaded_model_predicts_labels_of_the_fitted_dtype(binary, tmp_path, labels):
    """Labels come back with their dtype and exact values: uint64 labels above 2**63 failed
    to load (OverflowError), int8 came back int64, object strings as '<U' strings."""
    X, y = binary
    target = labels[(y == "yes").astype(int)]
    model = muflow.SVC(gamma=0.5).fit(X, target)
    loaded = muflow.load(muflow.save(model, tmp_path / "model"))
    assert loaded.classes_.dtype == model.classes_.dtype
    expected, got = model.predict(X), loaded.predict(X)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert [type(v) for v in got[:4]] == [type(v) for v in expected[:4]]


def test_load_refuses_what_is_not_a_model(tmp_path):
    with pytest.raises(MuflowInputError, match="not a muflow model"):
        muflow.load(tmp_path)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), y), "NaN or infinite"),
        (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.inf, X), y), "NaN or infinite"),
        (lambda X, y: (X, np.full(len(y), "no")), "only one class"),
        (lambda X, y: (X[:-1], y), "inconsistent numbers of samples"),
    ],
    ids=["nan", "inf", "one-class", "length-mismatch"],
)
def test_bad_training_data_is_refused_clearly(binary, make, match):
    X, y = make(*binary)
    with pytest.raises(ValueError, match=match):
        muflow.SVC().fit(X, y)


def test_nan_at_predict_says_before_predicting(binary):
    X, y = binary
    model = muflow.SVC().fit(X, y)
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="X contains 1 NaN or infinite value.*before predicting$"):
        model.predict(bad)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"C": 0.0}, "C must be a positive number"),
        ({"C": -1.0}, "C must be a positive number"),
        ({"kernel": "cubic"}, "kernel must be one of .*'rbf'.*got 'cubic'"),
        ({"solver": "newton"}, "solver must be one of .*'m3'.*got 'newton'"),
        ({"intercept": "maybe"}, "intercept must be one of"),
        ({"tol": 0}, "tol must be a positive number"),
        ({"max_iter": -2}, "max_iter must be an integer >= 0"),
        ({"gram_dtype": "float16"}, "gram_dtype must be one of"),
    ],
)
def test_bad_parameters_are_refused_clearly(binary, params, match):
    X, y = binary
    with pytest.raises(MuflowInputError, match=match):
        muflow.SVC(**params).fit(X, y)


def test_negative_sample_weights_drop_samples_as_scikit_learn(binary):
    """libsvm (and so scikit-learn) drops samples of weight <= 0: the fit equals the fit
    without them, and weights that leave nothing or one class are refused with its words."""
    X, y = binary
    w = np.ones(len(y))
    w[::7] = -0.5
    w[1::9] = 0.0
    kept = w > 0
    model = muflow.SVC(kernel="rbf", gamma=0.5).fit(X, y, sample_weight=w)
    alone = muflow.SVC(kernel="rbf", gamma=0.5).fit(X[kept], y[kept])
    np.testing.assert_array_equal(model.support_, np.flatnonzero(kept)[alone.support_])
    np.testing.assert_allclose(model.decision_function(X), alone.decision_function(X), atol=1e-6)
    with pytest.raises(MuflowInputError, match="all samples have zero or negative weights"):
        muflow.SVC().fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(MuflowInputError, match="positive weights belong to the same class"):
        muflow.SVC().fit(X, y, sample_weight=np.where(y == "yes", 1.0, -1.0))


def test_predict_on_a_different_number_of_features_is_refused(binary):
    X, y = binary
    model = muflow.SVC(solver="munk").fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.ones((3, 5)))


def test_unbounded_hard_margin_is_reported_not_returned():
    X = np.array([[0.0], [0.0], [1.0], [1.0]])
    y = np.array([1, -1, 1, -1])  # identical points with opposite labels: not separable
    with pytest.raises(muflow.MuflowError, match="finite C"):
        muflow.SVC(kernel="linear", C=float("inf"), intercept="none", solver="m3").fit(X, y)


def test_linear_svc_round_trips_through_save_and_load(binary, tmp_path):
    X, y = binary
    model = muflow.LinearSVC().fit(X, y)
    loaded = muflow.load(muflow.save(model, tmp_path / "linear"))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_allclose(loaded.coef_, model.coef_)


def test_from_solution_builds_the_model_fit_builds(blobs):
    """The public constructor from a solution sets exactly what fit sets (one code path)."""
    from muflow.model import SVC
    from muflow.multiclass import binary_problems
    from muflow.operators import DenseGram
    from muflow.solvers import DualProblem
    from muflow.solvers.registry import SOLVERS

    X, y = blobs
    fitted = SVC(kernel="rbf", gamma=0.5, C=2.0, solver="smo").fit(X, y)
    classes, y_encoded = np.unique(y, return_inverse=True)
    Y, member = binary_problems(y_encoded, len(classes))
    problem = DualProblem(DenseGram(fitted.kernel_.block(X)), Y, upper=2.0 * member, equality=True)
    solution = SOLVERS["smo"].solve(problem, tol=fitted.tol, max_iter=muflow.model.NO_LIMIT)
    built = SVC.from_solution(solution, X=X, y_encoded=y_encoded, classes=classes,
                              kernel=fitted.kernel_, C=2.0, solver="smo")
    assert built.get_params() == fitted.get_params()
    assert built.solver_ == "smo"
    for name in ("support_", "dual_coef_", "intercept_", "n_iter_", "support_vectors_"):
        np.testing.assert_allclose(getattr(built, name), getattr(fitted, name), err_msg=name)
    np.testing.assert_array_equal(built.predict(X), fitted.predict(X))


@pytest.mark.parametrize("kernel", ["rbf", "precomputed"])
def test_decision_function_in_row_blocks_equals_one_block(blobs, kernel, monkeypatch):
    X, y = blobs
    A = Kernel("rbf", gamma=0.5).block(X) if kernel == "precomputed" else X
    model = muflow.SVC(kernel=kernel, gamma=0.5).fit(A, y)
    whole = model.decision_function(A)
    # blocks of 7 rows: K(X, SV) is never held for all samples at once
    monkeypatch.setattr(muflow.prediction, "PREDICT_BLOCK_BYTES", 8 * len(model.support_) * 7)
    np.testing.assert_allclose(model.decision_function(A), whole, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(model.predict(A), model.classes_[np.argmax(whole, axis=1)])


def test_rows_on_demand_fit_equals_the_stored_gram_fit(blobs):
    X, y = blobs
    stored = muflow.SVC(gamma=0.5, solver="smo", gram="stored", tol=1e-6).fit(X, y)
    rows = muflow.SVC(gamma=0.5, solver="smo", gram="rows", gram_dtype="float64", cache_size=0.01,
                      tol=1e-6).fit(X, y)
    np.testing.assert_allclose(rows.objective_, stored.objective_, rtol=1e-9)
    np.testing.assert_array_equal(rows.predict(X), stored.predict(X))


def test_a_stored_gram_that_cannot_fit_is_refused_before_any_allocation():
    import tracemalloc

    rng = np.random.default_rng(0)
    X = rng.standard_normal((100_000, 2))
    y = (X[:, 0] > 0).astype(int)
    tracemalloc.start()
    try:
        with pytest.raises(MuflowInputError, match=r"37\.3 GiB[\s\S]*gram=.rows."):
            muflow.SVC(gram="stored", gram_dtype="float32").fit(X, y)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20  # X and its validated copies, never the 37 GiB of K


@pytest.mark.parametrize("params, match", [({"gram": "dense"}, "gram"),
                                           ({"cache_size": 0}, "cache_size")])
def test_bad_storage_parameters_are_refused(binary, params, match):
    with pytest.raises(MuflowInputError, match=match):
        muflow.SVC(**params).fit(*binary)


def test_auto_computes_rows_with_the_working_set_solver_above_the_threshold(blobs, monkeypatch):
    X, y = blobs
    monkeypatch.setattr(muflow.routing, "ROWS_MIN_SAMPLES", len(y) - 1)
    assert muflow.SVC(gamma=0.5).fit(X, y).solver_ == "working_set"
    assert muflow.SVC(gamma=0.5, gram="stored").fit(X, y).solver_ == "smo"
    monkeypatch.setattr(muflow.routing, "ROWS_MIN_SAMPLES", len(y))
    assert muflow.SVC(gamma=0.5).fit(X, y).solver_ == "smo"


def test_gram_mode_weighs_the_solver():
    """Above the threshold "auto" is rows for the row readers and stays "auto" (K stored
    while it fits in memory) for the solvers that read only products, a pass over K each."""
    from muflow.routing import ROWS_MIN_SAMPLES, gram_mode
    from muflow.solvers.registry import SOLVERS

    above = ROWS_MIN_SAMPLES + 1
    for name, info in SOLVERS.items():
        assert gram_mode("auto", above, name) == ("auto" if info.needs == "products" else "rows")
        assert gram_mode("auto", ROWS_MIN_SAMPLES, name) == "auto"
        assert gram_mode("stored", above, name) == "stored"
        assert gram_mode("rows", 10, name) == "rows"
    assert gram_mode("auto", above, "auto") == "rows"
    assert {gram_mode("auto", above, s) for s in ("m3", "munk")} == {"auto"}


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_product_solver_stores_K_above_the_threshold_unless_it_does_not_fit(blobs, monkeypatch):
    from muflow import backends, memory
    from muflow.kernel_rows import KernelRows
    from muflow.operators import DenseGram

    X, y = blobs
    made = []
    original = backends.gram_operator

    def spy(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(backends, "gram_operator", spy)
    monkeypatch.setattr(muflow.routing, "ROWS_MIN_SAMPLES", len(y) - 1)
    stored = muflow.SVC(gamma=0.5, solver="m3", max_iter=50).fit(X, y)
    assert isinstance(made[-1], DenseGram)
    muflow.SVC(gamma=0.5, solver="working_set").fit(X, y)
    assert isinstance(made[-1], KernelRows)
    # K over half the memory available: rows on demand, the same iterates
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 16 * len(y) ** 2 - 1)
    rows = muflow.SVC(gamma=0.5, solver="m3", max_iter=50, gram_dtype="float64").fit(X, y)
    assert isinstance(made[-1], KernelRows)
    stored64 = muflow.SVC(gamma=0.5, solver="m3", max_iter=50, gram_dtype="float64",
                          gram="stored").fit(X, y)
    np.testing.assert_allclose(rows.objective_, stored64.objective_, rtol=1e-9)
    assert stored.solver_ == rows.solver_ == "m3"


@pytest.mark.parametrize("solver", ["smo", "working_set"])
@pytest.mark.parametrize("C", [1e-5, 1e-4])
def test_a_c_far_below_tol_gives_libsvms_model(solver, C):
    """C below ``tol``: every alpha then lies within tol of its bounds, and the KKT measure
    must still see a gradient that violates (muflow.solvers.kkt). It did not before session
    39: the fit stopped with the bias at 0, and its predictions differed from libsvm's on
    a third of breast cancer's samples."""
    X, y = muflow.datasets.load_breast_cancer()
    ours = muflow.SVC(C=C, solver=solver).fit(X, y)
    theirs = LibsvmSVC(C=C).fit(X, y)
    assert np.mean(ours.predict(X) == theirs.predict(X)) >= 0.995
    np.testing.assert_allclose(ours.intercept_, theirs.intercept_, rtol=1e-3)
    np.testing.assert_array_equal(ours.n_support_, theirs.n_support_)
    assert ours.kkt_violation_.max() <= 1e-3


def test_an_exact_tie_of_two_classes_goes_to_the_second_class_as_in_libsvm():
    """A decision of exactly 0 (identical rows, balanced labels): libsvm votes for the
    pair's second class, classes_[1]; muflow gave classes_[0]."""
    X, y = np.ones((20, 3)), np.r_[np.zeros(10), np.ones(10)]
    ours, theirs = muflow.SVC().fit(X, y), LibsvmSVC().fit(X, y)
    assert ours.decision_function(X[:1])[0] == 0.0
    assert ours.predict(X[:1])[0] == theirs.predict(X[:1])[0] == 1.0


def test_a_class_weight_that_zeroes_a_class_and_a_fractional_degree_are_refused(binary):
    """A class of zero weight left a model that predicts one class (scikit-learn raises
    too); degree=2.5 was truncated to 2."""
    X, y = binary
    classes = np.unique(y)
    with pytest.raises(MuflowInputError, match="give every class a positive class_weight"):
        muflow.SVC(class_weight={classes[0]: 0.0, classes[1]: 1.0}).fit(X, y)
    with pytest.raises(MuflowInputError, match="degree must be a non-negative integer, got 2.5"):
        muflow.SVC(kernel="poly", degree=2.5).fit(X, y)
    assert muflow.SVC(kernel="poly", degree=3.0).fit(X, y).kernel_.degree == 3


def test_a_one_dimensional_precomputed_kernel_to_predict_asks_for_two_dimensions(binary):
    """One row of K(X_test, X_train) passed as a 1-D array: scikit-learn's "Expected 2D
    array" with the reshape that fixes it (it said "X.shape[1] = 200 should be equal to
    200"); a 2-D kernel of the wrong width still names both widths."""
    X, y = binary
    K = Kernel("rbf", gamma=0.5).block(X)
    model = muflow.SVC(kernel="precomputed").fit(K, y)
    with pytest.raises(ValueError, match=r"Expected 2D array, got 1D array") as info:
        model.predict(K[0])
    assert "reshape(1, -1)" in str(info.value) and "should be equal" not in str(info.value)
    with pytest.raises(ValueError, match=rf"X.shape\[1\] = 10 should be equal to {len(y)}"):
        model.predict(K[:3, :10])


def test_an_asymmetric_precomputed_kernel_is_refused(binary):
    """A pair solver on a K that is not symmetric may never stop (libsvm's does not)."""
    X, y = binary
    K = X @ X.T
    K[0, 1] += 1.0
    with pytest.raises(MuflowInputError, match="not symmetric .* up to 1"):
        muflow.SVC(kernel="precomputed").fit(K, y)
    K[1, 0] += 1.0
    assert muflow.SVC(kernel="precomputed").fit(K, y).n_support_.sum() > 0


def test_a_solver_that_gives_up_above_tol_warns_and_reports_fit_status_1():
    """A tol below rounding: the working-set loop stops where it can make no further
    progress, before max_iter. The fit is libsvm's "not converged" (fit_status_ = 1) and a
    ConvergenceWarning names the violation reached and the cause, as a stop at max_iter."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 5))
    y = (X[:, 0] * X[:, 1] + 0.3 * rng.normal(size=300) > 0).astype(int)
    model = muflow.SVC(kernel="rbf", gamma=0.5, C=100, solver="working_set", tol=1e-15)
    with pytest.warns(ConvergenceWarning, match=r"KKT violation [0-9.e+-]+ > tol=1e-15 "
                                                r"\(fit_status_ = 1\): no further progress"):
        model.fit(X, y)
    assert not model.converged_.all() and model.fit_status_ == 1
    assert model.score(X, y) > 0.9  # the iterate is usable, only short of an unreachable tol


def test_degenerate_values_scikit_learn_takes_are_taken():
    """gamma=0 and degree=0 (a constant kernel) and max_iter=0 (no step) are valid for
    scikit-learn's SVC and turn up in grids; muflow refused them. They now fit as libsvm
    does: the same predictions, and max_iter=0 ends at the start with fit_status_ = 1."""
    from sklearn.datasets import load_iris, make_classification

    X, y = load_iris(return_X_y=True)
    for params in (dict(gamma=0.0), dict(kernel="poly", degree=0)):
        ref = LibsvmSVC(**params).fit(X, y)
        model = muflow.SVC(**params).fit(X, y)
        np.testing.assert_array_equal(model.predict(X), ref.predict(X))
        np.testing.assert_array_equal(model.n_support_, ref.n_support_)
    Xb, yb = make_classification(300, random_state=0)
    with pytest.warns(ConvergenceWarning):
        ref = LibsvmSVC(max_iter=0).fit(Xb, yb)
    with pytest.warns(ConvergenceWarning):
        model = muflow.SVC(max_iter=0, solver="smo").fit(Xb, yb)
    assert model.fit_status_ == ref.fit_status_ == 1 and list(model.n_iter_) == [0]
    np.testing.assert_array_equal(model.predict(Xb), ref.predict(Xb))
    with pytest.raises(MuflowInputError, match="gamma must be a number >= 0"):
        muflow.SVC(gamma=-1.0).fit(X, y)


@pytest.mark.parametrize("params, message", [
    ({"gamma": float("inf")}, r"^gamma must be a number >= 0, got inf; give 'scale', 'auto'"),
    ({"gamma": None}, r"^gamma must be a number >= 0, got None"),
    ({"kernel": "poly", "coef0": float("inf")}, r"^coef0 must be a number, got inf"),
    ({"kernel": "poly", "coef0": None}, r"^coef0 must be a number, got None"),
    ({"kernel": "sigmoid", "coef0": "a"}, r"^coef0 must be a number, got 'a'"),
])
def test_kernel_parameters_that_are_not_finite_numbers_are_refused_naming_them(params, message):
    """gamma=inf and coef0=inf fitted a model of no support vectors predicting one class
    (accuracy 0.35 on breast cancer); None and text raised float()'s TypeError or
    ValueError, naming no parameter."""
    X, y = muflow.datasets.load_breast_cancer()
    with pytest.raises(MuflowInputError, match=message):
        muflow.SVC(**params).fit(X, y)


def test_a_hard_margin_with_zero_weights_leaves_those_samples_out():
    """C=inf times a zero weight (sample_weight or class_weight: one product) was NaN,
    refused as "upper bounds must be >= 0" although every weight was; libsvm fits it, the
    zero-weight samples left out."""
    from sklearn.datasets import load_iris
    from sklearn.svm import SVC as LibsvmSVC

    X, y = load_iris(return_X_y=True)
    X, y = X[y < 2], y[y < 2]  # setosa and versicolor: separable
    weights = np.ones(len(y))
    weights[::7] = 0.0
    ours = muflow.SVC(C=float("inf"), kernel="linear").fit(X, y, sample_weight=weights)
    ref = LibsvmSVC(C=float("inf"), kernel="linear").fit(X, y, sample_weight=weights)
    assert not np.isin(np.flatnonzero(weights == 0), ours.support_).any()
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours.decision_function(X), ref.decision_function(X),
                               rtol=1e-3, atol=1e-3)
