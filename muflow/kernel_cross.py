"""The block of K between two sets of samples, times a matrix, from X on demand.

A sweep's fold reads its decision values at its held-out samples from its support vectors
(:func:`muflow.subproblems.decision_values`), and a refit along a C path starts from the
gradient a known solution gives (:func:`muflow.selection.kernel_solve.known_products`):
both need ``K[rows][:, cols] @ V`` for a few rows, where a product ``K @ V`` costs every row
of K. :func:`cross_matmul` computes just that block, as
:class:`muflow.kernel_rows.KernelRows` computes rows, and sums it in float64 as
:meth:`~muflow.kernel_rows.KernelRows.matmul_precise` does.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.inmemory import PRODUCT_KERNELS, run_panels


def cross_matmul(op, rows, cols, V) -> np.ndarray:
    """``K[rows][:, cols] @ V`` in float64, shape (len(rows), m), for the operator ``op``
    (a :class:`~muflow.kernel_rows.KernelRows`): the block of K between two sets of samples
    alone, computed as rows are (from the same prepared values, a panel of ``block_rows``
    rows at a time on every thread) and summed in float64 over those values, as
    :meth:`~muflow.kernel_rows.KernelRows.matmul_precise` sums (a column chunk at a time,
    while it is in the CPU's cache), so that the result serves as a gradient. Counted in
    the operator's ``products`` and ``seconds``.

    Parameters
    ----------
    rows, cols : array-like of int
        Sample indices; they may overlap (a shared sample's entry is K's exact diagonal).
    V : ndarray of shape (len(cols), m)
    """
    t = time.perf_counter()
    rows, cols = op._index(rows), op._index(cols)
    V = np.asarray(V, dtype=np.float64)
    if V.ndim != 2 or V.shape[0] != cols.size:
        raise MuflowInputError(f"V must have shape ({cols.size}, m), got {V.shape}")
    out = np.zeros((rows.size, V.shape[1]))
    if rows.size == 0 or cols.size == 0:
        return out
    sub = op.restricted(cols)
    order = np.argsort(cols, kind="stable")
    at = np.minimum(np.searchsorted(cols[order], rows), cols.size - 1)
    same_rows = np.where(cols[order][at] == rows, order[at], -1).astype(np.int64)
    source = op.source
    chunked = sub._chunked and op.kernel.name in PRODUCT_KERNELS
    scratch, wides = {}, {}  # per thread: the chunk, and the chunk widened to float64

    def work(p0, p1, worker):
        r = rows[p0:p1]
        same = same_rows[p0:p1].copy()
        if chunked:  # rows of X as prepared here, against the prepared columns
            def consume(c0, c1, piece):
                wide = wides.get(worker)
                if wide is None or wide.size < piece.size:
                    wide = wides[worker] = np.empty(piece.size)
                wide = wide[: piece.size].reshape(piece.shape)
                np.copyto(wide, piece)
                out[p0:p1] += wide @ V[c0:c1]

            sub._chunks_into(None, source.X[r], source.sq[r], same, None, None, scratch,
                             worker, consume=consume)
            return
        # sparse X or laplacian: unshifted values, the float64 block in the rows' dtype
        block = op.kernel.block_into(source.X[r], sub.source.X, np.empty((r.size, sub.n)),
                                     same_rows=same)
        out[p0:p1] = block.astype(op.dtype).astype(np.float64) @ V

    run_panels(rows.size, op.block_rows, work, n_threads=op.n_threads)
    op.products += 1
    op.seconds += time.perf_counter() - t
    return out


__all__ = ["cross_matmul"]
