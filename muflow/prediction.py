"""Decision values of a fitted kernel SVM: every binary problem from one block of K(X, SV).

The decision of binary problem q at x is ``f_q(x) = sum_s W[s, q] K(x, s) + b_q`` over the
support vectors s (libsvm's decision function, Chang & Lin 2011, eq. 14); one-vs-one pairs
share the support vectors of their classes, so one block K(X_block, SV) serves every
column of W at once (:func:`muflow.multiclass.pair_coefficients` lays the pairs out as
columns, zero outside the pair).

:class:`Predictor` holds what prediction reads, prepared once per fitted (or loaded) model:

- the support vectors merged where identical (their coefficients summed: K(x, s) is the
  same for both; a8a's 8,261 support vectors are 6,650 distinct rows);
- dense, shifted by :func:`muflow.kernels.rbf_center` (distances do not change; float32's
  rounding of the products shrinks with the norms), transposed once (d, n_SV) C-ordered in
  float64 and, where allowed, float32, with their squared norms in float64;
- for the linear kernel, the primal weights ``SV' W`` instead (one product of X by (d, q));
- the precision rule (:meth:`Predictor.choose_dtype`).

A block of rows then costs one GEMM (sgemm or dgemm), the kernel's element-wise finish
and one float64 product with W. For rbf in float32 the finish and the product are one
compiled pass over each row while it is in cache (:func:`muflow._kernel_compiled.rbf_decisions`,
the rounding of :func:`~muflow._kernel_compiled.finish_rbf`); otherwise the block is
:meth:`muflow.kernels.Kernel.block_into`'s, the code path of every block of K in muflow.
The blocks of a large X are shared among the process's threads (its budget,
:func:`muflow.threads.thread_budget`), each with one BLAS thread, so that the finish runs
on every core too (BLAS threads alone leave it on one).

Sparse data
-----------
Sparse support vectors are held dense, and sparse X densified a block at a time for the
GEMM, only where that is the cheaper product (:func:`keeps_sparse`): a dense block costs
``d * n_SV`` multiply-adds per row whatever the zeros, SciPy's sparse x sparse' product
about ``sum_j c_j^2 / n_SV`` per row like a support vector (``c_j``: the support vectors
using feature j), each of them :data:`SPARSE_PRODUCT_COST` times dearer. At a8a's density
(11 % non-zeros, 123 features) the GEMM wins; with thousands of features and a few dozen
non-zeros per row the sparse product does, and nothing of size ``d`` per row or
``d * n_SV`` is ever allocated. Support vectors whose dense form would exceed
:data:`DENSE_SUPPORT_BYTES` stay sparse either way. Sparse support vectors take SciPy's
product with X's rows as they come (sparse, or a dense block made sparse), in float64.

Precision rule
--------------
float32 kernel values summed in float64 keep the decision values within 1e-5 of a float64
evaluation, relative to the largest decision value of each problem (:data:`FLOAT32_RTOL`;
the test sets' figures are in docs/benchmarks.md, "Prediction"). W is applied in float64
because summing in float32 as well adds the rounding of every term of the sum, which broke
the promise on a8a. That is checked, not assumed: per model, the decisions at up to
:data:`PROBE_ROWS` of its own support vectors are computed both ways, and float32 is used
only if, for every problem, they agree within :data:`FLOAT32_CHECK_RTOL` of the largest
(half the promise, leaving the other half for rows other than the probe's); otherwise, and
for models of fewer than :data:`FLOAT32_MIN_SUPPORT` support vectors (where float64 costs
little), the model predicts in float64. Rows farther from the centre than the farthest
support vector (float32's error in a product grows with the norms) are recomputed in
float64.

Only NumPy, SciPy and threadpoolctl are imported here; a float32 block's finish is
compiled (:mod:`muflow._kernel_compiled`, loaded at the first float32 block; ``muflow.load``
has loaded numba already).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from muflow.threads import blas_single_threaded, run_on_threads, thread_budget
from muflow.kernels import Kernel, rbf_center

#: Kernel values per block of rows, in the block's dtype: a few hundred rows, which stay in
#: cache between the GEMM, the finish and the product with W (a block of a thousand rows
#: or more leaves the cache before the finish reads it).
PREDICT_BLOCK_BYTES = 8 * 2**20

#: A block whose product takes at most this many multiply-adds runs on one BLAS thread:
#: OpenBLAS's second thread saves microseconds on an idle machine but, woken for so small a
#: product, waits for a core whenever another process holds one.
SMALL_PRODUCT = 2**24

#: Promised agreement of float32 decisions with float64 ones, relative to the largest.
FLOAT32_RTOL = 1e-5
#: Agreement the per-model check demands before float32 is used: half the promise, so that
#: rows other than the probe's, whose rounding differs, stay within it (float32's rounding
#: of each kernel value adds up over the support vectors)
FLOAT32_CHECK_RTOL = 5e-6
#: Support vectors of the probe that decides the precision (evenly spaced).
PROBE_ROWS = 256
#: Models with fewer support vectors predict in float64.
FLOAT32_MIN_SUPPORT = 1024
#: Support vectors are held dense (d x n_SV, float64 and float32) up to this many bytes.
DENSE_SUPPORT_BYTES = 512 * 2**20
#: Densified rows of sparse X (float64, d per row) per block, besides the kernel values.
PREDICT_ROWS_BYTES = 32 * 2**20
#: One multiply-add of SciPy's sparse x sparse' product (single-threaded, an index lookup
#: and a scatter each) weighed against one of a dense GEMM block (vectorised, on every
#: core): the ratio :func:`keeps_sparse` compares their counts by; docs/prediction.md has
#: the runs that set it.
SPARSE_PRODUCT_COST = 250

#: The kernels a :class:`Predictor` serves: those built on inner products.
PREDICTOR_KERNELS = ("linear", "poly", "rbf", "sigmoid")


def _sq_rows(A) -> np.ndarray:
    """Squared row norms in float64 of A's values (whatever A's dtype)."""
    A = np.asarray(A, dtype=np.float64)
    return np.einsum("ij,ij->i", A, A)


def keeps_sparse(S) -> bool:
    """Whether sparse support vectors S (n_SV, d) predict cheaper sparse than dense.

    A row x like a support vector meets, through SciPy's sparse product, the ``c_j``
    support vectors that use each of its features j: ``sum_j c_j^2 / n_SV`` multiply-adds
    per row on average over the support vectors' own rows (common features count as often
    as they occur). The dense GEMM takes ``d * n_SV`` per row. Sparse when
    ``SPARSE_PRODUCT_COST * sum_j c_j^2 / n_SV < d * n_SV``, or when the dense form would
    exceed :data:`DENSE_SUPPORT_BYTES`.
    """
    n_sv, d = S.shape
    if 8 * n_sv * d > DENSE_SUPPORT_BYTES:
        return True
    S = sp.csr_matrix(S)
    counts = np.bincount(S.indices[S.data != 0], minlength=d).astype(np.float64)
    return SPARSE_PRODUCT_COST * float(counts @ counts) < float(d) * n_sv * n_sv


def _merge_identical(S, W):
    """Identical rows of S merged, their rows of W summed: (S_unique, W_merged)."""
    if S.shape[0] < 2:
        return S, W
    rows = np.ascontiguousarray(S).view(np.dtype((np.void, S.dtype.itemsize * S.shape[1])))
    _, first, inverse = np.unique(rows.ravel(), return_index=True, return_inverse=True)
    if len(first) == S.shape[0]:
        return S, W
    merged = np.zeros((len(first), W.shape[1]))
    np.add.at(merged, inverse.ravel(), W)
    return S[first], merged


@dataclass
class Predictor:
    """A fitted model's support vectors and coefficients, prepared for K(X, SV) @ W.

    Build it with :meth:`prepare`; :meth:`decision` gives ``sum_s W[s, q] K(x, s)`` for
    every row and problem (the caller adds the intercepts).

    Attributes
    ----------
    kernel : Kernel
    weights : ndarray of shape (n_SV_distinct, n_problems), float64
    center : ndarray of shape (n_features,) or None
        Subtracted from X and the support vectors before the product.
    support_T : dict
        ``{dtype: (d, n_SV) C-ordered array}`` of the shifted support vectors, float64 and
        (when chosen) float32; None when they stay sparse.
    sq_support : dict
        ``{dtype: (n_SV,) float64}``: squared norms of the shifted support vectors as held
        in that dtype (summed in float64); the sparse support vectors' under float64.
    support_sparse : csr_matrix or None
        The support vectors when they stay sparse (:func:`keeps_sparse`).
    support_sparse_T : csr_matrix or None
        Their transpose (d, n_SV), CSR: the right operand of every sparse block.
    primal : ndarray of shape (n_features, n_problems) or None
        ``SV' W`` for the linear kernel.
    dtype : numpy dtype
        float32 or float64: the precision of the kernel blocks (:meth:`choose_dtype`).
    sq_limit : float
        Rows whose shifted squared norm exceeds it are computed in float64.
    weights_T : ndarray of shape (n_problems, n_SV_distinct)
        ``weights`` transposed, C-ordered: each problem's coefficients contiguous.
    """

    kernel: Kernel
    weights: np.ndarray
    center: np.ndarray | None = None
    support_T: dict | None = None
    sq_support: dict | None = None
    support_sparse: sp.csr_matrix | None = None
    support_sparse_T: sp.csr_matrix | None = field(default=None, repr=False)
    primal: np.ndarray | None = None
    dtype: np.dtype = np.dtype(np.float64)
    sq_limit: float = np.inf
    weights_T: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        self.weights_T = np.ascontiguousarray(self.weights.T)

    @classmethod
    def prepare(cls, kernel: Kernel, support_vectors, weights, *, dtype="auto") -> "Predictor":
        """Prepare a model's support vectors (n_SV, d) and coefficients (n_SV, n_problems).

        ``dtype``: "auto" (the rule of :meth:`choose_dtype`), "float32" or "float64".
        """
        if kernel.name not in PREDICTOR_KERNELS:
            raise ValueError(f"Predictor serves the kernels {PREDICTOR_KERNELS}, not {kernel.name!r}")
        W = np.asarray(weights, dtype=np.float64)
        if kernel.name == "linear":
            primal = np.asarray(support_vectors.T @ W, dtype=np.float64)
            return cls(kernel, W, primal=np.ascontiguousarray(primal))
        n_sv, d = support_vectors.shape
        if sp.issparse(support_vectors) and keeps_sparse(support_vectors):
            S = sp.csr_matrix(support_vectors, dtype=np.float64, copy=True)
            S.sum_duplicates()  # canonical, in a copy: the model's arrays stay as they are
            return cls(kernel, W, support_sparse=S, support_sparse_T=S.T.tocsr(),
                       sq_support={np.dtype(np.float64): _sq_rows_sparse(S)})
        S = support_vectors.toarray() if sp.issparse(support_vectors) else support_vectors
        S, W = _merge_identical(np.asarray(S, dtype=np.float64), W)
        center = rbf_center(S) if kernel.name == "rbf" else None
        shifted = S - center if center is not None else S
        ST64 = np.ascontiguousarray(shifted.T)
        sq64 = _sq_rows(shifted)
        predictor = cls(kernel, W, center=center, support_T={np.dtype(np.float64): ST64},
                        sq_support={np.dtype(np.float64): sq64}, sq_limit=float(sq64.max(initial=0.0)))
        if dtype == "auto":
            # a small product on one BLAS thread: OpenBLAS's threads, idle after a product
            # of theirs, would spin on the cores that the blocks' threads then use
            with blas_single_threaded():
                dtype = predictor.choose_dtype(shifted)
        predictor.use(dtype)
        return predictor

    def use(self, dtype) -> None:
        """Compute the kernel blocks in ``dtype`` (float32 or float64) from now on."""
        dtype = np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        if dtype == np.float32 and not self.support_T:
            raise ValueError("float32 needs dense support vectors (a linear kernel or sparse "
                             "support vectors predict in float64)")
        if dtype == np.float32 and dtype not in self.support_T:
            ST64 = self.support_T[np.dtype(np.float64)]
            ST32 = ST64.astype(np.float32)
            self.support_T[np.dtype(np.float32)] = ST32
            # the norms of the values sgemm multiplies, summed in float64
            self.sq_support[np.dtype(np.float32)] = _sq_rows(ST32.T)
        self.dtype = dtype

    def choose_dtype(self, shifted_support) -> np.dtype:
        """float32 when the model has at least :data:`FLOAT32_MIN_SUPPORT` support vectors
        and its decisions at up to :data:`PROBE_ROWS` of them (evenly spaced) computed with
        float32 kernel values agree with float64 ones within :data:`FLOAT32_CHECK_RTOL` of
        the largest; float64 otherwise."""
        n_sv = shifted_support.shape[0]
        if n_sv < FLOAT32_MIN_SUPPORT:
            return np.dtype(np.float64)
        probe = shifted_support[np.linspace(0, n_sv - 1, min(PROBE_ROWS, n_sv)).astype(np.intp)]
        exact = self._shifted_block(probe, np.dtype(np.float64))
        self.use(np.float32)
        rounded = self._shifted_block(probe, np.dtype(np.float32))
        scale = np.abs(exact).max(axis=0)
        error = np.abs(rounded - exact).max(axis=0)
        return np.dtype(np.float32 if np.all(error <= FLOAT32_CHECK_RTOL * scale) else np.float64)

    # -- evaluation -------------------------------------------------------------------
    def block_rows(self, n_features=0) -> int:
        """Rows per block: their kernel values within :data:`PREDICT_BLOCK_BYTES` and, with
        dense support vectors, their dense rows of ``n_features`` within
        :data:`PREDICT_ROWS_BYTES`."""
        n_sv = len(self.weights)
        rows = PREDICT_BLOCK_BYTES // (self.dtype.itemsize * max(n_sv, 1))
        if self.support_sparse is None and n_features:
            rows = min(rows, PREDICT_ROWS_BYTES // (8 * n_features))
        return max(1, rows)

    def decision(self, X) -> np.ndarray:
        """``K(X, SV) @ W``, shape (n_samples, n_problems), float64; X validated (float64
        ndarray or CSR, n_features columns, finite)."""
        if self.primal is not None:
            scores = np.asarray(X @ self.primal, dtype=np.float64)
            if self.kernel.offset:
                scores += self.kernel.offset * self.weights.sum(axis=0)
            return scores
        n = X.shape[0]
        step = self.block_rows(X.shape[1])
        starts = range(0, n, step)
        scores = np.empty((n, self.weights.shape[1]))
        width = X.shape[1] if self.support_sparse is None else 1  # sparse: no d x n_SV GEMM
        small = n * len(self.weights) * width <= SMALL_PRODUCT
        budget = 1 if small else thread_budget()  # the budget costs a one-row call its time
        threads = min(len(starts), budget)
        if threads < 2:
            # one block: BLAS's threads where the budget has several
            with blas_single_threaded() if budget == 1 else contextlib.nullcontext():
                for start in starts:
                    self._decision_block(X, start, step, scores)
            return scores
        # one block per thread, each on one BLAS thread: the GEMM, the finish and the product
        # with W all run side by side (BLAS threads alone leave the finish on one core)
        def blocks(k):
            for start in starts[k::threads]:
                self._decision_block(X, start, step, scores)

        with blas_single_threaded():
            run_on_threads(blocks, threads)
        return scores

    def _decision_block(self, X, start, step, scores) -> None:
        """Rows ``start:start + step`` of X into the same rows of ``scores``."""
        rows = X[start:start + step]
        if self.support_sparse is not None:
            scores[start:start + step] = self._sparse_block(rows)
            return
        rows = rows.toarray() if sp.issparse(rows) else np.asarray(rows, dtype=np.float64)
        if self.center is not None:
            rows = rows - self.center
        scores[start:start + step] = self._shifted_block(rows, self.dtype)

    def _shifted_block(self, A, dtype) -> np.ndarray:
        """``K(A, SV) @ W`` for dense rows A already shifted by :attr:`center`; float32 rows
        beyond :attr:`sq_limit` are redone in float64."""
        ST = self.support_T[dtype]
        A_cast = np.asarray(A, dtype=dtype)
        sq_A = _sq_rows(A_cast)
        K = np.empty((A.shape[0], ST.shape[1]), dtype=dtype)
        used = np.flatnonzero(A_cast.any(axis=0))
        if 2 * len(used) <= A_cast.shape[1]:
            # few rows of sparse data (one a8a row: 14 of 123 features): the product over
            # the features they use reads that share of the support vectors
            A_cast, ST = np.ascontiguousarray(A_cast[:, used]), ST[used]
        if self.kernel.name == "rbf":
            # the finish and the sum against W fused, row by row in cache (no float64 copy
            # of the block, no second pass over it)
            from muflow import _kernel_compiled as kc

            np.matmul(A_cast, ST, out=K)
            scores = np.empty((A.shape[0], self.weights.shape[1]))
            fused = kc.rbf_decisions if dtype == np.float32 else kc.rbf_decisions64
            fused(K, sq_A, self.sq_support[dtype], float(self.kernel.gamma),
                  dtype.type(self.kernel.offset), self.weights_T, scores)
        else:
            self.kernel.block_into(A_cast, None, K, BT=ST, sq_A=sq_A, sq_B=self.sq_support[dtype])
            scores = K.astype(np.float64, copy=False) @ self.weights
        if dtype == np.float32:
            far = np.flatnonzero(_sq_rows(A) > self.sq_limit)
            if far.size:
                scores[far] = self._shifted_block(np.asarray(A)[far], np.dtype(np.float64))
        return scores

    def _sparse_block(self, A) -> np.ndarray:
        """``K(A, SV) @ W`` with the support vectors sparse (float64, SciPy's product of the
        rows by the support vectors transposed once, then the kernel's finish)."""
        A = sp.csr_matrix(A, dtype=np.float64)
        K = (A @ self.support_sparse_T).toarray()
        self.kernel.block_into(A, None, K, sq_A=_sq_rows_sparse(A),
                               sq_B=self.sq_support[np.dtype(np.float64)], product_ready=True)
        return K @ self.weights


def blocked_decision(X, block, W, n_columns) -> np.ndarray:
    """``block(X_rows) @ W`` a block of rows at a time, shape (n_samples, n_problems).

    For the kernels a :class:`Predictor` does not serve (callable, precomputed, laplacian):
    ``block(rows)`` returns K(rows, SV) as float64 from rows evaluated against
    ``n_columns`` columns, each block within :data:`PREDICT_BLOCK_BYTES`.
    """
    n = X.shape[0] if hasattr(X, "shape") else len(X)  # a callable kernel takes anything
    scores = np.empty((n, W.shape[1]))
    step = max(1, PREDICT_BLOCK_BYTES // (8 * max(n_columns, 1)))
    for start in range(0, n, step):
        scores[start:start + step] = block(X[start:start + step]) @ W
    return scores


def _sq_rows_sparse(A) -> np.ndarray:
    """Squared row norms of a sparse matrix, float64."""
    return np.asarray(A.multiply(A).sum(axis=1), dtype=np.float64).ravel()
