import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import pairwise

from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel, gamma_from_sigma, resolve_gamma


@pytest.fixture
def blocks():
    rng = np.random.default_rng(0)
    return rng.normal(size=(30, 5)), rng.normal(size=(20, 5))


@pytest.mark.parametrize(
    "kernel, reference",
    [
        (Kernel("linear"), lambda A, B: pairwise.linear_kernel(A, B)),
        (Kernel("poly", gamma=0.3, degree=3, coef0=1.5),
         lambda A, B: pairwise.polynomial_kernel(A, B, degree=3, gamma=0.3, coef0=1.5)),
        (Kernel("rbf", gamma=0.2), lambda A, B: pairwise.rbf_kernel(A, B, gamma=0.2)),
        (Kernel("sigmoid", gamma=0.1, coef0=-0.5),
         lambda A, B: pairwise.sigmoid_kernel(A, B, gamma=0.1, coef0=-0.5)),
        (Kernel("laplacian", gamma=0.4), lambda A, B: pairwise.laplacian_kernel(A, B, gamma=0.4)),
    ],
    ids=lambda v: v.name if isinstance(v, Kernel) else "",
)
def test_block_matches_sklearn_pairwise_dense_and_sparse(kernel, reference, blocks):
    A, B = blocks
    expected = reference(A, B)
    np.testing.assert_allclose(kernel.block(A, B), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernel.block(sp.csr_matrix(A), sp.csr_matrix(B)), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(kernel.diagonal(A), np.diag(reference(A, A)), rtol=1e-10, atol=1e-12)


def test_offset_adds_a_constant(blocks):
    A, B = blocks
    k = Kernel("rbf", gamma=0.2)
    np.testing.assert_allclose(k.with_offset(1.0).block(A, B), k.block(A, B) + 1.0)


def test_precomputed_returns_the_matrix(blocks):
    A, _ = blocks
    K = A @ A.T
    np.testing.assert_array_equal(Kernel("precomputed").block(K), K)


def test_nonnegativity_rules():
    rng = np.random.default_rng(1)
    signed = rng.normal(size=(40, 3))
    positive = np.abs(signed)
    assert Kernel("rbf", gamma=1.0).is_nonnegative(signed)
    assert Kernel("laplacian", gamma=1.0).is_nonnegative(signed)
    assert Kernel("poly", degree=4, coef0=-3.0).is_nonnegative(signed)
    assert not Kernel("poly", degree=3, coef0=1.0).is_nonnegative(signed)
    assert Kernel("poly", degree=3, coef0=1.0).is_nonnegative(positive)
    assert not Kernel("linear").is_nonnegative(signed)
    assert Kernel("linear").is_nonnegative(positive)
    assert not Kernel("sigmoid", coef0=0.0).is_nonnegative(signed)
    # the claims hold on the actual values
    for kernel in (Kernel("poly", degree=4, coef0=-3.0), Kernel("linear"), Kernel("poly", degree=3, coef0=1.0)):
        for X in (signed, positive):
            if kernel.is_nonnegative(X):
                assert kernel.block(X).min() >= 0


def test_gamma_helpers():
    assert gamma_from_sigma(3.0) == pytest.approx(1 / 18)
    X = np.arange(12.0).reshape(4, 3)
    assert resolve_gamma("scale", X) == pytest.approx(1 / (3 * X.var()))
    assert resolve_gamma("auto", X) == pytest.approx(1 / 3)
    with pytest.raises(MuflowInputError, match="sigma"):
        gamma_from_sigma(0)
    with pytest.raises(MuflowInputError, match="gamma"):
        resolve_gamma(-1.0, X)


def test_unknown_kernel_is_refused():
    with pytest.raises(MuflowInputError, match="unknown kernel 'cubic'.*rbf"):
        Kernel("cubic")


def test_kernel_from_setting_resolves_gamma_and_ignores_what_the_kernel_does_not_read():
    from muflow.kernels import kernel_from_setting

    X = np.random.default_rng(1).normal(size=(40, 4))
    rbf = kernel_from_setting({"kernel": "rbf", "gamma": "scale", "degree": 5}, X)
    assert rbf == Kernel("rbf", gamma=resolve_gamma("scale", X))  # degree: rbf reads none
    assert kernel_from_setting({"kernel": "rbf"}, X) == rbf  # gamma left out: "scale"
    poly = kernel_from_setting({"kernel": "poly", "gamma": 0.5, "degree": 2.0, "coef0": 1},
                               X, intercept="regularized")
    assert poly == Kernel("poly", gamma=0.5, degree=2, coef0=1.0, offset=1.0)
    assert isinstance(poly.degree, int)
    assert kernel_from_setting({"kernel": "linear"}, X, intercept="none") == Kernel("linear")
    with pytest.raises(MuflowInputError, match="gamma"):
        kernel_from_setting({"kernel": "rbf", "gamma": "wide"}, X)
