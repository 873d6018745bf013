"""Entries of K at chosen rows and columns, from the prepared X of rows on demand.

The working-set solver (:mod:`muflow.solvers.working_set`) solves its subproblem on K_BB
while B's missing rows are computed (oneDAL's thunder solver and ThunderSVM overlap them
likewise), so K_BB is computed here from X at B's columns alone, before the rows exist. Each
entry comes from the same prepared values (:class:`muflow.inmemory.RowSource`), the same
product and the same finish (:meth:`muflow.kernels.Kernel.block_into`) as the rows' panels
of :class:`muflow.kernel_rows.KernelRows`: a K_BB does not depend on whether its rows were
cached.
"""

from __future__ import annotations

import numpy as np

from muflow.inmemory import Columns


def entries_into(op, rows, cols, out: np.ndarray) -> np.ndarray:
    """``K[rows][:, cols]`` of the operator ``op`` (a :class:`~muflow.kernel_rows.KernelRows`)
    into ``out`` (C-ordered, its dtype); ``rows`` and ``cols`` int64 sample indices."""
    source = op.source
    if not op._chunked:  # sparse X, laplacian
        out[...] = Columns(source, cols).panel_into(op.kernel, rows, np.empty(out.shape))
        return out
    # Columns(source, cols) without its n-long position map: B's few columns of X^T
    # gathered from their rows of X
    B = source.X[cols]
    BT = np.ascontiguousarray(B.T)
    order = np.argsort(cols, kind="stable")
    at = np.minimum(np.searchsorted(cols[order], rows), cols.size - 1)
    same = np.where(cols[order][at] == rows, order[at], -1).astype(np.int64)
    if source.csr is not None and out.flags.c_contiguous:
        source.product_into(rows, BT, out)
        return op.kernel.block_into(None, None, out, sq_A=source.sq[rows],
                                    sq_B=source.sq[cols], same_rows=same, product_ready=True)
    return op.kernel.block_into(source.X[rows], B, out, BT=BT, sq_A=source.sq[rows],
                                sq_B=source.sq[cols], same_rows=same)


def square_entries(op, idx):
    """A callable ``part(r0, r1, out)`` that writes ``K[idx[r0:r1]][:, idx]`` into ``out``
    (C-ordered, the operator's dtype) for distinct ``idx``: the working set's K_BB by blocks
    of its rows, each entry the same as :func:`entries_into` gives, with X_B's columns, norms
    and diagonal positions prepared once for all the blocks instead of once a block. A
    block's call is compiled loops but for a few small gathers, so that threads computing
    blocks side by side do not queue for the GIL."""
    source = op.source
    if not op._chunked:  # sparse X, laplacian: the general path
        return lambda r0, r1, out: entries_into(op, idx[r0:r1], idx, out)
    BT = np.ascontiguousarray(source.X[idx].T)
    sq_B = source.sq[idx]
    positions = np.arange(idx.size, dtype=np.int64)  # row r of idx is column r

    def part(r0, r1, out):
        rows, same = idx[r0:r1], positions[r0:r1]
        if source.csr is not None and out.flags.c_contiguous:
            source.product_into(rows, BT, out)
            return op.kernel.block_into(None, None, out, sq_A=source.sq[rows], sq_B=sq_B,
                                        same_rows=same, product_ready=True)
        return op.kernel.block_into(source.X[rows], None, out, BT=BT, sq_A=source.sq[rows],
                                    sq_B=sq_B, same_rows=same)

    return part
