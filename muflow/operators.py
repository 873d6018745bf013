"""Gram operators: everything a solver may ask of K, wherever K lives.

Solvers never index K themselves. They ask a :class:`GramOperator` for

- ``matmul(V)``: ``K @ V`` for ``V`` of shape (n, m), one column per problem;
- ``matmul_native(V, out=None)``: the same product in K's storage dtype (the multiplicative
  passes widen it as they read it);
- ``matmul_precise(V)``: ``K @ V`` accumulated in float64 when K is stored in float32 (the
  exact gradient that certifies a point);
- ``matmul_parts(V)``: ``(K+ @ V, K- @ V)`` with ``K+ = max(K, 0)`` and ``K- = max(-K, 0)``,
  the split of m3-multiplicative-updates-large-margin.txt eq. (5), needed only when K has
  negative entries;
- ``rows(idx)`` and ``diagonal()``: what subset and coordinate solvers read.

:class:`DenseGram` holds K in process memory. The distributed operator
(:class:`muflow.dask.store_operator.DaskGram`, Gram panels resident on Dask workers) subclasses the
same base, so every solver runs distributed unchanged. :mod:`muflow.backends` creates
either one.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

import numpy as np

from muflow.exceptions import MuflowInputError, SolverCombinationError


def operand_dtype(operator) -> type:
    """The dtype an operator's products ``K @ V`` are computed and rounded in
    (:attr:`GramOperator.product_dtype`): the dtype of the operand and of the product a
    multiplicative pass hands to :meth:`GramOperator.matmul_native` (its compiled loops are
    specialised for float32 and float64), and the precision by which the solver judges
    whether a pass lowered the objective. One rule for every operator: a float32 Gram in
    memory, float32 rows on demand, float32 panels on Dask workers all multiply in float32;
    an operator whose rows are float32 but whose products are summed in float64 says so."""
    dtype = getattr(operator, "product_dtype", None)
    return np.dtype(operator.dtype if dtype is None else dtype).type


#: Rows of K split at a time by :func:`split_product` (bounds its temporaries).
SPLIT_ROWS = 2048


def split_product(block: np.ndarray, V: np.ndarray, rows: int = SPLIT_ROWS):
    """``(max(B, 0) @ V, max(-B, 0) @ V)`` for rows B of K (M3 eq. (5)), ``rows`` rows of B
    split at a time, so that the split costs at most that many rows of temporaries."""
    pos = np.empty((len(block), V.shape[1]), dtype=np.result_type(block, V))
    neg = np.empty_like(pos)
    for s in range(0, len(block), rows):
        b = block[s:s + rows]
        pos[s:s + len(b)] = np.maximum(b, 0) @ V
        neg[s:s + len(b)] = np.maximum(-b, 0) @ V
    return pos, neg


def require_rows(operator, solver: str | None = None) -> None:
    """Refuse an operator that cannot give rows of K to a solver that reads them.

    Raises
    ------
    SolverCombinationError
        Naming the operator and the fix.
    """
    if isinstance(operator, GramOperator) and operator.has_rows:
        return
    who = "this solver" if solver is None else f"solver {solver!r}"
    raise SolverCombinationError(
        f"{who} reads rows of K and this operator ({type(operator).__name__}) cannot return "
        "them; wrap K in muflow.operators.DenseGram or use a multiplicative solver ('m3'), "
        "which only needs products K @ V"
    )


class GramOperator(ABC):
    """What solvers may ask of a Gram matrix K (n x n, symmetric).

    A subclass implements :meth:`matmul` and, for the subset and coordinate solvers,
    :meth:`rows` and :meth:`diagonal`; the other methods have defaults built on those.

    Attributes
    ----------
    n : int
    nonnegative : bool
        True when no entry of K is negative (MUNK applies, ``matmul_parts`` is cheap).
    dtype : numpy dtype
        Storage of K (float32 or float64).
    product_dtype : numpy dtype
        The dtype :meth:`matmul` and :meth:`matmul_native` compute and round ``K @ V`` in;
        None (the default): :attr:`dtype`. An operator whose products are summed in float64
        over float32 rows sets float64.
    seconds : float
        Time spent in products, for solvers' timing reports.
    products : int
        Products answered.
    """

    n: int
    nonnegative: bool
    dtype = np.dtype(np.float64)
    product_dtype = None
    seconds = 0.0
    products = 0
    #: Rows per block of the default :meth:`matmul_parts`.
    block_rows = 2048

    @abstractmethod
    def matmul(self, V: np.ndarray) -> np.ndarray:
        """``K @ V`` in float64, V of shape (n, m)."""

    def matmul_native(self, V: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``K @ V`` in K's storage dtype; into ``out`` (C-ordered) when given.

        Default: :meth:`matmul`, copied into ``out``.
        """
        product = self.matmul(V)
        if out is None:
            return product
        np.copyto(out, product)
        return out

    def matmul_precise(self, V: np.ndarray) -> np.ndarray:
        """``K @ V`` accumulated in float64 whatever K's storage. Default: :meth:`matmul`."""
        return self.matmul(V)

    def matmul_parts(self, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(K+ @ V, K- @ V)``, K+ = max(K, 0), K- = max(-K, 0) (M3 eq. (5)).

        Default: ``(K @ V, 0)`` on a non-negative K, else the split of :meth:`rows`,
        ``block_rows`` rows at a time.
        """
        if self.nonnegative:
            pos = self.matmul(V)
            return pos, np.zeros_like(pos)
        V = np.asarray(V, dtype=np.float64)
        pos = np.empty((self.n, V.shape[1]))
        neg = np.empty_like(pos)
        for start in range(0, self.n, self.block_rows):
            block = self.rows(np.arange(start, min(start + self.block_rows, self.n)))
            pos[start : start + len(block)], neg[start : start + len(block)] = split_product(block, V)
        return pos, neg

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """``K[idx, :]`` in float64, shape (len(idx), n)."""
        require_rows(self)

    def diagonal(self) -> np.ndarray:
        """The diagonal of K in float64, shape (n,)."""
        require_rows(self)

    @property
    def has_rows(self) -> bool:
        """Whether :meth:`rows` and :meth:`diagonal` are answered (subset solvers need them)."""
        cls = type(self)
        return cls.rows is not GramOperator.rows and cls.diagonal is not GramOperator.diagonal

    @property
    def dense(self) -> np.ndarray | None:
        """K as an array in this process's memory, or None where K lives elsewhere."""
        return None

    def close(self) -> None:
        """Release what the operator holds (workers' panels, a client it opened)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DenseGram(GramOperator):
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

    def __init__(self, K: np.ndarray):
        K = np.asarray(K)
        if K.ndim != 2 or K.shape[0] != K.shape[1]:
            raise MuflowInputError(f"a Gram matrix must be square, got shape {K.shape}")
        if K.dtype not in (np.float32, np.float64):
            K = K.astype(np.float64)
        self.K = K
        self.dtype = K.dtype
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

    def diagonal(self):
        return np.diag(self.K).astype(np.float64)

    @property
    def dense(self):
        return self.K
