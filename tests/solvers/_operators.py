"""Test-only operators."""

from __future__ import annotations

from muflow.operators import DenseGram, GramOperator


class RowsOnlyGram(GramOperator):
    """An in-memory K that hides the array: solvers must fetch rows through ``rows``,
    as they do from the distributed store, so the row cache's eviction path is used."""

    def __init__(self, K):
        self._dense = DenseGram(K)
        self.n = self._dense.n
        self.nonnegative = self._dense.nonnegative

    def matmul(self, V):
        return self._dense.matmul(V)

    def rows(self, idx):
        return self._dense.rows(idx)

    def diagonal(self):
        return self._dense.diagonal()
