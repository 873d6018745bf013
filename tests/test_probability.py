"""probability=True: Platt's sigmoid, pairwise coupling and the internal folds against
independent references, scikit-learn's deprecation messages, and Brier scores against
scikit-learn's SVC(probability=True) on breast cancer and USPS (issue 18, acceptance)."""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, make_blobs
from sklearn.metrics import brier_score_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC as LibsvmSVC

import muflow
from muflow.probability import fold_columns, pairwise_coupling, sigmoid_predict, sigmoid_train
from tests._references import usps_digits


def test_sigmoid_train_minimises_platts_cross_entropy():
    """A, B minimise the cross-entropy against Platt's smoothed targets (Lin, Lin & Weng
    2007, eq. 3); reference: the same objective minimised by BFGS."""
    rng = np.random.default_rng(0)
    labels = np.where(rng.random(300) < 0.4, 1.0, -1.0)
    f = 1.5 * labels + rng.normal(scale=1.2, size=300)
    A, B = sigmoid_train(f, labels)
    n_pos, n_neg = (labels > 0).sum(), (labels < 0).sum()
    t = np.where(labels > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))

    def loss(ab):
        p = sigmoid_predict(f, ab[0], ab[1])
        return -np.sum(t * np.log(p) + (1 - t) * np.log(1 - p))

    ref = minimize(loss, [0.0, 0.0], method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose([A, B], ref.x, atol=1e-4)
    assert A < 0  # larger decision values, larger P(y = +1)


def test_pairwise_coupling_solves_wu_lin_weng_method_2():
    """p minimises sum_i sum_{j != i} (r_ji p_i - r_ij p_j)^2 on the simplex (Wu, Lin & Weng
    2004, eq. 21); reference: SLSQP on that quadratic."""
    rng = np.random.default_rng(1)
    k, n = 4, 20
    r = np.zeros((n, k, k))
    for i in range(k):
        for j in range(i + 1, k):
            r[:, i, j] = rng.uniform(0.05, 0.95, size=n)
            r[:, j, i] = 1 - r[:, i, j]
    P = pairwise_coupling(r)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    for s in range(n):
        def objective(p):
            return sum((r[s, j, i] * p[i] - r[s, i, j] * p[j]) ** 2
                       for i in range(k) for j in range(k) if i != j)
        ref = minimize(objective, np.full(k, 1 / k), method="SLSQP", bounds=[(0, 1)] * k,
                       constraints={"type": "eq", "fun": lambda p: p.sum() - 1},
                       options={"ftol": 1e-14, "maxiter": 500})
        np.testing.assert_allclose(P[s], ref.x, atol=5e-3)


def test_internal_folds_partition_each_problem_and_pin_the_rest():
    upper = np.ones((23, 3))
    upper[:7, 1] = 0.0  # samples outside problem 1
    train, held = fold_columns(upper, np.random.RandomState(0), folds=5)
    for p in range(3):
        members = upper[:, p] > 0
        cols = slice(p * 5, (p + 1) * 5)
        np.testing.assert_array_equal(held[:, cols].sum(axis=1), members.astype(int))
        np.testing.assert_array_equal(train[:, cols] | held[:, cols], np.repeat(members[:, None], 5, 1))
        assert not (train[:, cols] & held[:, cols]).any()


def test_probability_follows_scikit_learns_deprecation():
    X, y = make_blobs(n_samples=60, centers=3, random_state=0)
    with pytest.warns(FutureWarning, match="The `probability` parameter was deprecated in 1.9"):
        model = muflow.SVC(probability=True, random_state=0).fit(X, y)
    with pytest.warns(FutureWarning, match="Attribute `probA_` was deprecated"):
        assert model.probA_.shape == (3,)
    with pytest.warns(FutureWarning, match="Attribute `probB_` was deprecated"):
        assert model.probB_.shape == (3,)
    P = model.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(model.predict_log_proba(X), np.log(P))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default, "deprecated", warns nothing
        plain = muflow.SVC().fit(X, y)
    assert not hasattr(plain, "predict_proba")


def test_probability_is_reproducible_with_random_state():
    X, y = make_blobs(n_samples=80, centers=2, cluster_std=3.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        a = muflow.SVC(probability=True, random_state=3).fit(X, y).predict_proba(X)
        b = muflow.SVC(probability=True, random_state=3).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(a, b)


def _brier(P, y, classes):
    """Brier's (1950) score: mean over samples of sum_k (p_k - [y = k])^2."""
    return float(np.mean(np.sum((P - (y[:, None] == classes[None, :])) ** 2, axis=1)))


def _breast_cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return X, y, True


def _usps():
    X, y = usps_digits()
    return X, y, False


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
@pytest.mark.parametrize("dataset", ["breast_cancer", "usps"])
def test_brier_score_within_001_of_scikit_learn(dataset, kernel):
    X, y, scale = {"breast_cancer": _breast_cancer, "usps": _usps}[dataset]()
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0,
                                                        stratify=y)
    if scale:
        scaler = StandardScaler().fit(X_train)
        X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ours = muflow.SVC(kernel=kernel, probability=True, random_state=0).fit(X_train, y_train)
        ref = LibsvmSVC(kernel=kernel, probability=True, random_state=0).fit(X_train, y_train)
    P, P_ref = ours.predict_proba(X_test), ref.predict_proba(X_test)
    b, b_ref = _brier(P, y_test, ours.classes_), _brier(P_ref, y_test, ref.classes_)
    print(f"{dataset} {kernel}: Brier muflow {b:.4f}, scikit-learn {b_ref:.4f} "
          f"(difference {b - b_ref:+.4f}); largest |p - p_ref| {np.abs(P - P_ref).max():.3f}")
    assert abs(b - b_ref) <= 0.01
    if len(ours.classes_) == 2:  # scikit-learn's binary Brier loss, on the positive class
        assert abs(brier_score_loss(y_test, P[:, 1]) - brier_score_loss(y_test, P_ref[:, 1])) <= 0.01


@pytest.mark.parametrize("cache_size", [200.0, 0.05], ids=["folds-share-rows", "fold-alone"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_internal_folds_on_rows_compute_only_their_samples(n_classes, cache_size, monkeypatch):
    """On rows computed on demand the internal folds are solved on K over their problem's
    samples (the five folds together, sharing its rows, where the cache holds them:
    muflow.routing.folds_share_rows) or over each fold's training samples (a cache too small),
    and scored from K[held, sv] alone, never by a product over all n samples; the fit
    matches the same fit on a stored K: the same problems, solved to 1e-6 by the same solver."""
    from muflow.kernel_rows import KernelRows
    from muflow.routing import folds_share_rows

    X, y = make_blobs(n_samples=300, centers=n_classes, cluster_std=4.0, random_state=2)
    params = dict(probability=True, random_state=1, gram_dtype="float64", solver="working_set",
                  tol=1e-6, cache_size=cache_size)
    n_pairs = n_classes * (n_classes - 1) // 2
    pair_size = 2 * len(y) // n_classes
    share = folds_share_rows(pair_size, cache_size, 8)
    assert share == (cache_size == 200.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        stored = muflow.SVC(gram="stored", **params).fit(X, y)
        sizes = []
        restricted = KernelRows.restricted

        def spy(self, idx):
            sizes.append(len(idx))
            return restricted(self, idx)

        def no_full_pass(self, V):
            raise AssertionError("a product over all n samples")

        monkeypatch.setattr(KernelRows, "restricted", spy)
        monkeypatch.setattr(KernelRows, "matmul", no_full_pass)
        rows = muflow.SVC(gram="rows", **params).fit(X, y)
        P_stored, P_rows = stored.predict_proba(X), rows.predict_proba(X)
        np.testing.assert_allclose(rows._probA, stored._probA, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(rows._probB, stored._probB, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(P_rows, P_stored, atol=1e-5)
    fold_size = sum(abs(s - 0.8 * pair_size) <= 1 for s in sizes)
    pair_ops = sum(s == pair_size for s in sizes)
    if not share:  # each fold on its own 4/5 of its problem's samples
        assert fold_size >= 5 * n_pairs
    elif n_classes > 2:  # the pair's operator twice: the fit, then its five folds together
        assert (fold_size, pair_ops) == (0, 2 * n_pairs)
    else:  # two classes: the folds share the fit's operator itself
        assert (fold_size, pair_ops) == (0, 0)
