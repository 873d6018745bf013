"""K(X, X) in this process's memory, built panel by panel on threads.

The single-machine path: :class:`muflow.SVC` without a cluster, the sweeps and the
benchmarks hold K as one NumPy array (:class:`muflow.operators.DenseGram`). The blocked,
stored and distributed path is :mod:`muflow.gram`; both evaluate blocks with
:meth:`muflow.kernels.Kernel.block_into`, so the numbers are the same.

Notes
-----
Work: n^2 kernel values, one BLAS product per row panel. Memory: K plus one float64 panel
(``block_rows * n``) per thread. On virtual machines mapping fresh memory is a sizeable
part of the cost (about 1 s per GiB measured here), which is why ``out`` can be reused.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel

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
    per 4 KiB, which on the virtual machines measured here costs 1.5 to 4 s per GiB
    (populating up front: about 0.5 s per GiB). Falls back to ``np.empty`` where the flag
    does not exist or the mapping fails.
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


def numpy_gram(X, kernel: Kernel, dtype="float32", block_rows: int = 512, out=None,
               n_threads: int | None = None) -> np.ndarray:
    """K(X, X) into one in-memory array, row panel by row panel on ``n_threads`` threads.

    Each thread evaluates its panels with :meth:`Kernel.block_into` (one BLAS product
    into a reused float64 scratch panel, finished in place) with BLAS itself held to one
    thread, so that the products and the element-wise passes of different panels run
    side by side.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, n_features)
    kernel : Kernel
    dtype : {"float32", "float64"}, default="float32"
    block_rows : int, default=512
        Rows per panel; memory: one float64 panel of ``block_rows * n`` per thread.
    out : ndarray of shape (n, n), optional
        Written in place (and returned): a sweep reuses one buffer for every kernel
        setting, which spares the operating system from mapping fresh pages each time.
    n_threads : int, optional
        Default: the CPUs this process may use.
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    Xb = block_input(X)
    n = Xb.shape[0]
    if out is None:
        out = empty_populated((n, n), dtype)
    elif out.shape != (n, n) or not out.flags.c_contiguous:
        raise MuflowInputError(f"out must be a C-ordered ({n}, {n}) array, got {out.shape}")
    dense = not sp.issparse(Xb)
    XT = np.ascontiguousarray(Xb.T) if dense else None
    sq = np.einsum("ij,ij->i", Xb, Xb) if dense else None
    starts = list(range(0, n, block_rows))
    n_threads = max(1, min(n_threads or len(os.sched_getaffinity(0)), len(starts)))

    def panels(worker):
        scratch = np.empty(block_rows * n)
        for start in starts[worker::n_threads]:
            stop = min(start + block_rows, n)
            kernel.block_into(Xb[start:stop], Xb, out[start:stop], BT=XT,
                              sq_A=None if sq is None else sq[start:stop], sq_B=sq, scratch=scratch)

    with threadpool_limits(1 if n_threads > 1 else None, user_api="blas"):
        if n_threads == 1:
            panels(0)
        else:
            with ThreadPoolExecutor(n_threads) as pool:
                list(pool.map(panels, range(n_threads)))
    return out


__all__ = ["block_input", "numpy_gram", "gram_dtype", "DENSIFY_MAX_FEATURES", "FLOAT64_GRAM_MAX_SAMPLES"]
