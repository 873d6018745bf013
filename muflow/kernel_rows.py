"""Rows of K computed from X on demand: a Gram operator that never holds K.

:class:`KernelRows` answers what the subset solvers ask of K (``rows(idx)``, the diagonal)
and the products ``K @ V`` by computing the rows it needs from X, as SVMlight (Joachims,
"Making large-scale SVM learning practical", 1999, section 5: kernel evaluations on demand
with a cache) and libsvm (Chang & Lin 2011, section 5.1; its ``Kernel::get_Q`` behind an
LRU ``Cache``) do, with ThunderSVM's batching: a batch of rows is one BLAS product of
``X[idx]`` against ``X.T`` (made contiguous once) plus one fused element-wise pass, on all
cores (:meth:`muflow.kernels.Kernel.block_into`, the same code as the in-memory Gram of
:func:`muflow.inmemory.numpy_gram`, so the values agree with a stored K).

There is no cache here: the solvers keep the rows they fetch in their
:class:`~muflow.solvers.rowcache.RowCache`, an LRU cache sized in MB (``cache_mb``, libsvm's
``cache_size``), which this operator fills in place (:meth:`KernelRows.rows_into`).

Notes
-----
Memory: X twice in the operator's dtype (:class:`muflow.inmemory.RowSource`) plus, while a
call runs, one panel of ``block_rows`` rows per thread; never an n x n array. Work: a row
costs ``n * n_features`` multiply-adds and n element-wise evaluations; a product
``K @ V`` costs the rows of K against the samples where V is non-zero (K is symmetric), so
certifying a point whose support vectors are few is cheap and a dense V (multiplicative
solvers) costs a whole K per product.
"""

from __future__ import annotations

import time

import numpy as np

from muflow import kernel_entries
from muflow.exceptions import MuflowInputError
from muflow.inmemory import (MIN_PIECE_ENTRIES, PRODUCT_KERNELS, Columns, begin_held,
                             begin_panels, contiguous_run, gram_dtype,
                             row_source, run_panels)
from muflow.kernels import Kernel
from muflow.operators import GramOperator
from muflow.thread_pool import Begun, begin_on_threads
from muflow.threads import threads_for

#: A panel of a product ``K @ V`` (per thread) takes at most this many bytes.
PRODUCT_PANEL_BYTES = 32 * 2**20
#: Rows of dense X (a product kernel) are computed this many bytes of columns at a
#: time (:meth:`KernelRows._begin_tiles`; a chunk's scratch block stays in the CPU's
#: cache, and the chunk is long enough that a BLAS call's setup is small next to it).
CHUNK_BYTES = 2 * 2**20
#: ... and at least this many columns a chunk (a BLAS call per chunk costs its setup).
MIN_CHUNK_COLUMNS = 256
#: ... and at most n / COLUMN_TILES columns, so that a batch of a few rows (a working set's
#: missing rows) is cut into enough tiles for many threads to share.
COLUMN_TILES = 32


class KernelRows(GramOperator):
    """K(X, X) as rows computed on demand.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Training samples (CSR for sparse data; at most
        :data:`muflow.inmemory.DENSIFY_MAX_FEATURES` features are densified once).
    kernel : muflow.kernels.Kernel
        Any kernel but ``"precomputed"`` (a given K is stored already:
        :class:`muflow.operators.DenseGram`).
    dtype : {"float32", "float64", "auto"}, default="float32"
        dtype of the rows (and of the products that compute them: sgemm for float32);
        "auto" by n (:func:`muflow.inmemory.gram_dtype`).
        The solvers' row cache stores rows in this dtype, so float32 holds twice as many.
    block_rows : int, default=256
        Rows per panel of a batch: a batch of k rows runs as ``ceil(k / block_rows)``
        panels on ``n_threads`` threads.
    n_threads : int, optional
        Default: the CPUs this process may use.

    Attributes
    ----------
    n : int
    dtype : numpy dtype
    nonnegative : bool
        :meth:`muflow.kernels.Kernel.is_nonnegative` on X.
    rows_computed : int
        Rows of K computed (by :meth:`rows`, :meth:`rows_native` and :meth:`rows_into`).
    row_seconds : float
        Time spent computing them.
    seconds : float
        Time spent in products ``K @ V``.
    products : int
        Products answered.

    Notes
    -----
    The row cache is the solver's: ``solve_smo(problem, cache_mb=...)`` (and the other
    subset solvers) keep ``cache_mb`` megabytes of rows (libsvm's ``cache_size``, in the
    same unit), ``cache_mb * 2**20 / (n * itemsize)`` rows, evicting the least recently
    used; this operator writes each fetched row straight into that cache.

    Examples
    --------
    >>> import numpy as np
    >>> from muflow.kernels import Kernel
    >>> X = np.random.default_rng(0).normal(size=(100, 5))
    >>> K = KernelRows(X, Kernel("rbf", gamma=0.5), dtype="float64")
    >>> K.rows([3, 7]).shape
    (2, 100)
    """

    def __init__(self, X, kernel: Kernel, dtype="float32", block_rows: int = 256,
                 n_threads: int | None = None):
        if not isinstance(kernel, Kernel):
            raise MuflowInputError(f"kernel must be a muflow.kernels.Kernel, got {type(kernel).__name__}")
        if kernel.name == "precomputed":
            raise MuflowInputError("a precomputed kernel is K itself; wrap it in muflow.operators.DenseGram")
        if getattr(X, "ndim", 0) != 2 or X.shape[0] == 0:
            raise MuflowInputError(f"X must be a non-empty 2-D array, got shape {getattr(X, 'shape', None)}")
        dtype = gram_dtype(X.shape[0]) if dtype == "auto" else np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise MuflowInputError(f"dtype must be float32 or float64, got {dtype}")
        if int(block_rows) < 1:
            raise MuflowInputError(f"block_rows must be a positive integer, got {block_rows!r}")
        self._start(kernel, row_source(X, kernel, dtype), dtype, bool(kernel.is_nonnegative(X)),
                    int(block_rows), n_threads)

    def _start(self, kernel, source, dtype, nonnegative, block_rows, n_threads) -> None:
        self.kernel = kernel
        self.source = source
        self.dtype = dtype
        self.n = self.source.n
        self.nonnegative = nonnegative
        self.block_rows = block_rows
        self.n_threads = n_threads
        self._columns = Columns(self.source)
        self._diagonal = None
        self.rows_computed = 0
        self.row_seconds = 0.0
        self.seconds = 0.0
        self.products = 0

    def restricted(self, idx) -> "KernelRows":
        """K over the samples ``idx`` alone, ``K[np.ix_(idx, idx)]``, as rows on demand: the
        operator of a sub-problem that holds only those samples (a one-vs-one pair), whose
        rows are ``len(idx)`` long instead of n, so that a row cache of the same megabytes
        holds n / len(idx) times more of them. X is shared as prepared here
        (:meth:`muflow.inmemory.RowSource.subset`): its entries are this operator's.
        ``nonnegative`` is this operator's (a sub-block of a non-negative K is non-negative)."""
        idx = self._index(idx)
        sub = object.__new__(type(self))
        sub._start(self.kernel, self.source.subset(idx), self.dtype, self.nonnegative,
                   self.block_rows, self.n_threads)
        return sub

    # -- rows ---------------------------------------------------------------------------
    def _index(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise MuflowInputError(f"row indices must lie in [0, {self.n}), got {idx.min()}..{idx.max()}")
        return idx

    def _panel(self, rows, out):
        """``K(X[rows], X)`` into ``out`` (C-ordered, the operator's dtype)."""
        if self.source.dtype == self.dtype:
            return self._columns.panel_into(self.kernel, rows, out)
        # laplacian evaluates in float64 whatever the storage
        out[...] = self._columns.panel_into(self.kernel, rows, np.empty(out.shape))
        return out

    @property
    def _chunked(self) -> bool:
        """Rows a column chunk at a time: dense X, product kernel, rows in its dtype."""
        source = self.source
        return source.XT is not None and source.dtype == self.dtype and self.kernel.name in PRODUCT_KERNELS

    @property
    def _sparse_rbf(self) -> bool:
        """rbf on sparse float32 rows: one compiled call a range of columns."""
        return self.kernel.name == "rbf" and self.source.csr is not None and self.dtype == np.float32

    def _chunk_width(self, k: int) -> int:
        """Columns of a chunk of ``k`` rows (:meth:`_chunks_into`): :data:`CHUNK_BYTES` of
        them, no more than n / :data:`COLUMN_TILES`, no fewer than
        :data:`MIN_CHUNK_COLUMNS`, a multiple of 16. It depends on k, n and the dtype
        alone, never on the threads."""
        width = min(CHUNK_BYTES // (k * self.dtype.itemsize), -(-self.n // COLUMN_TILES))
        return min(self.n, max(MIN_CHUNK_COLUMNS, -(-width // 16) * 16))

    def _row_groups(self, k: int) -> np.ndarray:
        """Edges of the groups a batch of ``k`` rows is computed in: ``ceil(k /
        block_rows)`` groups of near-equal size, whatever the threads."""
        groups = max(1, -(-k // self.block_rows))
        return np.arange(groups + 1, dtype=np.int64) * k // groups

    def _begin_tiles(self, rows, A, sq_A, same_rows, data, slots, scratch=None):
        """Rows A (``rows``: their indices in X, or None for rows that need not be rows of
        X) into ``data[slots]``, as the tiles of one grid, row groups
        (:meth:`_row_groups`) by column chunks (:meth:`_chunk_width`), dealt to the
        operator's threads as they come free. ``scratch``: a dict kept by the caller, whose
        chunk buffers are reused across calls.

        The grid depends on the rows, n and the dtype alone: every entry is computed by the
        same BLAS call, of the same shape, whatever the number of threads (BLAS rounds an
        entry by the shape of the product it is computed in: OpenBLAS's AVX2 kernels
        round a row of an odd number of rows, or the last columns of a product, otherwise
        than inside a larger one), so the rows are the same to the bit on any number of threads.
        A thread's tile reads only its columns of X; a tile's product and finish stay in
        the CPU's cache until they reach their rows. A small batch is not handed to other
        threads (below :data:`muflow.inmemory.MIN_PIECE_ENTRIES` entries a thread). Sparse
        rbf rows are dealt by one compiled loop a thread (:meth:`RowSource.sparse_rbf_tiles
        <muflow.inmemory.RowSource.sparse_rbf_tiles>`), the others by Python a tile."""
        k = sq_A.size
        edges = self._row_groups(k)
        tiles = []
        for g in range(edges.size - 1):
            width = self._chunk_width(int(edges[g + 1] - edges[g]))
            tiles += [(g, c0, min(self.n, c0 + width)) for c0 in range(0, self.n, width)]
        threads = threads_for(self.n_threads)
        workers = max(1, min(threads, k * self.n // MIN_PIECE_ENTRIES, len(tiles)))
        if rows is not None and self._sparse_rbf:
            # sparse rbf rows: one compiled loop a thread takes tile after tile, the GIL
            # held only to start it
            deal = self.source.sparse_rbf_tiles(self.kernel, rows, sq_A, same_rows, data, slots,
                                                edges, tiles)
            return begin_on_threads(lambda worker: deal(), workers)
        scratch = {} if scratch is None else scratch

        def tile(i, worker):
            g, c0, c1 = tiles[i]
            r0, r1 = int(edges[g]), int(edges[g + 1])
            self._chunks_into(None if rows is None else rows[r0:r1],
                              None if A is None else A[r0:r1], sq_A[r0:r1],
                              same_rows[r0:r1], data, slots[r0:r1], scratch, worker,
                              columns=(c0, c1))

        return begin_held(tile, len(tiles), workers)

    def _chunks_into(self, rows, A, sq_A, same_rows, data, target, scratch, worker,
                     consume=None, columns=None) -> None:
        """The chunk loop of :meth:`_begin_tiles` for prepared rows A (``rows``: their
        indices in X for the sparse-row product, or None); ``same_rows[r] = c >= 0`` where
        A[r] is row c of X. ``consume(c0, c1, piece)``, when given, takes each chunk of
        columns while it is in the CPU's cache instead of its being written to ``data``.
        ``columns = (lo, hi)`` limits the loop to those columns (one tile of
        :meth:`_begin_tiles`); chunks of :meth:`_chunk_width` columns start at ``lo``."""
        source = self.source
        lo, hi = (0, self.n) if columns is None else columns
        k = A.shape[0]
        width = self._chunk_width(k)
        buf = scratch.get(worker)
        if buf is None or buf.size < k * width:
            buf = scratch[worker] = np.empty(k * width, dtype=self.dtype)
        finish = None
        if self.kernel.name == "rbf" and self.dtype == np.float32 and consume is None:
            from muflow._kernel_compiled import rbf_rows_finisher  # written straight into the rows
            finish = rbf_rows_finisher(self.kernel, sq_A, source.sq, data, target)
        for c0 in range(lo, hi, width):
            c1 = min(hi, c0 + width)
            piece = buf[: k * (c1 - c0)].reshape(k, c1 - c0)
            same = same_rows - c0
            same[(same_rows < 0) | (same < 0) | (same >= c1 - c0)] = -1
            if rows is None:
                np.matmul(A, source.XT[:, c0:c1], out=piece)
            else:
                source.product_into(rows, source.XT, piece, c0, c1, A=A)
            if finish is not None:
                finish(piece, c0, same)
                continue
            self.kernel.block_into(None, None, piece, sq_A=sq_A, sq_B=source.sq[c0:c1],
                                   same_rows=same, product_ready=True)
            if consume is not None:
                consume(c0, c1, piece)
            else:
                data[target, c0:c1] = piece

    def foreign_rows_into(self, A, data: np.ndarray, slots, same_rows=None, scratch=None) -> None:
        """Write ``K(A[r], X)`` into ``data[slots[r]]`` for rows A that need not be rows of
        X (the working set that :mod:`muflow.dask.working_set`'s client sends a worker
        holding X), computed as :meth:`rows_into` computes rows: A prepared as X was
        (:meth:`muflow.inmemory.RowSource.prepare`), a column chunk at a time.
        ``same_rows[r] = c >= 0`` where A[r] is row c of X (its exact diagonal entry);
        ``scratch``: a dict kept by the caller, whose chunk buffer is reused across calls."""
        self.begin_foreign_rows_into(A, data, slots, same_rows, scratch).join()

    def begin_foreign_rows_into(self, A, data, slots, same_rows=None, scratch=None):
        """:meth:`foreign_rows_into` begun on the other threads, as :meth:`begin_rows_into`."""
        t = time.perf_counter()
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        same_rows = (np.full(slots.size, -1, dtype=np.int64) if same_rows is None
                     else np.asarray(same_rows, dtype=np.int64))
        if self._chunked:
            A, sq_A = self.source.prepare(A)
            begun = self._begin_tiles(None, A, sq_A, same_rows, data, slots, scratch)
        else:  # sparse X or laplacian: the float64 block, stored in the operator's dtype
            data[slots] = self.kernel.block_into(A, self.source.X, np.empty((slots.size, self.n)),
                                                 same_rows=same_rows)
            begun = Begun(None, [])
        return self._counted(begun, slots.size, t)

    def _counted(self, begun, rows: int, started: float):
        """``begun`` with its rows and seconds added to the counters once it is joined."""
        def count():
            self.rows_computed += rows
            self.row_seconds += time.perf_counter() - started

        return begun.then(count)

    def rows_into(self, idx, data: np.ndarray, slots) -> None:
        """Write ``K[idx[r], :]`` into ``data[slots[r]]`` (the row cache's storage, C-ordered,
        the operator's dtype): dense X's rows of a product kernel as the tiles of
        :meth:`_begin_tiles`; the others by panels of ``block_rows`` rows, computed in place
        where their slots are consecutive."""
        self.begin_rows_into(idx, data, slots).join()

    def begin_rows_into(self, idx, data: np.ndarray, slots):
        """:meth:`rows_into` begun on the other threads of the budget; the caller's share
        waits for its :meth:`~muflow.thread_pool.Begun.join`, which returns once every row
        is written (the working set's rows while this thread solves the subproblem)."""
        t = time.perf_counter()
        idx = self._index(idx)
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if slots.size != idx.size or data.ndim != 2 or data.shape[1] != self.n:
            raise MuflowInputError("rows_into needs one slot per row and data of shape (slots, n)")
        if data.dtype != self.dtype or not data.flags.c_contiguous:
            raise MuflowInputError(f"rows_into writes into a C-ordered {self.dtype} array, got {data.dtype}")
        if self._chunked:
            source = self.source
            A = None if self._sparse_rbf else source.X[idx]  # the sparse call reads X's CSR
            begun = self._begin_tiles(idx, A, source.sq[idx], idx, data, slots)
            return self._counted(begun, idx.size, t)
        block = self.block_rows
        scratch = {}

        def work(p0, p1, worker):  # sparse X, laplacian: entries that no blocking rounds
            rows = idx[p0:p1]
            first = contiguous_run(rows)
            index = slice(first, first + rows.size) if first is not None else rows
            start = contiguous_run(slots[p0:p1])
            if start is not None:
                self._panel(index, data[start:start + rows.size])
                return
            buf = scratch.get(worker)
            if buf is None:
                buf = scratch[worker] = np.empty((min(block, idx.size), self.n), dtype=self.dtype)
            data[slots[p0:p1]] = self._panel(index, buf[: rows.size])

        begun = begin_panels(idx.size, block, work, n_threads=self.n_threads)
        return self._counted(begun, idx.size, t)

    def entries_into(self, rows, cols, out: np.ndarray) -> np.ndarray:
        """``K[rows][:, cols]`` into ``out`` (:func:`muflow.kernel_entries.entries_into`)."""
        return kernel_entries.entries_into(self, self._index(rows), self._index(cols), out)

    def square_entries(self, idx):
        """The working set's K_BB a block of rows at a time
        (:func:`muflow.kernel_entries.square_entries`)."""
        return kernel_entries.square_entries(self, self._index(idx))

    def rows_native(self, idx, out: np.ndarray | None = None) -> np.ndarray:
        """``K[idx, :]`` in the operator's dtype, shape (len(idx), n); into ``out`` when
        given (C-ordered). Indices may repeat and come in any order."""
        idx = self._index(idx)
        if out is None:
            out = np.empty((idx.size, self.n), dtype=self.dtype)
        elif out.shape != (idx.size, self.n):
            raise MuflowInputError(f"out must have shape ({idx.size}, {self.n}), got {out.shape}")
        self.rows_into(idx, out, np.arange(idx.size))
        return out

    def rows(self, idx) -> np.ndarray:
        """``K[idx, :]`` in float64, shape (len(idx), n)."""
        return self.rows_native(idx).astype(np.float64, copy=False)

    def diagonal(self) -> np.ndarray:
        """``K(x_i, x_i)`` in float64 from the squared norms of the values the rows are
        computed from (the same entries as the rows' diagonal)."""
        if self._diagonal is None:
            # rounded to the rows' dtype: the same numbers as the rows' diagonal entries
            diagonal = self.kernel.diagonal_from_sq(self.source.sq)
            self._diagonal = diagonal.astype(self.dtype).astype(np.float64)
        return self._diagonal.copy()

    # -- products -------------------------------------------------------------------
    def _product(self, V, out, precise: bool, neg=None) -> np.ndarray:
        """``K @ V`` into ``out`` panel by panel of rows, each panel only against the samples
        where V has a non-zero row (K is symmetric: ``K V = K[:, nz] V[nz]``); with ``neg``,
        ``K+ @ V`` into ``out`` and ``K- @ V`` into ``neg`` (M3 eq. (5))."""
        t = time.perf_counter()
        V = np.asarray(V)
        if V.ndim != 2 or V.shape[0] != self.n:
            raise MuflowInputError(f"V must have shape ({self.n}, m), got {V.shape}")
        out.fill(0)
        if neg is not None:
            neg.fill(0)
        nz = np.flatnonzero(np.any(V != 0, axis=1))
        if nz.size:
            columns = self._columns if nz.size == self.n else Columns(self.source, nz)
            Vnz = V if nz.size == self.n else V[nz]
            Vnz = np.ascontiguousarray(Vnz, dtype=np.float64 if precise else self.dtype)
            itemsize = self.dtype.itemsize * (2 if neg is not None else 1) + (8 if precise else 0)
            block = max(1, min(self.block_rows, PRODUCT_PANEL_BYTES // (itemsize * columns.m)))
            buffers = {}

            def work(p0, p1, worker):
                bufs = buffers.get(worker)
                if bufs is None:
                    panel = np.empty((block, columns.m), dtype=self.dtype)
                    wide = np.empty((block, columns.m)) if precise and self.dtype != np.float64 else None
                    part = np.empty((block, columns.m), dtype=self.dtype) if neg is not None else None
                    bufs = buffers[worker] = (panel, wide, part)
                panel, wide, part = bufs
                K = panel[: p1 - p0]
                if self.source.dtype == self.dtype:
                    columns.panel_into(self.kernel, slice(p0, p1), K)
                else:
                    K[...] = columns.panel_into(self.kernel, slice(p0, p1), np.empty(K.shape))
                if neg is not None:
                    P = part[: p1 - p0]
                    np.maximum(K, 0, out=P)
                    np.matmul(P, Vnz, out=out[p0:p1])
                    np.minimum(K, 0, out=P)
                    np.negative(P, out=P)
                    np.matmul(P, Vnz, out=neg[p0:p1])
                    return
                if wide is not None:
                    wide[: p1 - p0] = K
                    K = wide[: p1 - p0]
                np.matmul(K, Vnz, out=out[p0:p1])

            run_panels(self.n, block, work, n_threads=self.n_threads)
        self.seconds += time.perf_counter() - t
        self.products += 1
        return out

    def matmul(self, V) -> np.ndarray:
        """``K @ V`` in float64 (each panel multiplied in the operator's dtype)."""
        return self.matmul_native(V).astype(np.float64, copy=False)

    def matmul_native(self, V, out=None) -> np.ndarray:
        """``K @ V`` in the operator's dtype; into ``out`` (C-ordered) when given."""
        V = np.asarray(V)
        if out is None:
            out = np.empty((self.n, V.shape[1]), dtype=self.dtype)
        elif out.dtype != self.dtype or not out.flags.c_contiguous:
            target = out
            target[...] = self._product(V, np.empty((self.n, V.shape[1]), dtype=self.dtype), False)
            return target
        return self._product(V, out, False)

    def matmul_precise(self, V) -> np.ndarray:
        """``K @ V`` accumulated in float64 over the rows' values (what a stored K of the
        same dtype gives, :meth:`muflow.operators.DenseGram.matmul_precise`)."""
        V = np.asarray(V, dtype=np.float64)
        return self._product(V, np.empty((self.n, V.shape[1])), True)

    def matmul_parts(self, V) -> tuple[np.ndarray, np.ndarray]:
        """``(K+ @ V, K- @ V)``, K+ = max(K, 0), K- = max(-K, 0) (M3 eq. (5)), float64,
        panel by panel; ``(K @ V, 0)`` for a non-negative kernel."""
        if self.nonnegative:
            pos = self.matmul(V)
            return pos, np.zeros_like(pos)
        V = np.asarray(V)
        pos = np.empty((self.n, V.shape[1]), dtype=self.dtype)
        neg = np.empty_like(pos)
        self._product(V, pos, False, neg=neg)
        return pos.astype(np.float64, copy=False), neg.astype(np.float64, copy=False)

    def cross_matmul(self, rows, cols, V) -> np.ndarray:
        """``K[rows][:, cols] @ V`` in float64, shape (len(rows), m), computed as rows are
        and summed as :meth:`matmul_precise` sums (:func:`muflow.kernel_cross.cross_matmul`)."""
        from muflow.kernel_cross import cross_matmul

        return cross_matmul(self, rows, cols, V)

    def stats(self) -> dict:
        """Counters for progress reports."""
        return {"rows_computed": self.rows_computed, "row_seconds": self.row_seconds,
                "products": self.products, "product_seconds": self.seconds,
                "source_bytes": self.source.nbytes}

    def __repr__(self) -> str:
        return (f"KernelRows(n={self.n}, kernel={self.kernel.name!r}, dtype={self.dtype.name}, "
                f"block_rows={self.block_rows}, n_threads={self.n_threads})")


__all__ = ["KernelRows"]
