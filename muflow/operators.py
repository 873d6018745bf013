"""Gram operators: everything a solver may ask of K, wherever K lives.

Solvers never index K themselves. They ask an operator for

- ``matmul(V)``: ``K @ V`` for ``V`` of shape (n, m), one column per problem;
- ``matmul_parts(V)``: ``(K+ @ V, K- @ V)`` with ``K+ = max(K, 0)`` and ``K- = max(-K, 0)``,
  the split of m3-multiplicative-updates-large-margin.txt eq. (5), needed only when K has
  negative entries;
- ``rows(idx)`` and ``submatrix(idx)`` for subset methods;
- ``diagonal()``;
- optionally ``matmul_precise(V)``: ``K @ V`` accumulated in float64 when K is stored in
  float32 (the subset solvers' exact gradient); operators without it answer ``matmul``.

:class:`DenseGram` holds K in process memory. The distributed operator (Gram panels
resident on Dask workers) implements the same protocol, so every solver runs distributed
unchanged.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import numpy as np

from muflow.exceptions import MuflowInputError


def operand_dtype(operator) -> type:
    """The dtype an operator multiplies in: float32 for an in-memory float32 Gram (its
    compiled loops are specialised for it), float64 otherwise."""
    dtype = getattr(getattr(operator, "K", None), "dtype", None)
    return np.float32 if dtype == np.float32 else np.float64


@runtime_checkable
class GramOperator(Protocol):
    """What solvers may ask of a Gram matrix K (n x n, symmetric)."""

    n: int
    nonnegative: bool

    def matmul(self, V: np.ndarray) -> np.ndarray: ...

    def matmul_parts(self, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def rows(self, idx: np.ndarray) -> np.ndarray: ...

    def submatrix(self, idx: np.ndarray) -> np.ndarray: ...

    def diagonal(self) -> np.ndarray: ...


class DenseGram:
    """K held in memory as a NumPy array.

    Parameters
    ----------
    K : ndarray of shape (n, n)
        Symmetric Gram matrix. float32 halves memory; products accumulate in the dtype of K.

    Attributes
    ----------
    n : int
    nonnegative : bool
        True when no entry of K is negative (MUNK applies, ``matmul_parts`` is cheap).
    seconds : float
        Time spent in products, for solvers' timing reports.

    Notes
    -----
    ``matmul_parts`` on a signed K splits it block by block (``block_rows`` rows at a time)
    so that the split never costs more than one extra block of memory.
    """

    block_rows = 2048

    def __init__(self, K: np.ndarray):
        K = np.asarray(K)
        if K.ndim != 2 or K.shape[0] != K.shape[1]:
            raise MuflowInputError(f"a Gram matrix must be square, got shape {K.shape}")
        if K.dtype not in (np.float32, np.float64):
            K = K.astype(np.float64)
        self.K = K
        self.n = K.shape[0]
        self.nonnegative = bool(K.min() >= 0) if K.size else True
        self.seconds = 0.0
        self.products = 0

    def _as_operand(self, V):
        V = np.asarray(V)
        return V.astype(self.K.dtype, copy=False)

    def matmul(self, V):
        return self.matmul_native(V).astype(np.float64, copy=False)

    def matmul_native(self, V, out=None):
        """``K @ V`` in K's own dtype (float32 for a float32 Gram), for a caller that widens
        each value as it reads it instead of through a float64 copy of the product; into
        ``out`` (C-ordered, K's dtype) when given."""
        t = time.perf_counter()
        out = np.matmul(self.K, self._as_operand(V), out=out)
        self.seconds += time.perf_counter() - t
        self.products += 1
        return out

    def matmul_precise(self, V):
        """``K @ V`` accumulated in float64 whatever the dtype of K.

        The subset solvers certify their point with an exact gradient; a float32 product
        carries errors of order ``1e-7 * sum_j |K_ij V_j|`` (about 1e-2 at C = 100 on a8a),
        larger than the tolerance it is checked against. A C-ordered K is read where it
        is, only at the rows where V is non-zero (:mod:`muflow._matvec`).
        """
        V = np.asarray(V, dtype=np.float64)
        t = time.perf_counter()
        if self.K.flags.c_contiguous:
            from muflow._matvec import symmetric_matmul_float64

            out = symmetric_matmul_float64(self.K, V)
        else:
            out = np.asarray(self.K, dtype=np.float64) @ V
        self.seconds += time.perf_counter() - t
        self.products += 1
        return out

    def matmul_parts(self, V):
        t = time.perf_counter()
        V = self._as_operand(V)
        if self.nonnegative:
            pos = self.K @ V
            neg = np.zeros_like(pos)
        else:
            pos = np.empty((self.n, V.shape[1]), dtype=self.K.dtype)
            neg = np.empty_like(pos)
            for start in range(0, self.n, self.block_rows):
                block = self.K[start : start + self.block_rows]
                pos[start : start + len(block)] = np.maximum(block, 0) @ V
                neg[start : start + len(block)] = np.maximum(-block, 0) @ V
        self.seconds += time.perf_counter() - t
        self.products += 1
        return pos.astype(np.float64, copy=False), neg.astype(np.float64, copy=False)

    def rows(self, idx):
        return np.asarray(self.K[np.asarray(idx)], dtype=np.float64)

    def submatrix(self, idx):
        idx = np.asarray(idx)
        return np.asarray(self.K[np.ix_(idx, idx)], dtype=np.float64)

    def diagonal(self):
        return np.diag(self.K).astype(np.float64)
