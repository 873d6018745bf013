"""K(X, X) on a device: X resident there, rows and products computed by GEMM plus one fused
element-wise pass, never an n x n array unless it fits.

:class:`DeviceRows` is a :class:`~muflow.operators.GramOperator` whose arrays live in an
array module's memory (CuPy: the GPU; NumPy: this process, where CI checks it against
:class:`muflow.kernel_rows.KernelRows`). It answers what the solvers ask of K:

- ``rows_into(idx, data, slots)``: rows of K written straight into a row cache's device
  storage (:class:`muflow.device.home.DeviceRowCache`), a batch at a time: one GEMM
  ``X[idx] X'`` and :func:`muflow.device.kernels.finish_block` (ThunderSVM's
  ``get_rows``: Wen et al., JMLR 19, 2018);
- ``matmul(V)``: ``K @ V`` for the multiplicative solvers and the batched columns of a
  sweep, on the device: from K itself when it is resident (``resident_bytes``), else from
  row panels computed and consumed one at a time;
- ``working_set_home(cache_mb)``: the working-set loop's state kept on the device
  (:class:`muflow.device.home.DeviceHome`), which
  :func:`muflow.solvers.working_set.solve_working_set` takes instead of its in-process home.

Rows are computed in the operator's dtype, from X prepared as the CPU prepares it
(:func:`muflow.inmemory.row_source`: float32 rbf data shifted by
:func:`muflow.kernels.rbf_center`), and each diagonal entry K(x_i, x_i) is written
exactly, so that a float64 block is the CPU's float64 block.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from muflow.device.arrays import name as module_name, to_host
from muflow.device.kernels import finish_block
from muflow.exceptions import MuflowInputError
from muflow.inmemory import PRODUCT_KERNELS, block_input, gram_dtype
from muflow.kernels import Kernel, rbf_center
from muflow.operators import GramOperator

#: Bytes of one temporary panel of kernel rows (a batch of rows, a block of a product).
PANEL_BYTES = 256 * 2**20


def resident_bytes(xp) -> int:
    """Bytes of K that :class:`DeviceRows` may keep resident for a solver that reads only
    products (each pass reads all of K, which would otherwise be recomputed): on a GPU
    half its free memory, nothing under NumPy (in this process the CPU paths store K
    themselves). :func:`device_operator` keeps none for a solver that reads rows (the
    working set reads a few rows an iteration: the row cache holds them)."""
    if xp is np:
        return 0
    return int(xp.cuda.runtime.memGetInfo()[0] // 2)


#: The most megabytes :func:`device_cache_mb` raises a GPU's row cache to.
DEVICE_CACHE_MAX_MB = 8192.0


def device_cache_mb(xp, cache_mb) -> float:
    """The row cache of a working-set solve on the device: ``cache_mb`` (default
    :data:`~muflow.solvers.rowcache.DEFAULT_CACHE_MB`), raised on a GPU to a quarter of its
    free memory, at most :data:`DEVICE_CACHE_MAX_MB` (a large cache there costs nothing the
    CPU needs, and rows recomputed cost GEMMs; the cache's bookkeeping reserves, untouched,
    as much host address space)."""
    from muflow.solvers.rowcache import DEFAULT_CACHE_MB

    cache_mb = DEFAULT_CACHE_MB if cache_mb is None else float(cache_mb)
    if xp is np:
        return cache_mb
    free_mb = xp.cuda.runtime.memGetInfo()[0] / 4 / 2**20
    return max(cache_mb, min(free_mb, DEVICE_CACHE_MAX_MB))


def device_operator(X, kernel: Kernel, xp, plan) -> "DeviceRows":
    """The operator of ``plan`` (a :class:`muflow.routing.KernelPlan`) on the device of
    ``xp``: rows in the plan's ``gram_dtype``, K kept there whole for a solver that reads
    only products when it fits (:func:`resident_bytes`)."""
    resident = resident_bytes(xp) if plan.reads_products else 0
    return DeviceRows(X, kernel, xp, dtype=plan.gram_dtype, resident_bytes=resident)


class DeviceRows(GramOperator):
    """K(X, X) computed on a device from X held there.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Densified and copied to the device once.
    kernel : muflow.kernels.Kernel
        linear, poly, rbf or sigmoid (those built on one product).
    xp : module
        The array module: ``cupy`` (a GPU) or ``numpy``.
    dtype : {"float32", "float64", "auto"}, default="float64"
        dtype of the rows and of the GEMMs that compute them; "auto" by n
        (:func:`muflow.inmemory.gram_dtype`).
    resident_bytes : int, default=0
        Keep the whole K on the device when it takes at most this many bytes: products then
        read it instead of recomputing it, rows are copied from it.

    Attributes
    ----------
    n, dtype, nonnegative
        As :class:`~muflow.operators.GramOperator`'s.
    rows_computed : int
        Rows of K computed.
    forkable : bool
        False on a GPU: its sub-problems are solved in this process, one after another
        (a forked child cannot use its parent's CUDA context).

    Notes
    -----
    Device memory: X twice (X and X', for the GEMMs), a panel of at most
    :data:`PANEL_BYTES`, K when resident, and the row cache the working set asks for.
    """

    #: products are summed in float64 whatever the rows' dtype (:meth:`product_on_device`)
    product_dtype = np.dtype(np.float64)

    def __init__(self, X, kernel: Kernel, xp, dtype="float64", resident_bytes: int = 0):
        if not isinstance(kernel, Kernel) or kernel.name not in PRODUCT_KERNELS:
            raise MuflowInputError(
                f"the device computes the {', '.join(PRODUCT_KERNELS)} kernels; got "
                f"{getattr(kernel, 'name', kernel)!r}: use device='cpu' for it")
        dtype = gram_dtype(X.shape[0]) if dtype == "auto" else np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise MuflowInputError(f"dtype must be float32 or float64, got {dtype}")
        Xh = block_input(X)
        if sp.issparse(Xh):  # many features: the device takes them dense
            Xh = np.asarray(Xh.toarray(), dtype=np.float64)
        if kernel.name == "rbf" and dtype == np.float32:
            center = rbf_center(Xh)  # as the CPU's float32 rows (inmemory.row_source)
            if center is not None:
                Xh = Xh - center
        Xc = np.ascontiguousarray(Xh, dtype=dtype)
        sq = np.einsum("ij,ij->i", Xc, Xc, dtype=np.float64)
        # rounded to the rows' dtype: the same numbers as the rows' diagonal entries
        diag = kernel.diagonal_from_sq(sq).astype(dtype).astype(np.float64)
        nonnegative = bool(kernel.is_nonnegative(Xh))
        self._start(xp, kernel, xp.asarray(Xc), sq, diag, dtype, nonnegative)
        if resident_bytes and self.n * self.n * dtype.itemsize <= resident_bytes:
            K = xp.empty((self.n, self.n), dtype=dtype)
            for lo, hi in self._panels(self.n):
                self._rows_block(xp.arange(lo, hi), K[lo:hi])
            self.rows_computed = 0
            self.K = K

    def _start(self, xp, kernel, Xd, sq, diag, dtype, nonnegative):
        self.xp = xp
        self.kernel = kernel
        self.X = Xd
        self.XT = xp.ascontiguousarray(Xd.T)
        self.sq_host = sq
        self.sq = xp.asarray(sq)
        self.diag_host = diag
        self.diag = xp.asarray(diag.astype(dtype))
        # as the CPU's blocks: rbf's exp(0) and float32's rounding are written exactly, a
        # float64 product's a'a is kept (as exact as the norm)
        self.exact_diagonal = kernel.name == "rbf" or dtype == np.float32
        self.n = int(Xd.shape[0])
        self.dtype = np.dtype(dtype)
        self.nonnegative = nonnegative
        self.forkable = xp is np
        self.K = None
        self.rows_computed = 0
        self.seconds = 0.0
        self.products = 0

    def restricted(self, idx) -> "DeviceRows":
        """K over the samples ``idx`` alone (a one-vs-one pair's), its X gathered on the
        device from this one's (the same prepared values, so its entries are this K's)."""
        idx = np.asarray(idx, dtype=np.int64)
        sub = object.__new__(type(self))
        sub._start(self.xp, self.kernel, self.X[self.xp.asarray(idx)], self.sq_host[idx],
                   self.diag_host[idx], self.dtype, self.nonnegative)
        return sub

    # -- rows ------------------------------------------------------------------------------
    def _panels(self, k: int):
        step = max(1, PANEL_BYTES // (self.dtype.itemsize * max(self.n, 1)))
        return ((lo, min(lo + step, k)) for lo in range(0, k, step))

    def _rows_block(self, idx_d, out):
        """``K(X[idx], X)`` into ``out`` (a C-ordered device array): the GEMM, the fused
        finish, then the exact diagonal entries where the CPU writes them."""
        xp = self.xp
        if self.K is not None:
            out[...] = self.K[idx_d]
            return out
        xp.matmul(self.X[idx_d], self.XT, out=out)
        finish_block(xp, out, self.sq[idx_d], self.sq, self.kernel)
        if self.exact_diagonal:
            out[xp.arange(idx_d.shape[0]), idx_d] = self.diag[idx_d]
        self.rows_computed += int(idx_d.shape[0])
        return out

    def rows_into(self, idx, data, slots) -> None:
        """Rows ``idx`` of K into ``data[slots]`` (the row cache's device storage, of this
        operator's dtype), a panel at a time."""
        xp = self.xp
        idx = np.asarray(idx, dtype=np.int64)
        slots = np.asarray(slots, dtype=np.int64)
        for lo, hi in self._panels(idx.size):
            run = slots[lo:hi]
            if run.size and run[-1] - run[0] == run.size - 1 and np.all(np.diff(run) == 1):
                self._rows_block(xp.asarray(idx[lo:hi]), data[int(run[0]):int(run[-1]) + 1])
            else:
                block = xp.empty((hi - lo, self.n), dtype=self.dtype)
                data[xp.asarray(run)] = self._rows_block(xp.asarray(idx[lo:hi]), block)

    def rows(self, idx) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise MuflowInputError(f"row indices must lie in [0, {self.n}), got {idx.min()}..{idx.max()}")
        block = self.xp.empty((idx.size, self.n), dtype=self.dtype)
        return np.asarray(to_host(self._rows_block(self.xp.asarray(idx), block)), dtype=np.float64)

    def diagonal(self) -> np.ndarray:
        return self.diag_host.copy()

    # -- products ----------------------------------------------------------------------------
    def product_on_device(self, V_d):
        """``K @ V`` on the device, summed in float64, V_d a device array of shape (n, m):
        panel by panel of rows of the resident K, or of rows computed and consumed one
        panel at a time."""
        xp = self.xp
        V_d = V_d.astype(xp.float64, copy=False)
        if self.K is not None and self.dtype == np.float64:
            self.products += 1
            return self.K @ V_d
        out = xp.empty((self.n, V_d.shape[1]))
        panel = None
        computed = self.rows_computed
        for lo, hi in self._panels(self.n):
            if panel is None or panel.shape[0] != hi - lo:
                panel = xp.empty((hi - lo, self.n), dtype=self.dtype)
            block = self._rows_block(xp.arange(lo, hi), panel)
            out[lo:hi] = block.astype(xp.float64, copy=False) @ V_d
        self.rows_computed = computed  # a product's panels are not rows a solver asked for
        self.products += 1
        return out

    def matmul(self, V) -> np.ndarray:
        """``K @ V`` in float64 on the device, returned to this process."""
        V = np.asarray(V, dtype=np.float64)
        squeeze = V.ndim == 1
        out = to_host(self.product_on_device(self.xp.asarray(V.reshape(self.n, -1))))
        return out[:, 0] if squeeze else out

    matmul_precise = matmul

    def working_set_home(self, cache_mb, q=None):
        """The working-set loop's state on this device (:class:`muflow.device.home.DeviceHome`).
        Under NumPy (the device's code on the CPU) its cache holds the rows that working sets
        of ``q`` allow in process, at first and at most
        (:func:`muflow.solvers.rowcache.working_set_first_rows`,
        :func:`~muflow.solvers.rowcache.working_set_rows`), so that the two homes take the
        same steps; a GPU's memory costs no page faults on
        first use, and there the cache takes all of :func:`device_cache_mb`."""
        from muflow.device.home import DeviceHome
        from muflow.solvers.rowcache import working_set_first_rows, working_set_rows

        bounded = self.xp is np
        return DeviceHome(self, device_cache_mb(self.xp, cache_mb),
                          working_set_rows(q) if bounded else None,
                          working_set_first_rows(q) if bounded else None)

    def close(self) -> None:
        self.X = self.XT = self.K = None

    def stats(self) -> dict:
        return {"rows_computed": self.rows_computed, "products": self.products}

    def __repr__(self) -> str:
        return (f"DeviceRows(n={self.n}, kernel={self.kernel.name}, dtype={self.dtype}, "
                f"xp={module_name(self.xp)}, resident={self.K is not None})")
