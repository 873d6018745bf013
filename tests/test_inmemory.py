"""K(X, X) in memory: the threaded, fused panel build equals the textbook formulas."""

import numpy as np
import pytest
import scipy.sparse as sp

from muflow.exceptions import MuflowInputError
from muflow.inmemory import numpy_gram
from muflow.kernels import Kernel
from tests._references import KERNELS, mostly_zeros



@pytest.fixture(scope="module")
def X():
    return mostly_zeros(301, 7, 0.5, seed=3)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.offset}")
@pytest.mark.parametrize("threads", [1, 2])
def test_matches_reference_dense_and_sparse(X, kernel, threads):
    ref = kernel.block_reference(X, X)
    for data in (X, sp.csr_matrix(X)):
        K = numpy_gram(data, kernel, dtype="float64", block_rows=64, n_threads=threads)
        np.testing.assert_allclose(K, ref, rtol=1e-12, atol=1e-12)
    K32 = numpy_gram(X, kernel, dtype="float32", block_rows=50, n_threads=threads)
    assert K32.dtype == np.float32
    np.testing.assert_allclose(K32, ref, rtol=1e-6, atol=1e-6)


def test_out_is_reused_and_checked(X):
    kernel = Kernel("rbf", gamma=0.5)
    out = np.full((len(X), len(X)), np.nan, dtype=np.float32)
    assert numpy_gram(X, kernel, out=out) is out
    np.testing.assert_allclose(out, kernel.block_reference(X), atol=1e-6)
    with pytest.raises(MuflowInputError, match="C-ordered"):
        numpy_gram(X, kernel, out=np.empty((3, 3)))


def test_block_into_agrees_with_block_for_rectangular_blocks(X):
    kernel = Kernel("poly", gamma=0.5, degree=2, coef0=0.5)
    out = np.empty((40, 90), dtype=np.float32)
    kernel.block_into(X[:40], X[100:190], out)
    # a float32 block is one sgemm: its error is absolute, about 6e-8 ||a|| ||b|| per product,
    # not relative to an entry that cancels to nearly 0 ((gamma a'b + coef0)^2 with a'b ~ -1)
    np.testing.assert_allclose(out, kernel.block_reference(X[:40], X[100:190]), rtol=1e-6, atol=1e-6)


def test_gram_dtype_rule_and_svc_option(breast_cancer_split):
    from muflow import SVC
    from muflow.inmemory import FLOAT64_GRAM_MAX_SAMPLES, gram_dtype

    assert gram_dtype(FLOAT64_GRAM_MAX_SAMPLES) == np.float64
    assert gram_dtype(FLOAT64_GRAM_MAX_SAMPLES + 1) == np.float32
    assert gram_dtype(10, "float32") == np.float32
    Xtr, Xte, ytr, yte = breast_cancer_split
    with pytest.raises(MuflowInputError, match="gram_dtype must be one of"):
        SVC(gram_dtype="float16").fit(Xtr, ytr)
    a = SVC(gamma=0.5, solver="smo", tol=1e-6).fit(Xtr, ytr)
    b = SVC(gamma=0.5, solver="smo", tol=1e-6, gram_dtype="float32").fit(Xtr, ytr)
    np.testing.assert_allclose(b.objective_, a.objective_, rtol=1e-5)
    assert np.mean(a.predict(Xte) == b.predict(Xte)) >= 0.99


def test_empty_populated_is_a_writable_array():
    from muflow.inmemory import POPULATE_MIN_BYTES, empty_populated

    big = empty_populated((POPULATE_MIN_BYTES // 8 + 1,), np.float64)
    small = empty_populated((3, 4), np.float32)
    assert big.flags.writeable and big.dtype == np.float64 and small.shape == (3, 4)
    big[:] = 1.0
    assert big.sum() == big.size


def test_float32_rbf_is_exact_to_rounding_on_integer_data_and_shifted_otherwise():
    """sgemm's products of integer data are exact, so a float32 rbf K of binary features
    (a8a) is only rounded; other data are shifted by their mean when that halves the norms."""
    from muflow.kernels import rbf_center

    rng = np.random.default_rng(5)
    kernel = Kernel("rbf", gamma=0.05)
    binary = (rng.random((300, 60)) < 0.7).astype(float)
    center = rbf_center(binary)
    assert center is not None and np.array_equal(center, np.rint(center))
    K = numpy_gram(binary, kernel, dtype="float32")
    np.testing.assert_allclose(K, kernel.block_reference(binary), rtol=0, atol=1.2e-7)
    assert np.all(np.diagonal(K) == 1.0)
    normal = rng.normal(size=(300, 6))
    assert rbf_center(normal) is None
    shifted = 1000.0 + normal
    np.testing.assert_allclose(rbf_center(shifted), shifted.mean(axis=0))
    for data in (shifted, sp.csr_matrix(shifted)):
        np.testing.assert_allclose(numpy_gram(data, kernel), kernel.block_reference(shifted), rtol=0, atol=2e-6)
    out = np.empty((100, 200), dtype=np.float32)  # a lone block: shifted by B's mean
    kernel.block_into(shifted[:100], shifted[100:], out)
    np.testing.assert_allclose(out, kernel.block_reference(shifted[:100], shifted[100:]), rtol=0, atol=2e-6)


@pytest.mark.parametrize("data", ["binary", "counts", "large integers", "real"])
@pytest.mark.parametrize("name", ["rbf", "linear", "poly"])
def test_a_sparse_float32_source_is_the_dense_ones_value_for_value(data, name):
    """Sparse X of few features is made into float32 rows without float64 dense copies
    where that changes no value (`_sparse_float32_rows`): the rows, their transpose, norms,
    sparse-row form and rbf's shift equal those of the same X given dense, bit for bit,
    whichever route it took."""
    from muflow.inmemory import _sparse_float32_rows, row_source

    rng = np.random.default_rng(11)
    shape = (400, 30)
    mask = rng.random(shape) < 0.3
    values = {"binary": np.ones(shape), "counts": rng.integers(1, 9, shape).astype(float),
              "large integers": rng.integers(2**24, 2**25, shape).astype(float),
              "real": rng.normal(3.0, 1.0, shape)}[data]
    dense = np.where(mask, values, 0.0)
    dense[:, :4] = np.where(rng.random((shape[0], 4)) < 0.9, values[:, :4], 0.0)  # mean >= 0.5
    kernel = Kernel(name, gamma=0.05) if name == "rbf" else Kernel(name)
    direct = _sparse_float32_rows(sp.csr_matrix(dense), kernel)
    # the float64 route is taken where the float32 one would change a value
    assert (direct is None) == (name == "rbf" and data in ("large integers", "real"))
    if name == "rbf" and data in ("binary", "counts"):
        assert direct[1] is not None  # the shift is exercised
    got, ref = row_source(sp.csr_matrix(dense), kernel), row_source(dense, kernel)
    for a, b in [(got.X, ref.X), (got.XT, ref.XT), (got.sq, ref.sq)]:
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert (got.center is None) == (ref.center is None)
    assert got.center is None or np.array_equal(got.center, ref.center)
    assert (got.csr is None) == (ref.csr is None)
    if got.csr is not None:
        assert all(np.array_equal(a, b) for a, b in zip(got.csr, ref.csr))
