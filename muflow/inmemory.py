"""K(X, X) in this process's memory, built panel by panel on threads.

The single-machine path: :class:`muflow.SVC` without a cluster, the sweeps and the
benchmarks hold K as one NumPy array (:class:`muflow.operators.DenseGram`). The blocked,
stored and distributed path is :mod:`muflow.gram`; both evaluate blocks with
:meth:`muflow.kernels.Kernel.block_into`, so the numbers are the same.

Notes
-----
Work: n^2 kernel values, one BLAS product per row panel in K's dtype and one fused
element-wise pass. Memory: K plus X twice in K's dtype (:class:`RowSource`). The panel
machinery (:func:`row_source`, :class:`Columns`, :func:`run_panels`) also serves rows of K
computed on demand (:class:`muflow.kernel_rows.KernelRows`). On virtual machines mapping
fresh memory is a sizeable part of the cost (a page fault per 4 KiB page), which is why
``out`` can be reused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel, _row_sq_norms, integer_center, rbf_center
from muflow import threads as _threads
from muflow.thread_pool import begin_dealing
from muflow.threads import blas_single_threaded, threads_for

#: Sparse data with at most this many features are densified once before the build: a
#: dense BLAS product per tile is much faster than a sparse-sparse product whose result is
#: dense anyway (a8a: 123 binary features).
DENSIFY_MAX_FEATURES = 4096


def block_input(X):
    """X as the tiles want it: small-feature sparse data densified, dense as float64."""
    if sp.issparse(X):
        if X.shape[1] <= DENSIFY_MAX_FEATURES:
            return np.asarray(X.toarray(), dtype=np.float64)
        return sp.csr_matrix(X, dtype=np.float64)
    return np.ascontiguousarray(np.asarray(X, dtype=np.float64))


#: K in float64 up to this many samples (128 MiB) and in float32 above, which halves the
#: memory to map and the bytes every row read streams; the subset solvers' certificates
#: sum in float64 either way (:meth:`muflow.operators.DenseGram.matmul_precise`).
FLOAT64_GRAM_MAX_SAMPLES = 4096
GRAM_DTYPES = ("auto", "float64", "float32")


def gram_dtype(n: int, requested: str = "auto") -> np.dtype:
    """The dtype of an in-memory K of n samples: ``requested``, or by size for "auto"."""
    if requested not in GRAM_DTYPES:
        raise MuflowInputError(f"gram_dtype must be one of {', '.join(GRAM_DTYPES)}, got {requested!r}")
    if requested == "auto":
        return np.dtype(np.float64 if n <= FLOAT64_GRAM_MAX_SAMPLES else np.float32)
    return np.dtype(requested)


#: Arrays of at least this many bytes are mapped with their pages populated up front.
POPULATE_MIN_BYTES = 64 * 2**20


def empty_populated(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose memory is mapped in one call (Linux ``MAP_POPULATE``).

    A fresh n x n K is otherwise mapped page by page as it is first written: one page fault
    per 4 KiB, each a trap into the hypervisor on a virtual machine; populating the mapping
    up front maps it in one call at a fraction of that cost. Falls back to ``np.empty``
    where the flag does not exist or the mapping fails.
    """
    import mmap

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    flag = getattr(mmap, "MAP_POPULATE", None)
    if nbytes < POPULATE_MIN_BYTES or flag is None:
        return np.empty(shape, dtype)
    try:
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | flag)
    except (OSError, ValueError):
        return np.empty(shape, dtype)
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


@dataclass(frozen=True)
class RowSource:
    """X prepared once for blocks ``K(X[rows], X[columns])`` in one dtype.

    Attributes
    ----------
    X : ndarray of shape (n, n_features) in ``dtype``, C-ordered, or CSR (float64)
        The rows multiplied. Dense data of an rbf kernel in float32 are shifted by
        :func:`muflow.kernels.rbf_center` where that shrinks the norms whose cancellation
        float32 pays for (distances, hence K, are unchanged).
    XT : ndarray of shape (n_features, n), C-ordered, or None for CSR
        ``X.T`` laid out for the BLAS product, made once.
    sq : ndarray of shape (n,), float64
        Squared row norms of the values multiplied (rbf; the exact diagonal).
    dtype : numpy dtype
        The product's dtype: float32 (sgemm) or float64 (dgemm).
    """

    X: object
    XT: np.ndarray | None
    sq: np.ndarray
    dtype: np.dtype
    csr: tuple | None = None
    center: np.ndarray | None = None

    def prepare(self, A) -> tuple[np.ndarray, np.ndarray]:
        """Rows A (not necessarily of X) as X was prepared: shifted by the same center and
        cast to the product's dtype; with their squared norms in float64."""
        A = np.asarray(A.toarray() if sp.issparse(A) else A, dtype=np.float64)
        if self.center is not None:
            A = A - self.center
        A = np.ascontiguousarray(A, dtype=self.dtype)
        return A, np.einsum("ij,ij->i", A, A, dtype=np.float64)

    def subset(self, idx) -> "RowSource":
        """The samples ``idx`` alone, prepared as here (the same shift and the same values in
        the product's dtype, so their blocks are the matching entries of this source's):
        the source of a sub-problem's rows (:meth:`muflow.kernel_rows.KernelRows.restricted`)."""
        idx = np.asarray(idx, dtype=np.int64)
        X = self.X[idx]
        csr = None
        if self.csr is not None:
            from muflow import _kernel_compiled as kc

            csr = kc.dense_to_csr(X)
        XT = None if self.XT is None else np.ascontiguousarray(X.T)
        return RowSource(X, XT, self.sq[idx].copy(), self.dtype, csr, self.center)

    def product_into(self, rows, BT, out, c0: int = 0, c1: int | None = None, A=None) -> np.ndarray:
        """``out <- X[rows] @ BT[:, c0:c1]`` (float32 or float64, C-ordered ``out``).

        ``BT`` is ``XT`` or its columns of a subset; ``A`` is ``X[rows]`` when the caller
        has gathered it already. Rows of a mostly-zero float32 X (``csr``, see
        :data:`SPARSE_ROWS_MAX_DENSITY`) are multiplied as sparse rows
        (:func:`muflow._kernel_compiled.sparse_rows_product`), the others by one BLAS call.
        """
        c1 = BT.shape[1] if c1 is None else c1
        if self.csr is not None:
            from muflow import _kernel_compiled as kc

            index = np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows
            kc.sparse_rows_product(*self.csr, np.ascontiguousarray(index, dtype=np.int64), BT,
                                   int(c0), int(c1), out)
        else:
            np.matmul(self.X[rows] if A is None else A, BT[:, c0:c1], out=out)
        return out

    def sparse_rbf_tiles(self, kernel: Kernel, rows, sq_rows, same_rows, data, slots, edges,
                         tiles):
        """``deal()``, which writes ``data[slots[r], c0:c1] <- K(X[rows[r]], X[c0:c1])`` for
        rbf over the sparse rows (``csr``), tile by tile: a tile is a row group g of the
        batch (rows ``edges[g]`` to ``edges[g + 1]``) against a range of columns, one row
        ``(g, c0, c1)`` of ``tiles``. Each thread that calls ``deal`` runs one compiled
        loop (:func:`muflow._kernel_compiled.sparse_rbf_tiles`) that takes the next tile
        until none is left, without the GIL between tiles. The values are those of
        :meth:`product_into` followed by ``kernel.block_into``'s finish and the copy into
        ``data``; ``same_rows[r] = c >= 0`` where rows[r] is column c. The arguments are
        prepared once here for every tile."""
        from muflow import _kernel_compiled as kc

        args = (*self.sparse_rbf_args(kernel, rows, sq_rows, same_rows), data,
                *(np.ascontiguousarray(a, dtype=np.int64) for a in (slots, edges, tiles)),
                np.zeros(1, dtype=np.int64))

        def deal() -> None:
            kc.sparse_rbf_tiles(*args)

        return deal

    def sparse_rbf_blocks(self, kernel: Kernel, rows, same_rows, *, XT=None, sq=None):
        """``block(r0, r1, out)``, which writes ``out[r - r0] <- K(X[rows[r]], the columns)``
        for r0 <= r < r1 by the rows' compiled call (the same values), the rows' arguments
        prepared once here for every block: a block holds the GIL for its call alone.
        ``same_rows`` as there; ``XT`` and ``sq``, when given, are the columns' X^T and
        squared norms in place of all of X's (the columns of a subset, such as a working
        set's: :mod:`muflow.kernel_entries`)."""
        from muflow import _kernel_compiled as kc

        (indptr, indices, values, rows, XT, sq_rows, sq, gamma, offset, same,
         diag) = self.sparse_rbf_args(kernel, rows, self.sq[rows], same_rows, XT, sq)
        slots = np.arange(rows.size, dtype=np.int64)

        def block(r0: int, r1: int, out) -> None:
            kc.sparse_rbf_rows_into(indptr, indices, values, rows[r0:r1], XT, sq_rows[r0:r1],
                                    sq, gamma, offset, same[r0:r1], diag[r0:r1], out,
                                    slots[: r1 - r0], 0, XT.shape[1])

        return block

    def sparse_rbf_args(self, kernel: Kernel, rows, sq_rows, same_rows, XT=None, sq=None
                        ) -> tuple:
        """The leading arguments of :func:`muflow._kernel_compiled.sparse_rbf_rows_into`
        (and of the loops built on it) in their types: ``(indptr, indices, values, rows, XT,
        sq_rows, sq, gamma, offset, same_rows, diag)``; X^T and the norms of all of X where
        ``XT`` and ``sq`` are None, else those of the columns of a subset."""
        sq_rows = np.ascontiguousarray(sq_rows, dtype=np.float64)
        return (*self.csr, np.ascontiguousarray(rows, dtype=np.int64),
                self.XT if XT is None else XT, sq_rows, self.sq if sq is None else sq,
                float(kernel.gamma), np.float32(kernel.offset),
                np.ascontiguousarray(same_rows, dtype=np.int64),
                kernel.diagonal_from_sq(sq_rows).astype(np.float32))

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def nbytes(self) -> int:
        if sp.issparse(self.X):
            return int(self.X.data.nbytes + self.X.indices.nbytes + self.X.indptr.nbytes + self.sq.nbytes)
        return int(self.X.nbytes + self.XT.nbytes + self.sq.nbytes)


#: Kernels evaluated from one product A B' (in the Gram's dtype); the others are read from
#: float64 data by :meth:`Kernel.block_reference`.
PRODUCT_KERNELS = ("linear", "poly", "rbf", "sigmoid")


def row_source(X, kernel: Kernel, dtype="float32") -> RowSource:
    """Prepare X for panels of ``K(X, X)`` in ``dtype`` (see :class:`RowSource`)."""
    dtype = np.dtype(dtype)
    direct = (_sparse_float32_rows(X, kernel)
              if dtype == np.float32 and kernel.name in PRODUCT_KERNELS else None)
    if direct is not None:
        Xc, center = direct
    else:
        Xb = block_input(X)
        if sp.issparse(Xb):
            return RowSource(Xb, None, _row_sq_norms(Xb), dtype)
        if kernel.name not in PRODUCT_KERNELS:
            dtype = np.dtype(np.float64)
        center = rbf_center(Xb) if kernel.name == "rbf" and dtype == np.float32 else None
        if center is not None:
            Xb = Xb - center
        Xc = np.ascontiguousarray(Xb, dtype=dtype)
    sq = np.einsum("ij,ij->i", Xc, Xc, dtype=np.float64)
    csr = None
    if dtype == np.float32 and np.count_nonzero(Xc) <= SPARSE_ROWS_MAX_DENSITY * Xc.size:
        from muflow import _kernel_compiled as kc

        csr = kc.dense_to_csr(Xc)
    return RowSource(Xc, np.ascontiguousarray(Xc.T), sq, dtype, csr, center)


#: Integers up to this size are exact in float32, and so are their differences from
#: rbf's integer shift.
_FLOAT32_EXACT_INTEGERS = 2**24


def _sparse_float32_rows(X, kernel: Kernel):
    """``(rows, center)`` for a product kernel's float32 source, made from sparse X of
    few features without its float64 dense copies (three arrays of n x d doubles, whose
    fresh pages cost more than the work); None where that would change a value.

    The float64 route densifies X, shifts it by :func:`muflow.kernels.rbf_center` and
    casts to float32. Here the float32 rows are X's values cast once and shifted in
    float32, which gives the same numbers when no shift is taken (kernels other than
    rbf: each value rounded once either way) or when the data are integers below
    2**24 (rbf's shift is then the rounded mean, an integer, computed from the same
    exact column sums, and every difference is exact). Other data take the float64 route.
    """
    if not sp.issparse(X) or X.shape[1] > DENSIFY_MAX_FEATURES or X.shape[0] == 0:
        return None
    X = sp.csr_matrix(X, dtype=np.float64)
    center = None
    if kernel.name == "rbf":
        values = X.data
        if values.size and (not np.array_equal(values, np.rint(values))
                            or np.abs(values).max() >= _FLOAT32_EXACT_INTEGERS):
            return None
        center = integer_center(np.asarray(X.sum(axis=0), dtype=np.float64).ravel() / X.shape[0])
    rows = X.astype(np.float32).toarray()
    if center is not None:
        rows -= center.astype(np.float32)
    return np.ascontiguousarray(rows), center


#: float32 rows of X (after rbf's shift: binary features become sparser still) with at most
#: this share of non-zero entries are multiplied as sparse rows against the dense X^T
#: (:meth:`RowSource.product_into`): a sparse row costs in its non-zeros where sgemm costs
#: in all d features, the same values (a8a's data are integers, 8 % non-zero after the
#: shift); the two costs meet near 25 % (docs/benchmarks.md, "Kernel values").
SPARSE_ROWS_MAX_DENSITY = 0.2


class Columns:
    """The column side of the panels: all of X, or the samples ``cols`` only (a product
    ``K @ V`` needs the columns where V is non-zero, by symmetry of K).

    Attributes
    ----------
    m : int
        Columns of a panel.
    position : ndarray of shape (n,), int64, or None
        Column of each sample, -1 where it is not among ``cols`` (None: sample i is column i).
    """

    def __init__(self, source: RowSource, cols=None):
        self.source = source
        if cols is None:
            self.B, self.BT, self.sq, self.position = source.X, source.XT, source.sq, None
        else:
            cols = np.asarray(cols, dtype=np.int64)
            self.B = source.X[cols]
            self.BT = None if source.XT is None else np.ascontiguousarray(source.XT[:, cols])
            self.sq = source.sq[cols]
            self.position = np.full(source.n, -1, dtype=np.int64)
            self.position[cols] = np.arange(cols.size)
        self.m = self.B.shape[0]

    def panel_into(self, kernel: Kernel, rows, out) -> np.ndarray:
        """``K(X[rows], X[cols])`` into ``out`` (C-ordered, the source's dtype); ``rows`` a
        slice or an array of sample indices (repeats allowed). Every diagonal entry
        ``K(x_i, x_i)`` in the panel is written exactly (``same_rows``)."""
        source = self.source
        if isinstance(rows, slice):
            index = np.arange(rows.start, rows.stop)
        else:
            index = np.asarray(rows, dtype=np.int64)
        same = index if self.position is None else self.position[index]
        if source.csr is not None and out.dtype == np.float32 and out.flags.c_contiguous:
            source.product_into(index, self.BT, out)
            return kernel.block_into(None, None, out, sq_A=source.sq[rows], sq_B=self.sq,
                                     same_rows=same, product_ready=True)
        return kernel.block_into(source.X[rows], self.B, out, BT=self.BT, sq_A=source.sq[rows],
                                 sq_B=self.sq, same_rows=same)


# Thread and BLAS control live in muflow.threads; these names stay for the modules that
# import them from here.
_OneBlasThread = _threads._OneBlasThread
_blas_single_threaded = blas_single_threaded


#: A batch of fewer than ``PANELS_A_BATCH * block_rows`` rows is cut into this many panels
#: (:func:`run_panels`), so that a small batch spreads over the threads (a panel reads all
#: of the columns' data: smaller panels would read it more often).
PANELS_A_BATCH = 8


def run_panels(n_items: int, block_rows: int, work, *, n_threads: int | None = None) -> None:
    """Call ``work(p0, p1, worker)`` for consecutive panels ``[p0, p1)`` covering
    ``n_items`` rows on ``n_threads`` threads (default the process's budget,
    :func:`muflow.threads.thread_budget`), BLAS on one thread each.

    Panels have at most ``block_rows`` rows, fewer when that cuts a small batch into
    :data:`PANELS_A_BATCH` panels; they depend on ``n_items`` and ``block_rows`` alone,
    never on the threads, so that each value is computed by the same BLAS calls whatever
    the number of threads (BLAS rounds a row by the shape of the product it is computed
    in). Each thread takes the next panel when it is free (:func:`muflow.threads.deal`) and
    ``worker`` names the thread's scratch buffers. A single panel runs in the calling
    thread.
    """
    begin_panels(n_items, block_rows, work, n_threads=n_threads).join()


def begin_panels(n_items: int, block_rows: int, work, *, n_threads: int | None = None):
    """:func:`run_panels` begun on the other threads, the caller's share left for the
    :meth:`~muflow.thread_pool.Begun.join` that ends it (:func:`begin_held`)."""
    n_threads = threads_for(n_threads)
    block = max(1, min(int(block_rows), -(-n_items // PANELS_A_BATCH)))
    starts = list(range(0, n_items, block))

    def panel(k, worker):
        work(starts[k], min(starts[k] + block, n_items), worker)

    return begin_held(panel, len(starts), n_threads)


def begin_held(piece, n_pieces: int, n_workers: int):
    """:func:`muflow.thread_pool.begin_dealing` with BLAS held to one thread from now until
    the join has ended every piece."""
    hold = blas_single_threaded()
    hold.__enter__()
    try:
        return begin_dealing(piece, n_pieces, n_workers, after=lambda: hold.__exit__(None, None, None))
    except BaseException:
        hold.__exit__(None, None, None)
        raise


#: A tile of a row batch (:meth:`muflow.kernel_rows.KernelRows._begin_tiles`) is handed to
#: another thread only where the batch has this many entries a thread: below it, handing a
#: tile over costs more than computing it.
MIN_PIECE_ENTRIES = 32768


def contiguous_run(index: np.ndarray) -> int | None:
    """The first element of ``index`` when it is a run ``s, s+1, ..., s+k-1``, else None."""
    if index.size <= 1:
        return int(index[0]) if index.size else None
    s = int(index[0])
    return s if int(index[-1]) - s == index.size - 1 and np.all(np.diff(index) == 1) else None


#: Kernels whose whole float64 Gram is finished from one product ``np.dot(X, X.T)``
#: (see gram_rows_into).
USER_PRODUCT_KERNELS = ("linear", "poly", "sigmoid")


def numpy_gram(X, kernel: Kernel, dtype="float32", block_rows: int = 256, out=None,
               n_threads: int | None = None) -> np.ndarray:
    """K(X, X) into one in-memory array, row panel by row panel on ``n_threads`` threads.

    X is prepared once (:func:`row_source`: cast to ``dtype``, centred for rbf, ``X.T``
    made contiguous); each panel is one BLAS product in ``dtype`` (sgemm for float32, no
    syrk) written into K itself and one fused element-wise pass in place
    (:meth:`Kernel.block_into`), with BLAS held to one thread so that the panels' products
    and passes run side by side. :class:`muflow.kernel_rows.KernelRows` computes its rows
    the same way.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, n_features)
    kernel : Kernel
    dtype : {"float32", "float64"}, default="float32"
    block_rows : int, default=256
        Rows per panel.
    out : ndarray of shape (n, n), optional
        Written in place (and returned): a sweep reuses one buffer for every kernel
        setting, which spares the operating system from mapping fresh pages each time.
    n_threads : int, optional
        Default: the process's budget (:func:`muflow.threads.thread_budget`).

    Notes
    -----
    Memory: K (``n**2 * itemsize`` bytes, :func:`muflow.memory.check_gram_fits` refuses one
    that does not fit before allocating) plus X twice in ``dtype``.
    """
    dtype = np.dtype(dtype)
    n = X.shape[0]
    if out is None:
        from muflow.memory import check_gram_fits

        check_gram_fits(n, dtype)
        out = empty_populated((n, n), dtype)
    elif out.shape != (n, n) or not out.flags.c_contiguous:
        raise MuflowInputError(f"out must be a C-ordered ({n}, {n}) array, got {out.shape}")
    return gram_rows_into(X, kernel, out, block_rows=block_rows, n_threads=n_threads)


def gram_rows_into(X, kernel: Kernel, out, start: int = 0, block_rows: int = 256,
                   n_threads: int | None = None) -> np.ndarray:
    """Rows ``[start, start + len(out))`` of K(X, X) into ``out``, as :func:`numpy_gram`
    computes them (the same values: X prepared once for all its rows, one product per
    panel of ``block_rows`` rows on ``n_threads`` threads).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, n_features)
    kernel : Kernel
    out : ndarray of shape (rows, n), C-ordered, float32 or float64
    start : int, default=0
        Sample of the first row.

    Notes
    -----
    Memory: ``out`` plus X twice in ``out``'s dtype (:class:`RowSource`).
    """
    n = X.shape[0]
    source = row_source(X, kernel, out.dtype)
    if (start == 0 and out.shape[0] == n and out.dtype == np.float64
            and kernel.name in USER_PRODUCT_KERNELS and isinstance(source.X, np.ndarray)):
        # all of K: the product as a user's np.dot(X, X.T) takes it (numpy hands X X' to
        # OpenBLAS's syrk, whose rounding differs from gemm's panels since OpenBLAS 0.3.31),
        # so that kernel="linear" is bit for bit the precomputed np.dot(X, X.T)
        # (scikit-learn's test_precomputed compares the two fits to 6 decimals)
        np.dot(source.X, source.X.T, out=out)
        return kernel.block_into(None, None, out, sq_A=source.sq, sq_B=source.sq,
                                 same_rows=np.arange(n), product_ready=True)
    columns = Columns(source)
    if source.dtype != out.dtype:  # laplacian: float64 evaluation, stored in out's dtype
        def work(p0, p1, worker):
            out[p0:p1] = columns.panel_into(kernel, slice(start + p0, start + p1),
                                            np.empty((p1 - p0, n)))
    else:
        def work(p0, p1, worker):
            columns.panel_into(kernel, slice(start + p0, start + p1), out[p0:p1])
    run_panels(out.shape[0], block_rows, work, n_threads=n_threads)
    return out


__all__ = ["block_input", "numpy_gram", "gram_rows_into", "gram_dtype", "row_source", "RowSource", "Columns",
           "run_panels", "DENSIFY_MAX_FEATURES", "FLOAT64_GRAM_MAX_SAMPLES"]
