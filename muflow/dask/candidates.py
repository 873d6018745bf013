"""The partitions' answers merged on the client: the working set's candidate pool.

Each partition of :class:`muflow.dask.partitions.DaskRowPartitions` answers its best
candidates of each side (:meth:`muflow.dask.partition_column.PartitionColumn.iterate`);
:class:`CandidatePool` concatenates them in global index order into the arrays and the
:class:`~muflow.solvers.working_set_loop.PairView` that
:func:`~muflow.solvers.working_set_loop.select_working_set` reads. The candidates' rows of X
come with the answers, or from the client's own X where it holds it (they then need not
travel).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from muflow.solvers.working_set_loop import PairView


def stack_rows(rows):
    """Rows of X from several partitions, dense or CSR, in order."""
    if any(sp.issparse(r) for r in rows):
        return sp.vstack([sp.csr_matrix(r) for r in rows], format="csr")
    return np.concatenate(rows, axis=0)


def row_bytes(X) -> int:
    """The payload of rows of X, dense or CSR (their values); 0 for None (not sent)."""
    if X is None:
        return 0
    return X.data.nbytes if sp.issparse(X) else X.nbytes


class CandidatePool:
    """The partitions' merged answers: the candidates' data, in global index order."""

    def __init__(self, answers, equality, take=None, rows=None):
        cat = lambda key: np.concatenate([np.asarray(a[key]) for a in answers])  # noqa: E731
        self.idx = cat("idx")
        self.y, self.a, self.U, self.G, self.QD = cat("y"), cat("a"), cat("U"), cat("G"), cat("QD")
        # the candidates' rows of X: this process's own where it holds X (``take``), else
        # each answer's (``rows``, completed by muflow.dask.answered_rows, or as they came)
        self.X = (take(self.idx) if take is not None
                  else stack_rows(rows if rows is not None else [a["X"] for a in answers]))
        self.n_active = sum(int(a["n_act"]) for a in answers)
        if equality:
            self.view = PairView(self.a, self.U,
                                 v_up=np.concatenate([a["scores"][0] for a in answers]),
                                 v_low=np.concatenate([a["scores"][1] for a in answers]))
        else:
            self.view = PairView(self.a, self.U,
                                 projected=np.concatenate([a["scores"][0] for a in answers]))

    def positions(self, idx) -> np.ndarray:
        """Positions of the global indices ``idx`` (all in the pool) in the pool."""
        return np.searchsorted(self.idx, idx)


__all__ = ["CandidatePool", "row_bytes", "stack_rows"]
