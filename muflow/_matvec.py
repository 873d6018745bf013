"""Compiled products with a stored Gram matrix, accumulated in float64.

:meth:`muflow.operators.DenseGram.matmul_precise` answers ``K @ V`` for the subset
solvers' exact gradient. A float32 K is read as it is stored and every product is summed
in float64, so no float64 copy of K is made; only the rows of K where V is non-zero are
read (K is symmetric: ``K @ V = sum_j K[j, :]^T V[j, :]``), which for a dual vector is the
support vectors.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def weighted_row_sum(K, rows, W, outT):
    """``outT[c, :] += sum_k W[k, c] * K[rows[k], :]`` in float64."""
    n = K.shape[1]
    m = W.shape[1]
    for k in range(rows.shape[0]):
        Kj = K[rows[k]]
        for c in range(m):
            w = W[k, c]
            if w != 0.0:
                o = outT[c]
                for i in range(n):
                    o[i] += w * Kj[i]


def symmetric_matmul_float64(K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``K @ V`` for a symmetric, C-ordered K (float32 or float64), summed in float64."""
    V = np.asarray(V, dtype=np.float64)
    rows = np.flatnonzero(np.any(V != 0.0, axis=1))
    outT = np.zeros((V.shape[1], K.shape[0]))
    weighted_row_sum(K, rows, np.ascontiguousarray(V[rows]), outT)
    return outT.T
