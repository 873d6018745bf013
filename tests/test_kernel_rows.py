"""Rows of K on demand (KernelRows): the same numbers as a stored K, products block by block,
the row cache filled in place, SMO unchanged on it, and never an n x n array; the memory
check that refuses a stored Gram that cannot fit."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from muflow import inmemory
from muflow.backends import gram_operator
from muflow.exceptions import MuflowInputError
from muflow.inmemory import numpy_gram
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.memory import (
    GIB, available_memory_bytes, check_gram_fits, choose_gram, gram_bytes,
)
from muflow.operators import DenseGram
from muflow.solvers.problem import DualProblem
from muflow.solvers.rowcache import RowCache
from muflow.solvers.smo import solve_smo
from muflow.solvers.working_set import solve_working_set
from muflow.thread_pool import Begun
from tests._references import KERNELS, a8a, mostly_zeros

#: float32 rows are one sgemm: errors of about 6e-8 ||a|| ||b|| per product
TOLERANCE = {"float64": dict(rtol=1e-12, atol=1e-12), "float32": dict(rtol=1e-6, atol=2e-6)}
#: unsorted, with repeats, crossing panel boundaries (block_rows=3 below)
IDX = np.array([5, 3, 180, 3, 0, 100, 101, 102, 103, 5, 179])


@pytest.fixture(scope="module")
def X():
    return mostly_zeros(181, 6, 0.4, seed=3)


def as_input(X, form, monkeypatch):
    """Dense, or CSR kept sparse (the densifying threshold lowered to 0 so that the sparse
    product path runs, as it does for data of more than 4096 features)."""
    if form == "dense":
        return X
    monkeypatch.setattr(inmemory, "DENSIFY_MAX_FEATURES", 0)
    return sp.csr_matrix(X)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.offset:g}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["dense", "csr"])
def test_rows_equal_the_kernel_and_the_stored_gram(X, kernel, dtype, form, monkeypatch):
    data = as_input(X, form, monkeypatch)
    op = KernelRows(data, kernel, dtype=dtype, block_rows=3, n_threads=2)
    reference = kernel.block_reference(X)
    rows = op.rows(IDX)
    assert rows.dtype == np.float64 and rows.shape == (IDX.size, X.shape[0])
    np.testing.assert_allclose(rows, reference[IDX], **TOLERANCE[dtype])
    # the same code as the in-memory Gram: the same numbers
    stored = DenseGram(numpy_gram(data, kernel, dtype=dtype))
    np.testing.assert_allclose(rows, stored.rows(IDX), rtol=0, atol=1e-12 if dtype == "float64" else 1e-6)
    native = op.rows_native(IDX)
    assert native.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(native, rows)
    # the diagonal: the kernel's, and the very entries the rows hold where those are written
    # from it (rbf's exp(0), float32); a float64 product's a'a is kept, equal to the last bits
    np.testing.assert_allclose(op.diagonal(), np.diag(reference), **TOLERANCE[dtype])
    in_rows = rows[np.arange(IDX.size), IDX]
    if dtype == "float32" or kernel.name in ("rbf", "laplacian"):
        np.testing.assert_array_equal(in_rows, op.diagonal()[IDX])
    else:
        np.testing.assert_allclose(in_rows, op.diagonal()[IDX], rtol=1e-14, atol=1e-15)
    assert op.nonnegative == kernel.is_nonnegative(X)
    assert op.rows_computed == 2 * IDX.size and op.dense is None and op.has_rows


def test_rbf_diagonal_is_exactly_one_plus_offset_in_float32():
    # large, uncentred values: ||a||^2 + ||a||^2 - 2 a'a cancels badly in float32
    X = 1000.0 + np.random.default_rng(0).normal(size=(50, 30))
    op = KernelRows(X, Kernel("rbf", gamma=0.01, offset=1.0), dtype="float32")
    rows = op.rows_native(np.arange(50))
    assert np.all(np.diag(rows) == np.float32(2.0)) and rows.max() <= np.float32(2.0)
    np.testing.assert_allclose(rows, Kernel("rbf", gamma=0.01, offset=1.0).block_reference(X), atol=2e-6)


@pytest.mark.parametrize("kernel", [Kernel("rbf", gamma=0.2), Kernel("poly", gamma=0.3, degree=3, coef0=1.0),
                                    Kernel("sigmoid", gamma=0.05, coef0=-0.5)], ids=lambda k: k.name)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_products_equal_the_stored_gram(X, kernel, dtype):
    rng = np.random.default_rng(1)
    op = KernelRows(X, kernel, dtype=dtype, block_rows=16)
    stored = DenseGram(numpy_gram(X, kernel, dtype=dtype))
    dense_V = rng.normal(size=(X.shape[0], 3))
    sparse_V = dense_V * (rng.random((X.shape[0], 1)) < 0.2)  # most rows zero (support vectors)
    for V in (dense_V, sparse_V, np.zeros_like(dense_V)):
        scale = max(np.abs(stored.matmul_precise(V)).max(), 1.0)
        tight = 1e-12 if dtype == "float64" else 1e-6
        np.testing.assert_allclose(op.matmul_precise(V), stored.matmul_precise(V), rtol=0, atol=tight * scale)
        np.testing.assert_allclose(op.matmul(V), stored.matmul(V), rtol=0, atol=10 * tight * scale)
        out = np.empty((X.shape[0], 3), dtype=dtype)
        assert op.matmul_native(V, out=out) is out
        np.testing.assert_allclose(out, stored.matmul(V), rtol=0, atol=10 * tight * scale)
    for V in (dense_V, sparse_V):
        pos, neg = op.matmul_parts(V)
        ref_pos, ref_neg = stored.matmul_parts(V)
        scale = max(np.abs(ref_pos).max(), np.abs(ref_neg).max())
        np.testing.assert_allclose(pos, ref_pos, rtol=0, atol=1e-5 * scale)
        np.testing.assert_allclose(neg, ref_neg, rtol=0, atol=1e-5 * scale)
        assert (neg == 0).all() == op.nonnegative
    assert op.products >= 9


def test_row_cache_is_filled_in_place_in_the_rows_dtype(X):
    kernel = Kernel("rbf", gamma=0.2)
    op = KernelRows(X, kernel, dtype="float32", block_rows=4)
    cache = RowCache(op, cache_mb=10 * X.shape[0] * 4 / 2**20)  # 10 rows
    assert not cache.in_place and cache.dtype == np.float32 and cache.slots == 10
    reference = numpy_gram(X, kernel, dtype="float32")
    cache.fetch(np.array([7, 2, 9, 40, 41, 42]))      # free slots: one run, written in place
    cache.fetch(np.array([100, 3, 150, 60, 61, 62]))  # 4 free slots and 2 evicted ones
    cache.fetch(np.array([11, 12, 13, 14, 15]))       # evicts 5 scattered slots: via scratch
    cache.fetch(np.array([16]))                       # one row
    assert op.rows_computed == 18
    cached = np.flatnonzero(cache.slot_of >= 0)
    assert set(range(11, 17)) <= set(cached) and cached.size == 10
    for i in cached:  # the right row in the right slot (panels of other shapes: ~1 ulp apart)
        np.testing.assert_allclose(cache.data[cache.slot_of[i]], reference[i], rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["rbf", "poly", "sigmoid", "linear"])
def test_rows_for_scattered_slots_are_computed_a_column_chunk_at_a_time(X, name, monkeypatch):
    """Chunks of 48 columns (181 columns: three full chunks and a partial one): every row
    lands in its slot with the stored K's values and its exact diagonal entry."""
    import muflow.kernel_rows as kernel_rows

    monkeypatch.setattr(kernel_rows, "CHUNK_BYTES", 48 * 4 * 5)  # 5 rows a panel: width 48
    monkeypatch.setattr(kernel_rows, "MIN_CHUNK_COLUMNS", 16)
    kernel = Kernel(name, gamma=0.2, degree=3, coef0=0.5)
    op = KernelRows(X, kernel, dtype="float32", block_rows=5, n_threads=2)
    reference = numpy_gram(X, kernel, dtype="float32")
    rows = np.array([0, 57, 58, 59, 100, 180, 3, 47, 48, 49, 95, 96, 143, 144, 176])
    slots = np.array([14, 2, 9, 0, 5, 11, 7, 1, 12, 3, 13, 6, 10, 4, 8])  # no run of two
    data = np.full((15, X.shape[0]), np.nan, dtype=np.float32)
    op.rows_into(rows, data, slots)
    scale = np.abs(reference).max()
    np.testing.assert_allclose(data[slots], reference[rows], rtol=0, atol=1e-6 * scale)
    assert np.array_equal(data[slots, rows], kernel.diagonal_from_sq(op.source.sq[rows]).astype(np.float32))


@pytest.fixture(scope="module")
def mostly_zero_X():
    """90 % zeros, real values: rows multiplied as sparse rows (:data:`SPARSE_ROWS_MAX_DENSITY`)."""
    return mostly_zeros(300, 40, 0.9, seed=5)


@pytest.mark.parametrize("name", ["rbf", "poly", "sigmoid", "linear"])
def test_mostly_zero_rows_are_multiplied_as_sparse_rows_with_the_same_values(mostly_zero_X, name,
                                                                             monkeypatch):
    from muflow import inmemory as im
    import muflow.kernel_rows as kernel_rows

    kernel = Kernel(name, gamma=0.1, degree=3, coef0=0.5)
    sparse_rows = KernelRows(sp.csr_matrix(mostly_zero_X), kernel, block_rows=32)
    assert sparse_rows.source.csr is not None
    monkeypatch.setattr(im, "SPARSE_ROWS_MAX_DENSITY", 0.0)
    dense_rows = KernelRows(mostly_zero_X, kernel, block_rows=32)
    assert dense_rows.source.csr is None
    idx = np.arange(300)
    K, K_dense = sparse_rows.rows_native(idx), dense_rows.rows_native(idx)
    np.testing.assert_allclose(K, K_dense, rtol=0, atol=2e-6 * np.abs(K_dense).max())
    assert np.array_equal(K, K.T)  # the same terms in the same order for (i, j) and (j, i)
    assert np.array_equal(np.diag(K), sparse_rows.diagonal().astype(np.float32))
    # rows for scattered cache slots, a column chunk at a time, agree with the panels
    monkeypatch.setattr(kernel_rows, "CHUNK_BYTES", 64 * 4 * 8)
    monkeypatch.setattr(kernel_rows, "MIN_CHUNK_COLUMNS", 16)
    rows, slots = np.array([5, 299, 17, 150, 151, 2, 88, 0]), np.array([7, 0, 5, 2, 4, 6, 1, 3])
    data = np.full((8, 300), np.nan, dtype=np.float32)
    sparse_rows.rows_into(rows, data, slots)
    assert np.array_equal(data[slots], K[rows])


def test_sparse_rows_take_four_entries_a_pass_with_the_bits_of_one_axpy_each():
    """The sparse rows' product adds four stored entries of a row in one pass over the
    accumulator (:func:`muflow._kernel_compiled._sparse_row_chunk`): each entry is the same
    chain of fused multiply-adds, feature after feature, as one AXPY a stored entry, for
    rows of 0 to 11 stored entries (the four-at-a-time passes and the ones left)."""
    from numba import njit

    from muflow import _kernel_compiled as kc

    @njit(fastmath=kc._FLAGS, error_model="numpy")
    def one_axpy_an_entry(indptr, indices, values, rows, XT, out):
        for r in range(rows.shape[0]):
            i = rows[r]
            acc = out[r]
            acc[:] = np.float32(0.0)
            for p in range(indptr[i], indptr[i + 1]):
                v = values[p]
                for c in range(acc.shape[0]):
                    acc[c] += v * XT[indices[p], c]

    rng = np.random.default_rng(3)
    d, n = 24, 3000
    X = np.zeros((n, d), dtype=np.float32)
    for i in range(n):
        X[i, rng.choice(d, i % 12, replace=False)] = rng.standard_normal(i % 12)
    csr = sp.csr_matrix(X)
    parts = (csr.indptr.astype(np.int64), csr.indices.astype(np.int64), csr.data)
    XT = np.ascontiguousarray(X.T)
    rows = np.arange(0, n, 7, dtype=np.int64)
    reference = np.empty((rows.size, n), dtype=np.float32)
    one_axpy_an_entry(*parts, rows, XT, reference)
    out = np.full((rows.size, n), np.nan, dtype=np.float32)
    kc.sparse_rows_product(*parts, rows, XT, 0, n, out)
    assert {int(np.diff(csr.indptr)[i]) for i in rows} == set(range(12))
    assert np.array_equal(out, reference)
    np.testing.assert_allclose(out, X[rows] @ X.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
@pytest.mark.parametrize("offset", [0.0, 0.25])
def test_sparse_rbf_rows_in_one_call_equal_the_product_finish_and_copy(mostly_zero_X, n_threads,
                                                                        offset, monkeypatch):
    """rbf on sparse rows goes in one compiled call a range of columns, each thread
    taking tiles in one compiled loop (``RowSource.sparse_rbf_tiles``); its rows equal, bit
    for bit, the product, the finish
    and the copy done one after the other, for batches of one row to many, the columns
    shared out in pieces of any size, on real values and on a8a's binary ones."""
    from muflow import inmemory as im
    import muflow.kernel_rows as kernel_rows

    kernel = Kernel("rbf", gamma=0.1, offset=offset)
    a8a_X, _ = a8a(700)
    for X in (sp.csr_matrix(mostly_zero_X), a8a_X):
        op = KernelRows(X, kernel, dtype="float32", n_threads=n_threads)
        assert op._sparse_rbf
        n = op.n
        rng = np.random.default_rng(n_threads)
        for k, piece_entries in ((1, 32768), (7, 64), (40, 1000), (40, 32768)):
            monkeypatch.setattr(im, "MIN_PIECE_ENTRIES", piece_entries)
            rows = rng.choice(n, k, replace=False)
            slots = rng.permutation(64)[:k]
            fused = np.full((64, n), np.nan, dtype=np.float32)
            op.rows_into(rows, fused, slots)
            with monkeypatch.context() as m:
                m.setattr(kernel_rows.KernelRows, "_sparse_rbf", property(lambda self: False))
                stepwise = np.full((64, n), np.nan, dtype=np.float32)
                op.rows_into(rows, stepwise, slots)
            assert np.array_equal(fused, stepwise, equal_nan=True)
            assert np.array_equal(fused[slots, rows], np.float32(np.full(k, 1.0 + offset)))


def test_a_batch_of_few_entries_is_not_shared_out(monkeypatch):
    """A batch's tiles go to other threads only where it has
    :data:`~muflow.inmemory.MIN_PIECE_ENTRIES` entries a thread; the tiles are the same
    whatever the threads."""
    import muflow.kernel_rows as kernel_rows
    from muflow.inmemory import MIN_PIECE_ENTRIES

    X = np.random.default_rng(3).normal(size=(2000, 8))
    dealt = []

    def record(piece, n_pieces, n_workers):
        dealt.append((n_pieces, n_workers))
        for k in range(n_pieces):
            piece(k, 0)
        return Begun(None, [])

    monkeypatch.setattr(kernel_rows, "begin_held", record)
    for threads in (1, 4):
        op = KernelRows(X, Kernel("rbf", gamma=0.1), dtype="float32", n_threads=threads)
        few = MIN_PIECE_ENTRIES // 2000  # rows whose entries make one thread's worth
        for k in (few, 3 * few, 40 * few):
            op.rows_into(np.arange(k), np.empty((k, 2000), np.float32), np.arange(k))
    tiles = [n for n, _ in dealt]
    assert tiles[:3] == tiles[3:] and tiles[0] > 1  # the same tiles on 1 and 4 threads
    assert [w for _, w in dealt] == [1, 1, 1, 1, 2, 4]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kernel", [Kernel("rbf", gamma=0.1), Kernel("linear")], ids=["rbf", "linear"])
def test_rows_are_the_same_to_the_bit_on_any_number_of_threads(dtype, kernel, monkeypatch):
    """Rows of dense X are computed by the same BLAS calls whatever the threads
    (:meth:`~muflow.kernel_rows.KernelRows._begin_tiles`): odd numbers of rows, rows in
    scattered slots and foreign rows, on 1, 2 and 3 threads, equal to the bit. BLAS rounds a
    row by the shape of the product (OpenBLAS's AVX2 kernels: an odd row count, the last
    columns of a call), so a split by the threads would not give this."""
    import muflow.kernel_rows as kernel_rows

    monkeypatch.setattr(kernel_rows, "MIN_PIECE_ENTRIES", 1)  # share even small batches
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1500, 13))
    foreign = rng.normal(size=(7, 13))
    ops = [KernelRows(X, kernel, dtype=dtype, block_rows=16, n_threads=t) for t in (1, 2, 3)]
    for k in (1, 3, 5, 37):
        idx = rng.permutation(1500)[:k]
        slots = rng.permutation(64)[:k]
        rows = []
        for op in ops:
            data = np.full((64, 1500), np.nan, dtype=dtype)
            op.rows_into(idx, data, slots)
            other = np.full((64, 1500), np.nan, dtype=dtype)
            op.foreign_rows_into(foreign[: min(k, 7)], other, slots[: min(k, 7)])
            rows.append((data, other))
        for data, other in rows[1:]:
            assert np.array_equal(data, rows[0][0], equal_nan=True)
            assert np.array_equal(other, rows[0][1], equal_nan=True)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_rbf_rows_finished_straight_into_the_cache_equal_the_finish_and_copy(X, n_threads,
                                                                             monkeypatch):
    """Dense rows under rbf are finished straight into their cache rows
    (``_kernel_compiled.rbf_rows_finisher``): the same rows, bit for bit, as the finish in
    the scratch block and the copy after it, for rows of X (their exact diagonal) and for
    rows from elsewhere (a Dask worker's working set), in chunks of any width."""
    import muflow._kernel_compiled as kc
    import muflow.kernel_rows as kernel_rows

    monkeypatch.setattr(kernel_rows, "CHUNK_BYTES", 48 * 4 * 5)
    monkeypatch.setattr(kernel_rows, "MIN_CHUNK_COLUMNS", 16)
    op = KernelRows(X, Kernel("rbf", gamma=0.2, offset=0.5), dtype="float32", n_threads=n_threads)
    n = op.n
    rng = np.random.default_rng(n_threads)
    foreign = rng.normal(size=(6, X.shape[1]))
    foreign[2] = X[40]
    for k in (1, 5, 23):
        rows, slots = rng.choice(n, k, replace=False), rng.permutation(26)[:k]
        results = []
        for stepwise in (False, True):
            with monkeypatch.context() as m:
                if stepwise:
                    m.setattr(kc, "rbf_rows_finisher", lambda *args: None)
                data = np.full((32, n), np.nan, dtype=np.float32)
                op.rows_into(rows, data, slots)
                op.foreign_rows_into(foreign, data, np.arange(26, 32), same_rows=[-1, -1, 40, -1, -1, -1])
                results.append(data)
        assert np.array_equal(results[0], results[1], equal_nan=True)
        assert np.all(results[0][slots, rows] == np.float32(1.5)) and results[0][28, 40] == np.float32(1.5)


def test_the_sparse_rows_of_a_dense_source_are_scipys_csr():
    """``dense_to_csr`` keeps what ``scipy.sparse.csr_matrix`` keeps: the non-zero entries
    row by row in column order (an all-zero row, -0.0 dropped as a zero)."""
    from muflow._kernel_compiled import dense_to_csr

    X = mostly_zeros(50, 30, 0.85, seed=3).astype(np.float32)
    X[7] = 0.0
    X[9, 4] = -0.0
    indptr, indices, values = dense_to_csr(X)
    S = sp.csr_matrix(X)
    assert np.array_equal(indptr, S.indptr) and np.array_equal(indices, S.indices)
    assert values.dtype == np.float32 and np.array_equal(values, S.data)


def test_a8a_rows_as_sparse_rows_equal_the_sgemm_rows_exactly(monkeypatch):
    """a8a's binary features (integers after rbf's integer shift) make both products exact."""
    from muflow import inmemory as im

    X, _ = a8a(2000)
    kernel = Kernel("rbf", gamma=0.05)
    sparse_rows = KernelRows(X, kernel)
    monkeypatch.setattr(im, "SPARSE_ROWS_MAX_DENSITY", 0.0)
    dense_rows = KernelRows(X, kernel)
    assert sparse_rows.source.csr is not None and dense_rows.source.csr is None
    idx = np.array([0, 1, 2, 999, 1500, 1999])
    assert np.array_equal(sparse_rows.rows_native(idx), dense_rows.rows_native(idx))


def test_smo_on_rows_equals_smo_on_the_stored_gram(sonar_split):
    """Same data, kernel and dtype: the same solution, through a small row cache."""
    Xtr, _, ytr, _ = sonar_split
    kernel = Kernel("rbf", gamma=0.5)
    y = ytr.astype(float)
    stored = solve_smo(DualProblem(DenseGram(numpy_gram(Xtr, kernel, dtype="float64")), y, upper=2.0,
                                   equality=True), tol=1e-6)
    op = KernelRows(Xtr, kernel, dtype="float64")
    rows = solve_smo(DualProblem(op, y, upper=2.0, equality=True), tol=1e-6, cache_mb=0.01)
    assert rows.timings["row_fetches"] > 10 and op.rows_computed >= rows.timings["rows_fetched"]
    np.testing.assert_allclose(rows.alpha, stored.alpha, atol=1e-8)
    np.testing.assert_allclose(rows.objective, stored.objective, rtol=1e-10)
    assert rows.kkt_violation <= 1e-6


def test_smo_on_float32_rows_of_a8a_matches_libsvm():
    from sklearn.svm import SVC

    X, y = a8a(1500)
    kernel = Kernel("rbf", gamma=0.05)
    op = KernelRows(X, kernel, dtype="float32")
    sol = solve_smo(DualProblem(op, y, upper=1.0, equality=True), tol=1e-3, cache_mb=2.0)
    K = kernel.block_reference(X)
    ref = SVC(kernel="precomputed", C=1.0, tol=1e-5).fit(K, y)
    alpha = np.zeros(len(y))
    alpha[ref.support_] = np.abs(ref.dual_coef_[0])

    def objective(a):
        ya = y * a
        return 0.5 * ya @ K @ ya - a.sum()

    assert objective(sol.alpha[:, 0]) == pytest.approx(objective(alpha), rel=1e-4)
    decision = K @ (y * sol.alpha[:, 0]) + sol.bias[0]
    assert np.mean(np.sign(decision) == ref.predict(K)) >= 0.995


@pytest.mark.parametrize("solver, n, cache_mb, bound", [
    # K would take 244 MiB in float32; the working set holds the 8 MB row cache, a few
    # vectors of n and the q x q subproblem
    ("working_set", 8000, 8.0, 0.1),
    # K would take 549 MiB; SMO also holds its rows restricted to its active set, at most
    # 128 MB per call of its compiled loop: bounds that do not grow with n^2
    ("smo", 12_000, 16.0, 0.4),
])
def test_the_rows_path_never_allocates_n_squared(monkeypatch, solver, n, cache_mb, bound):
    """The Gram builders are made to fail, and the traced peak of a whole fit on rows stays
    far below n^2 * 4 bytes."""
    rng = np.random.default_rng(0)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    X = rng.normal(size=(n, 8)) + 0.8 * y[:, None]
    solve = {"working_set": solve_working_set, "smo": solve_smo}[solver]

    def refuse(*args, **kwargs):
        raise AssertionError("a stored Gram was built on the rows path")

    def fit():
        op = gram_operator(X, Kernel("rbf", gamma=0.1), gram="rows", gram_dtype="float32")
        return op, solve(DualProblem(op, y, upper=1.0, equality=True), tol=1e-3, cache_mb=cache_mb)

    monkeypatch.setattr(inmemory, "numpy_gram", refuse)
    monkeypatch.setattr(inmemory, "empty_populated", refuse)
    fit()  # loads the compiled loops for these dtypes outside the trace
    tracemalloc.start()
    try:
        op, sol = fit()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(op, KernelRows) and sol.converged.all()
    assert peak < bound * n * n * 4, f"peak {peak / 2**20:.1f} MiB"


# -- the memory check ------------------------------------------------------------------
def test_choose_gram_stores_what_fits_in_half_the_available_memory():
    available = 8 * GIB
    assert gram_bytes(30_000, "float32") == 30_000**2 * 4
    assert choose_gram(30_000, "float32", available=available) == "stored"      # 3.4 GiB
    assert choose_gram(50_000, "float32", available=available) == "rows"        # 9.3 GiB
    assert choose_gram(40_000, "float32", "rows", available=available) == "rows"
    assert choose_gram(40_000, "float32", "stored", available=available) == "stored"  # 6.0 of 8
    with pytest.raises(MuflowInputError, match="9.3 GiB"):
        choose_gram(50_000, "float32", "stored", available=available)
    with pytest.raises(MuflowInputError, match="gram must be one of"):
        choose_gram(10, "float32", "dense")
    check_gram_fits(1000, "float64", available=8 * 10**6)  # fits: no error


def test_auto_gram_operator_computes_rows_when_K_does_not_fit(monkeypatch):
    import muflow.memory as memory

    X = np.random.default_rng(0).normal(size=(300, 3))
    kernel = Kernel("rbf", gamma=0.5)
    K_bytes = 300 * 300 * 8  # float64 up to 4096 samples
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2 * K_bytes)  # K: half of it
    assert isinstance(gram_operator(X, kernel), DenseGram)
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2 * K_bytes - 1)
    assert isinstance(gram_operator(X, kernel), KernelRows)
    assert isinstance(gram_operator(X, kernel, gram="stored"), DenseGram)  # fits, if not by half
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: K_bytes - 1)
    with pytest.raises(MuflowInputError, match='gram="rows"'):
        gram_operator(X, kernel, gram="stored")
    assert isinstance(gram_operator(X, kernel, gram="rows"), KernelRows)


def test_a_stored_gram_of_100000_rows_is_refused_before_any_allocation():
    """The issue's case: 100,000 rows need 37.3 GiB in float32 (more than this 24 GB machine
    has). Where that much is available, 10^6 rows (3.6 TiB) stand in."""
    n = 100_000
    available = available_memory_bytes()
    if available is None:
        pytest.skip("the available memory cannot be read here")
    if gram_bytes(n, "float32") <= available:
        n = 1_000_000
    X = np.zeros((n, 2))
    kernel = Kernel("rbf", gamma=0.5)
    tracemalloc.start()
    try:
        with pytest.raises(MuflowInputError) as refused:
            gram_operator(X, kernel, gram="stored", gram_dtype="float32")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(refused.value)
    needed = f"{gram_bytes(n, 'float32') / GIB:.1f} GiB"
    assert needed in message and "available" in message and 'gram="rows"' in message
    if n == 100_000:
        assert "37.3 GiB" in message
    assert peak < 2**20, f"traced peak {peak} bytes before the refusal"


@pytest.mark.parametrize("kernel", [Kernel("rbf", gamma=0.5, offset=1.0), Kernel("poly", gamma=0.2, degree=3, coef0=1.0)],
                         ids=["rbf", "poly-signed"])
def test_multiplicative_updates_run_on_rows_through_products(generated_split, kernel):
    """The multiplicative solvers only ask for products: on rows they compute K @ V panel by
    panel (a whole K per pass, slowly; the signed kernel through matmul_parts) and take the
    stored Gram's steps."""
    from muflow.solvers.multiplicative import solve_multiplicative

    Xtr, _, ytr, _ = generated_split
    y = ytr.astype(float)
    stored = solve_multiplicative(DualProblem(DenseGram(numpy_gram(Xtr, kernel, dtype="float64")), y,
                                              upper=1.0), rule="m3", tol=1e-12, max_iter=150)
    op = KernelRows(Xtr, kernel, dtype="float64")
    rows = solve_multiplicative(DualProblem(op, y, upper=1.0), rule="m3", tol=1e-12, max_iter=150)
    assert rows.n_iter == stored.n_iter == 150 and op.products >= 150
    np.testing.assert_allclose(rows.alpha, stored.alpha, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(rows.objective, stored.objective, rtol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.offset:g}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["dense", "csr"])
def test_restricted_rows_are_the_entries_of_K_over_those_samples(X, kernel, dtype, form, monkeypatch):
    """K over a sub-problem's samples (a one-vs-one pair) as rows on demand: the matching
    entries of K, its diagonal and its products, rows idx.size long."""
    data = as_input(X, form, monkeypatch)
    full = KernelRows(data, kernel, dtype=dtype, block_rows=3)
    idx = np.flatnonzero(np.random.default_rng(4).random(X.shape[0]) < 0.45)
    sub = full.restricted(idx)
    K = numpy_gram(X, kernel, dtype=np.float64)[np.ix_(idx, idx)]
    assert sub.n == idx.size and sub.dtype == full.dtype
    rows = sub.rows(IDX[IDX < idx.size])
    assert rows.shape == (np.sum(IDX < idx.size), idx.size)
    np.testing.assert_allclose(rows, K[IDX[IDX < idx.size]], **TOLERANCE[dtype])
    # the parent's rows at those columns: the same values, X being shared as prepared there
    np.testing.assert_allclose(sub.rows(np.arange(idx.size)), full.rows(idx)[:, idx],
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(sub.diagonal(), full.diagonal()[idx])
    V = np.random.default_rng(5).normal(size=(idx.size, 2))
    np.testing.assert_allclose(sub.matmul_precise(V), K @ V, rtol=1e-5, atol=1e-4)
    assert sub.nonnegative == full.nonnegative
    assert sub.rows_computed == idx.size + np.sum(IDX < idx.size)  # counted on its own


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.offset:g}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["dense", "csr"])
def test_cross_products_are_the_block_of_K_between_two_sample_sets(X, kernel, dtype, form, monkeypatch):
    """K[rows][:, cols] @ V alone (a fold's decision values at its held-out samples from its
    support vectors): the reference block's product, the stored rows' own values, whether
    the sets overlap or not."""
    data = as_input(X, form, monkeypatch)
    op = KernelRows(data, kernel, dtype=dtype, block_rows=4, n_threads=2)
    K = kernel.block_reference(X)
    rng = np.random.default_rng(6)
    cols = np.flatnonzero(rng.random(X.shape[0]) < 0.5)
    held = np.setdiff1d(np.arange(X.shape[0]), cols)
    V = rng.normal(size=(cols.size, 3))
    for rows in (held, IDX):  # disjoint; unsorted with repeats and shared samples
        got = op.cross_matmul(rows, cols, V)
        assert got.shape == (rows.size, 3) and got.dtype == np.float64
        np.testing.assert_allclose(got, K[np.ix_(rows, cols)] @ V, rtol=1e-5, atol=1e-4)
        # the operator's own rows (float32: rounded alike, sparse rows by another product)
        tight = dict(rtol=1e-12, atol=1e-9) if dtype == "float64" else dict(rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got, op.rows(rows)[:, cols] @ V, **tight)
    assert op.cross_matmul(held[:0], cols, V).shape == (0, 3)
    with pytest.raises(MuflowInputError, match="V must have shape"):
        op.cross_matmul(held, cols, V[:-1])


def test_laplacian_rows_into_scattered_slots_are_the_kernel_block():
    """A kernel not built on inner products (laplacian) has no column chunks: rows bound for
    scattered cache slots are computed as one panel each (the chunk loop used to be taken
    for float64 rows and failed)."""
    rng = np.random.default_rng(8)
    X = rng.standard_normal((300, 6))
    kernel = Kernel("laplacian", gamma=0.3)
    for threads in (1, 2):
        op = KernelRows(X, kernel, dtype="float64", n_threads=threads)
        data = np.zeros((20, 300))
        op.rows_into(np.array([5, 77, 200]), data, np.array([3, 10, 17]))
        np.testing.assert_allclose(data[[3, 10, 17]], kernel.block(X[[5, 77, 200]], X), rtol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.offset:g}")
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("form", ["dense", "csr", "mostly-zero"])
def test_a_working_sets_square_block_is_the_same_entries_by_any_blocks(X, mostly_zero_X, kernel,
                                                                         dtype, form, monkeypatch):
    """``square_entries(B)`` (the working set's K_BB, prepared once and computed a block of
    rows at a time): bit for bit the entries :meth:`entries_into` gives for the same rows,
    whatever the blocks, and within round-off of the whole block and of the rows' own panels
    (BLAS may round a row by the number of rows it is computed with: the solver cuts K_BB
    into blocks of a fixed size, :data:`muflow.solvers.working_set.ENTRY_BLOCK`)."""
    X = mostly_zero_X if form == "mostly-zero" else X
    op = KernelRows(as_input(X, "dense" if form == "mostly-zero" else form, monkeypatch), kernel,
                    dtype=dtype, block_rows=3)
    if form == "mostly-zero" and dtype == "float32" and kernel.name != "laplacian":
        assert op.source.csr is not None  # the sparse-row product path
    B = np.random.default_rng(9).permutation(X.shape[0])[:37]  # unsorted, as WSS 2 orders it
    whole = op.entries_into(B, B, np.empty((B.size, B.size), dtype=op.dtype))
    part = op.square_entries(B)
    for edges in ([0, 37], [0, 5, 16, 30, 37]):
        got = np.full((B.size, B.size), np.nan, dtype=op.dtype)
        for r0, r1 in zip(edges[:-1], edges[1:]):
            part(r0, r1, got[r0:r1])
            same = op.entries_into(B[r0:r1], B, np.empty((r1 - r0, B.size), dtype=op.dtype))
            np.testing.assert_array_equal(got[r0:r1], same)
        np.testing.assert_allclose(got, whole, rtol=1e-6 if dtype == "float32" else 1e-14,
                                   atol=1e-6 if dtype == "float32" else 1e-13)
    np.testing.assert_allclose(whole, op.rows_native(B)[:, B], **TOLERANCE[dtype])
    if op.source.csr is not None and kernel.name == "rbf":
        # sparse rbf rows and K_BB take the same compiled call: the same entries to the bit
        np.testing.assert_array_equal(whole, op.rows_native(B)[:, B])
    symmetric = getattr(part, "symmetric", None)
    assert (symmetric is not None) == (op.source.csr is not None and kernel.name == "rbf"
                                       and dtype == "float32")
    if symmetric is not None:
        # exactly symmetric: each block's columns from its own diagonal on, the rest
        # mirrored, the blocks taken by 1 to 3 threads side by side
        from muflow.thread_pool import run_on_threads

        for threads, block in ((1, 37), (1, 5), (2, 5), (3, 4), (3, 16)):
            got = np.full((B.size, B.size), np.nan, dtype=op.dtype)
            deal = symmetric(got, block)
            run_on_threads(lambda worker: deal(), threads)
            np.testing.assert_array_equal(got, whole)


def test_columns_from_the_csr_are_the_dense_rows_transposed(mostly_zero_X):
    """K_BB's columns X[B].T built from X's CSR (``csr_columns_T``) equal the dense rows
    gathered and transposed, for columns unsorted, repeated and of empty rows."""
    from muflow import _kernel_compiled as kc

    X = np.asarray(mostly_zero_X, dtype=np.float32).copy()
    X[3] = 0.0
    csr = kc.dense_to_csr(X)
    cols = np.array([7, 3, 0, 7, X.shape[0] - 1, 12], dtype=np.int64)
    out = np.full((X.shape[1], cols.size), np.nan, dtype=np.float32)
    kc.csr_columns_T(*csr, cols, out)
    np.testing.assert_array_equal(out, X[cols].T)
