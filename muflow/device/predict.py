"""Decision values on a device, a block of test rows at a time.

``K(X_block, SV) @ W`` with the support vectors and their weights resident on the device:
one GEMM, the fused finish (:func:`muflow.device.kernels.finish_block`) and one product
per block, the block sized so that its kernel values take at most :data:`BLOCK_BYTES`.
"""

from __future__ import annotations

import numpy as np

from muflow.device.arrays import to_host
from muflow.device.kernels import finish_block
from muflow.inmemory import block_input
from muflow.kernels import Kernel

#: Bytes of kernel values one block of test rows takes on the device.
BLOCK_BYTES = 256 * 2**20


def device_decision(xp, kernel: Kernel, SV, W, X, dtype="float64") -> np.ndarray:
    """``K(X, SV) @ W`` (float64, shape (n_samples, n_problems)) computed on ``xp``'s device.

    Parameters
    ----------
    xp : module
        CuPy (a GPU) or NumPy.
    kernel : Kernel
        linear, poly, rbf or sigmoid.
    SV : ndarray or sparse matrix of shape (n_SV, n_features)
    W : ndarray of shape (n_SV, n_problems)
        The support vectors' coefficients of each binary problem.
    X : ndarray or sparse matrix of shape (n_samples, n_features)
    dtype : {"float64", "float32"}
        Of the GEMM and the kernel values (the product with W sums in float64).
    """
    dtype = np.dtype(dtype)
    S = np.ascontiguousarray(_dense(SV), dtype=dtype)
    S_d = xp.asarray(S)
    ST_d = xp.ascontiguousarray(S_d.T)
    sq_S = xp.asarray(np.einsum("ij,ij->i", S, S, dtype=np.float64))
    W_d = xp.asarray(np.asarray(W, dtype=np.float64))
    Xh = _dense(X)
    n = Xh.shape[0]
    out = np.empty((n, W_d.shape[1]))
    step = max(1, BLOCK_BYTES // (dtype.itemsize * max(S.shape[0], 1)))
    for lo in range(0, n, step):
        A = np.ascontiguousarray(Xh[lo:lo + step], dtype=dtype)
        A_d = xp.asarray(A)
        G = xp.matmul(A_d, ST_d)
        finish_block(xp, G, xp.asarray(np.einsum("ij,ij->i", A, A, dtype=np.float64)), sq_S, kernel)
        out[lo:lo + A.shape[0]] = to_host(G.astype(xp.float64, copy=False) @ W_d)
    return out


def _dense(A):
    B = block_input(A)
    return B.toarray() if hasattr(B, "toarray") else B
