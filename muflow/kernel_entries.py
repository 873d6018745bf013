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
    # the diagonal entries: where a row is one of the columns
    order = np.argsort(cols, kind="stable")
    at = np.minimum(np.searchsorted(cols[order], rows), cols.size - 1)
    same = np.where(cols[order][at] == rows, order[at], -1).astype(np.int64)
    return _against(op, cols)(rows, same, out)


def square_entries(op, idx):
    """A callable ``part(r0, r1, out)`` that writes ``K[idx[r0:r1]][:, idx]`` into ``out``
    (C-ordered, the operator's dtype) for distinct ``idx``: the working set's K_BB by blocks
    of its rows, each entry the same as :func:`entries_into` gives, with X_B's columns, norms
    and diagonal positions prepared once for all the blocks instead of once a block. A
    block's call is compiled loops but for a few small gathers, so that threads computing
    blocks side by side do not queue for the GIL.

    Where the entries are exactly symmetric (sparse rows, rbf, float32: one compiled call
    a block), ``part.symmetric(out, block)`` returns ``deal()``, which threads call side by
    side to fill all of ``out``, each block of rows computed from its diagonal on and
    mirrored (:func:`muflow._kernel_compiled.sparse_rbf_square`)."""
    if not op._chunked:  # sparse X, laplacian: the general path
        return lambda r0, r1, out: entries_into(op, idx[r0:r1], idx, out)
    BT, sq_B = columns = _columns(op, idx)
    against = _against(op, idx, columns)
    positions = np.arange(idx.size, dtype=np.int64)  # row r of idx is column r

    def part(r0, r1, out):
        return against(idx[r0:r1], positions[r0:r1], out)

    if not op._sparse_rbf:
        return part
    # the rows' compiled call with every block's arguments sliced from one preparation; the
    # sparse rows' entry (i, j) adds the same terms in the same order as (j, i)
    # (:func:`muflow._kernel_compiled.sparse_rows_product`) and the finish is symmetric in
    # the two norms: K_BB is exactly symmetric, and a block's columns from its own suffice
    blocks = []  # prepared on the first block asked for (a solve asks for the whole)

    def one_call(r0, r1, out):
        if out.flags.c_contiguous and out.dtype == np.float32:
            if not blocks:
                blocks.append(op.source.sparse_rbf_blocks(op.kernel, idx, positions, XT=BT,
                                                          sq=sq_B))
            blocks[0](r0, r1, out)
        else:
            part(r0, r1, out)

    def symmetric(out, block):
        # the whole K_BB into ``out``: each thread that calls the ``deal`` returned takes
        # blocks of ``block`` rows in one compiled loop, each block's entries from its own
        # diagonal on, the rest mirrored (:func:`muflow._kernel_compiled.sparse_rbf_square`)
        from muflow import _kernel_compiled as kc

        args = (*op.source.sparse_rbf_args(op.kernel, idx, sq_B, positions, BT, sq_B), out,
                int(block), np.zeros(1, dtype=np.int64))
        return lambda: kc.sparse_rbf_square(*args)

    one_call.symmetric = symmetric
    return one_call


def _columns(op, cols) -> tuple[np.ndarray, np.ndarray]:
    """``(X^T, squared norms)`` of the columns ``cols``, gathered once for every block of
    rows against them (dense X in the operator's dtype: ``op._chunked``; from its CSR
    where X is mostly zeros, the same values)."""
    source = op.source
    if source.csr is None:
        return np.ascontiguousarray(source.X[cols].T), source.sq[cols]
    from muflow import _kernel_compiled as kc

    BT = np.empty((source.X.shape[1], len(cols)), dtype=source.X.dtype)
    kc.csr_columns_T(*source.csr, np.ascontiguousarray(cols, dtype=np.int64), BT)
    return BT, source.sq[cols]


def _against(op, cols, columns=None):
    """A callable ``part(rows, same, out)`` that writes ``K[rows][:, cols]`` into ``out``
    (``same[r] = c >= 0`` where row r is column c: its diagonal entry), with the columns'
    X^T and norms (``columns``, default :func:`_columns`) gathered once, by the product and
    finish of the rows' panels (sparse rows against X^T where X is mostly zeros, else one
    BLAS product)."""
    source = op.source
    BT, sq_B = _columns(op, cols) if columns is None else columns
    one_call = op._sparse_rbf  # the rows' own compiled call (KernelRows._begin_tiles)

    def part(rows, same, out):
        if one_call and out.flags.c_contiguous and out.dtype == np.float32:
            # product and finish in one compiled call, as the rows' (their entries to
            # the bit): a block holds the GIL for a few small gathers alone
            rows = np.asarray(rows, dtype=np.int64)
            source.sparse_rbf_blocks(op.kernel, rows, same, XT=BT, sq=sq_B)(0, rows.size, out)
            return out
        if source.csr is not None and out.flags.c_contiguous:
            source.product_into(rows, BT, out)
            return op.kernel.block_into(None, None, out, sq_A=source.sq[rows], sq_B=sq_B,
                                        same_rows=same, product_ready=True)
        return op.kernel.block_into(source.X[rows], None, out, BT=BT, sq_A=source.sq[rows],
                                    sq_B=sq_B, same_rows=same)

    return part
