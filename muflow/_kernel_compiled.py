"""Compiled element-wise finish of float32 kernel blocks (numba, cached on disk).

A block of K is one BLAS product ``G = A B'`` followed by an element-wise transform
(:meth:`muflow.kernels.Kernel.block_into`). For a float32 block the transform is one pass
over G here, in place, released from the GIL so that the threads of
:mod:`muflow.inmemory` finish their panels side by side.

NumPy's float32 ``exp`` is a scalar libm call on CPUs without AVX-512, as costly over a
whole Gram as the sgemm that computed it. :func:`exp_nonpositive` is the Cephes ``expf``
(Moshier, Cephes Math Library, ``expf.c``: Cody-Waite reduction by ln 2 in two parts,
degree-5 polynomial on [-ln2/2, ln2/2], within about one ulp) written with branch-free
operations and a bit cast for the power of two, which LLVM vectorises (8 floats per AVX2
instruction). Its argument is never positive here: rbf's -gamma ||a - b||^2 and tanh's -2|x|.

Each function is compiled for one signature: a C-contiguous float32 block (and float64
norms and parameters for rbf, float32 scalars otherwise); float64 blocks are finished by
NumPy in :meth:`~muflow.kernels.Kernel.block_into`.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from muflow._atomic_compiled import take_next

# Cephes expf: ln 2 = _LN2_HI + _LN2_LO with _LN2_HI exact in a few bits, so that
# x - n ln2 loses nothing for |n| <= 126
_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_P0 = np.float32(1.9875691500e-4)
_P1 = np.float32(1.3981999507e-3)
_P2 = np.float32(8.3334519073e-3)
_P3 = np.float32(4.1665795894e-2)
_P4 = np.float32(1.6666665459e-1)
_P5 = np.float32(5.0000001201e-1)
#: Below this exp(x) < 1.7e-38, under float32's smallest normal: the result is 0.
_EXP_FLOOR = np.float32(-87.0)

# contraction into fused multiply-adds only: reassociation would fold the two-part
# reduction x - n ln2_hi - n ln2_lo back into one rounded ln 2
_FLAGS = {"contract", "nnan", "ninf", "nsz"}


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the low 32 bits of the integer ``bits``."""
    if not isinstance(bits, types.Integer):
        return None
    sig = types.float32(bits)

    def codegen(context, builder, signature, args):
        value = args[0]
        if signature.args[0].bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        elif signature.args[0].bitwidth < 32:
            value = builder.sext(value, ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return sig, codegen


@intrinsic
def _float64_from_bits(typingctx, bits):
    """The float64 whose IEEE bits are the 64-bit integer ``bits``."""
    if not isinstance(bits, types.Integer) or bits.bitwidth != 64:
        return None
    sig = types.float64(bits)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


# exp in float64: ln 2 in two parts as Cephes exp.c (C1 exact in 16 bits), then the Taylor
# polynomial of degree 13 on [-ln2/2, ln2/2] (truncation below 1e-17 relative)
_LN2_HI64 = 6.93145751953125e-1
_LN2_LO64 = 1.42860682030941723212e-6
_EXP64_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(13, -1, -1))
#: Below this exp(x) is under float64's smallest normal: the result is 0.
_EXP64_FLOOR = -708.0


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy")
def exp_nonpositive64(x):
    """exp(x) for float64 x <= 0 within a few ulp, branch-free so that it vectorises; 0
    below -708."""
    n = np.floor(x * 1.4426950408889634 + 0.5)
    r = x - n * _LN2_HI64
    r = r - n * _LN2_LO64
    p = 0.0
    for c in _EXP64_TAYLOR:  # Horner, highest degree first (a fixed count: unrolled)
        p = p * r + c
    m = max(n, -1022.0)  # keeps the exponent bits valid where x < -708 (the result is 0)
    scale = _float64_from_bits((np.int64(m) + np.int64(1023)) << np.int64(52))
    return p * scale if x >= _EXP64_FLOOR else 0.0


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy")
def exp_nonpositive(x):
    """exp(x) for float32 x <= 0 (Cephes expf); 0 below -87."""
    n = np.floor(x * _LOG2E + np.float32(0.5))
    r = x - n * _LN2_HI
    r = r - n * _LN2_LO
    p = _P0 * r + _P1
    p = p * r + _P2
    p = p * r + _P3
    p = p * r + _P4
    p = p * r + _P5
    p = p * (r * r) + r + np.float32(1.0)
    scale = _float32_from_bits((np.int32(n) + np.int32(127)) << np.int32(23))
    return p * scale if x >= _EXP_FLOOR else np.float32(0.0)


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy")
def _tanh(x):
    """tanh(x) in float32: its Taylor series up to x^9 for |x| < 1/4, where 1 - e^(-2|x|)
    would cancel, and (1 - e) / (1 + e) with e = exp(-2|x|) beyond."""
    a = abs(x)
    z = x * x
    series = x * (np.float32(1.0) + z * (np.float32(-1.0 / 3.0) + z * (np.float32(2.0 / 15.0) + z * (
        np.float32(-17.0 / 315.0) + z * np.float32(62.0 / 2835.0)))))
    e = exp_nonpositive(np.float32(-2.0) * a)
    tail = (np.float32(1.0) - e) / (np.float32(1.0) + e)
    tail = tail if x >= np.float32(0.0) else -tail
    return series if a < np.float32(0.25) else tail


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy")
def finish_rbf(G, sq_A, sq_B, gamma, offset):
    """G <- exp(-gamma max(sq_A_i + sq_B_j - 2 G_ij, 0)) + offset, in place.

    G is float32 (the sgemm product), the norms float64: the squared distance
    ||a||^2 + ||b||^2 - 2 a'b, where the terms cancel, is formed in float64 so that the
    only float32 error left in it is the product's; it is clamped at 0 (no entry above
    1 + offset) and only the exponent is rounded to float32.
    """
    for i in range(G.shape[0]):
        _rbf_exponents(G[i], sq_A[i], sq_B, gamma)
        _exp_plus(G[i], G[i], offset)


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy")
def _rbf_exponents(row, a, sq_B, gamma):
    """row[j] <- -gamma max(a + sq_B[j] - 2 row[j], 0) in place, the distance in float64 and
    the exponent rounded to float32: the first of rbf's two passes over a row that stays in
    cache, each vectorising at its own width (4 doubles here, 8 floats in :func:`_exp_plus`)."""
    zero = 0.0
    for j in range(row.shape[0]):
        row[j] = np.float32(-gamma * max(a + sq_B[j] - 2.0 * np.float64(row[j]), zero))


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy")
def _exp_plus(exponents, out, offset):
    """out[j] <- exp(exponents[j]) + offset (:func:`exp_nonpositive`); ``out`` may be
    ``exponents`` itself."""
    for j in range(exponents.shape[0]):
        out[j] = exp_nonpositive(exponents[j]) + offset


@njit(cache=True, fastmath=_FLAGS | {"reassoc"}, error_model="numpy")
def _dot64(values, weights):
    """sum_j values[j] * weights[j] in float64 (float32 values widened), the order of the
    sum left to the compiler so that it vectorises."""
    total = 0.0
    for j in range(values.shape[0]):
        total += np.float64(values[j]) * weights[j]
    return total


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy")
def rbf_decisions(G, sq_A, sq_B, gamma, offset, WT, out):
    """out[i, q] = sum_j WT[q, j] K_ij, K = :func:`finish_rbf` of G (same rounding), G
    overwritten with K a row at a time and summed in float64 while the row is in cache:
    prediction's decision values without a float64 copy of K (:mod:`muflow.prediction`)."""
    for i in range(G.shape[0]):
        finish_rbf(G[i:i + 1], sq_A[i:i + 1], sq_B, gamma, offset)
        for q in range(WT.shape[0]):
            out[i, q] = _dot64(G[i], WT[q])


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy")
def rbf_decisions64(G, sq_A, sq_B, gamma, offset, WT, out):
    """:func:`rbf_decisions` for a float64 product G: K_ij = exp(-gamma max(sq_A_i + sq_B_j
    - 2 G_ij, 0)) + offset in float64 (:func:`exp_nonpositive64`), summed against WT."""
    zero = 0.0
    for i in range(G.shape[0]):
        a = sq_A[i]
        row = G[i]
        for j in range(row.shape[0]):
            row[j] = exp_nonpositive64(-gamma * max(a + sq_B[j] - 2.0 * row[j], zero)) + offset
        for q in range(WT.shape[0]):
            out[i, q] = _dot64(row, WT[q])


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy")
def finish_sigmoid(G, gamma, coef0, offset):
    """G <- tanh(gamma G + coef0) + offset, in place (float32)."""
    for i in range(G.shape[0]):
        row = G[i]
        for j in range(row.shape[0]):
            row[j] = _tanh(gamma * row[j] + coef0) + offset


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy")
def finish_poly(G, gamma, coef0, degree, offset):
    """G <- (gamma G + coef0) ** degree + offset, in place (float32).

    The power is taken one factor at a time over a whole row (``degree - 1`` passes over a
    row that stays in cache), which vectorises where a per-element loop would not.
    """
    base = np.empty(G.shape[1], dtype=np.float32)
    for i in range(G.shape[0]):
        row = G[i]
        for j in range(row.shape[0]):
            base[j] = gamma * row[j] + coef0
            row[j] = base[j]
        for _ in range(degree - 1):
            for j in range(row.shape[0]):
                row[j] *= base[j]
        for j in range(row.shape[0]):
            row[j] += offset


#: Columns of a row accumulated at a time by :func:`sparse_rows_product` (8 KiB of float32:
#: the accumulator stays in L1 while the row's entries add their rows of X^T into it).
_SPARSE_CHUNK = 2048


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy", boundscheck=False)
def sparse_rows_product(indptr, indices, values, rows, XT, c0, c1, out):
    """out[r, :] <- X[rows[r], :] @ X^T[:, c0:c1] for sparse rows of X (CSR: ``indptr``,
    ``indices``, ``values``, int64 / float32) and the dense float32 ``XT``.

    A row with e stored entries costs e AXPYs over the columns (e n multiply-adds) where a
    dense product costs n_features n; the columns go by chunks of 2048, so each chunk's
    accumulator stays in L1 and the entries' rows of X^T stream from L2. The terms of an
    entry ``(i, j)`` are added in the order of the features, with zeros of ``X[i]``
    skipped and those of ``X[j]`` adding exact zeros: ``out`` is the same whichever of the
    two is the row (K stays exactly symmetric).
    """
    buffer = np.empty(_SPARSE_CHUNK, dtype=np.float32)
    for s0 in range(c0, c1, _SPARSE_CHUNK):
        w = min(c1, s0 + _SPARSE_CHUNK) - s0
        acc = buffer[:w]
        for r in range(rows.shape[0]):
            _sparse_row_chunk(indptr, indices, values, rows[r], XT, s0, acc)
            o = out[r, s0 - c0:s0 - c0 + w]
            for c in range(w):
                o[c] = acc[c]


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy", boundscheck=False)
def _sparse_row_chunk(indptr, indices, values, i, XT, s0, acc):
    """acc <- X[i, :] @ X^T[:, s0:s0 + acc.size] for the sparse row i: the sum of one AXPY a
    stored entry, in the order of the features (:func:`sparse_rows_product`).

    Four stored entries go through the accumulator in one pass: each entry of ``acc`` is
    still the chain of fused multiply-adds, one feature after the other, that four passes
    of one AXPY each make (the same value to the bit), for one load and one store of
    ``acc`` where four passes made four of each."""
    w = acc.shape[0]
    for c in range(w):
        acc[c] = np.float32(0.0)
    p, stop = indptr[i], indptr[i + 1]
    while p + 4 <= stop:
        v0, v1, v2, v3 = values[p], values[p + 1], values[p + 2], values[p + 3]
        x0 = XT[indices[p], s0:s0 + w]
        x1 = XT[indices[p + 1], s0:s0 + w]
        x2 = XT[indices[p + 2], s0:s0 + w]
        x3 = XT[indices[p + 3], s0:s0 + w]
        for c in range(w):
            acc[c] = (((acc[c] + v0 * x0[c]) + v1 * x1[c]) + v2 * x2[c]) + v3 * x3[c]
        p += 4
    while p < stop:
        v = values[p]
        x = XT[indices[p], s0:s0 + w]
        for c in range(w):
            acc[c] += v * x[c]
        p += 1


@njit(cache=True, inline="always", fastmath=_FLAGS, error_model="numpy")
def _finish_row_into(row, a, sq_B, gamma, offset, out, same, diag):
    """out <- :func:`finish_rbf` of the product row ``row`` (kept as scratch), with
    out[same] = diag where 0 <= same < out.size (K's exact diagonal)."""
    _rbf_exponents(row, a, sq_B, gamma)
    _exp_plus(row, out, offset)
    if 0 <= same < out.shape[0]:
        out[same] = diag


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy", boundscheck=False)
def finish_rbf_into(G, sq_A, sq_B, gamma, offset, same, diag, data, slots, c0):
    """data[slots[i], c0:c0 + w] <- :func:`finish_rbf` of the product row G[i] (w its
    columns), written straight into the cache rows instead of into G and then copied
    there: the same operations on each entry; ``same[i] = j >= 0`` where entry (i, j) of
    G is on K's diagonal (set to ``diag[i]``). G's rows keep the squared distances'
    exponents (scratch)."""
    w = G.shape[1]
    for i in range(G.shape[0]):
        _finish_row_into(G[i], sq_A[i], sq_B, gamma, offset, data[slots[i], c0:c0 + w], same[i],
                         diag[i])


def rbf_rows_finisher(kernel, sq_rows, sq, data, slots):
    """``finish(G, c0, same)``: :func:`finish_rbf_into` for the product G of the rows
    (squared norms ``sq_rows``) against the columns c0:c0 + w of X (norms ``sq``), written
    into ``data[slots]``; ``same`` as there. The arguments of every chunk are prepared once
    here."""
    gamma, offset = float(kernel.gamma), np.float32(kernel.offset)
    diag = kernel.diagonal_from_sq(sq_rows).astype(np.float32)
    sq_rows = np.ascontiguousarray(sq_rows, dtype=np.float64)
    slots = np.ascontiguousarray(slots, dtype=np.int64)

    def finish(G, c0, same):
        finish_rbf_into(G, sq_rows, sq[c0:c0 + G.shape[1]], gamma, offset, same, diag, data,
                        slots, c0)

    return finish


@njit(cache=True, nogil=True, fastmath=_FLAGS, error_model="numpy", boundscheck=False)
def sparse_rbf_rows_into(indptr, indices, values, rows, XT, sq_rows, sq, gamma, offset, same,
                         diag, data, slots, c0, c1):
    """data[slots[r], c0:c1] <- rbf rows of the sparse rows ``rows`` of X against its
    columns c0:c1, in one call: :func:`sparse_rows_product`'s accumulation, then
    :func:`finish_rbf`'s two passes over the chunk while it is still in L1, the second
    writing the cache row; ``same[r] = c >= 0`` where row r is column c (its entry set to
    ``diag[r]``, the exact diagonal). The same operations on each entry as the product,
    finish and scatter done one after the other, whatever the range of columns, so the
    rows are the same bit for bit; what goes is a scratch block written and read back and
    the Python calls between the three steps (one call a range of columns, where a batch of
    a few rows shared out over threads spent more in those calls than in the product)."""
    buffer = np.empty(_SPARSE_CHUNK, dtype=np.float32)
    for s0 in range(c0, c1, _SPARSE_CHUNK):
        w = min(c1, s0 + _SPARSE_CHUNK) - s0
        acc = buffer[:w]
        for r in range(rows.shape[0]):
            _sparse_row_chunk(indptr, indices, values, rows[r], XT, s0, acc)
            _finish_row_into(acc, sq_rows[r], sq[s0:s0 + w], gamma, offset,
                             data[slots[r], s0:s0 + w], same[r] - s0, diag[r])


@njit(cache=True, nogil=True)
def sparse_rbf_tiles(indptr, indices, values, rows, XT, sq_rows, sq, gamma, offset, same, diag,
                     data, slots, edges, tiles, counter):
    """The tiles of a batch of rows, each thread calling this loop taking the next tile
    from the shared ``counter`` (:func:`muflow._atomic_compiled.take_next`) until none is
    left: tile t is row group g = ``tiles[t, 0]`` (rows ``edges[g]`` to ``edges[g + 1]`` of
    the batch) against the columns ``tiles[t, 1]`` to ``tiles[t, 2]``, written by
    :func:`sparse_rbf_rows_into` (so the rows are the same bit for bit, whoever computes a
    tile). The other arguments are that function's, for the whole batch."""
    while True:
        t = take_next(counter)
        if t >= tiles.shape[0]:
            return
        r0, r1 = edges[tiles[t, 0]], edges[tiles[t, 0] + 1]
        sparse_rbf_rows_into(indptr, indices, values, rows[r0:r1], XT, sq_rows[r0:r1], sq,
                             gamma, offset, same[r0:r1], diag[r0:r1], data, slots[r0:r1],
                             tiles[t, 1], tiles[t, 2])


#: Side of the tiles :func:`mirror_right_of` copies: a tile's rows and its transpose's stay
#: in L1 while it is copied.
MIRROR_TILE = 16


@njit(cache=True, nogil=True, boundscheck=False)
def mirror_right_of(out, r0, r1):
    """``out[c, r0:r1] = out[r0:r1, c]`` for every column c >= r1 of the square ``out``:
    the entries below a block of rows r0:r1 of a symmetric K_BB from those right of it,
    which only that block's rows wrote; by tiles of :data:`MIRROR_TILE` squared."""
    q = out.shape[0]
    for c0 in range(r1, q, MIRROR_TILE):
        c1 = min(c0 + MIRROR_TILE, q)
        for i0 in range(r0, r1, MIRROR_TILE):
            i1 = min(i0 + MIRROR_TILE, r1)
            for c in range(c0, c1):
                for i in range(i0, i1):
                    out[c, i] = out[i, c]


@njit(cache=True, nogil=True)
def sparse_rbf_square(indptr, indices, values, rows, XT, sq_rows, sq, gamma, offset, same, diag,
                      out, block, counter):
    """The exactly symmetric ``out = K(X[rows], X[rows])`` (sparse rbf rows against their
    own columns ``XT``, norms ``sq``) by blocks of ``block`` rows, each thread calling this
    loop taking the next block from the shared ``counter``
    (:func:`muflow._atomic_compiled.take_next`), the longest first: a block's entries
    from its own diagonal on by :func:`sparse_rbf_rows_into` (the rows' entries to the bit:
    entry (i, j) adds the same terms in the same order as (j, i)), then the block's part
    below the diagonal mirrored (:func:`mirror_right_of`; only that block's rows are read
    and only entries no block computes are written, so the threads never write one entry
    twice)."""
    q = rows.shape[0]
    slots = np.arange(block)
    n_blocks = (q + block - 1) // block
    while True:
        k = take_next(counter)
        if k >= n_blocks:
            return
        r0 = k * block
        r1 = min(q, r0 + block)
        sparse_rbf_rows_into(indptr, indices, values, rows[r0:r1], XT, sq_rows[r0:r1], sq,
                             gamma, offset, same[r0:r1], diag[r0:r1], out[r0:r1],
                             slots[: r1 - r0], r0, q)
        mirror_right_of(out, r0, r1)


@njit(cache=True, nogil=True, boundscheck=False)
def dense_to_csr(X):
    """``(indptr, indices, values)`` (int64, int64, X's dtype) of the non-zero entries of the
    C-ordered 2-D ``X``, row by row in column order: what ``scipy.sparse.csr_matrix(X)``
    holds, in two passes over X and no index arrays of every entry."""
    n, d = X.shape
    indptr = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        count = 0
        for j in range(d):
            if X[i, j] != 0:
                count += 1
        indptr[i + 1] = indptr[i] + count
    indices = np.empty(indptr[n], dtype=np.int64)
    values = np.empty(indptr[n], dtype=X.dtype)
    for i in range(n):
        p = indptr[i]
        for j in range(d):
            if X[i, j] != 0:
                indices[p] = j
                values[p] = X[i, j]
                p += 1
    return indptr, indices, values


@njit(cache=True, nogil=True)
def csr_columns_T(indptr, indices, values, cols, out):
    """``out <- X[cols].T`` (``out`` of shape (n_features, cols.size), float32) from X's
    CSR: zeros, then each stored entry of the rows ``cols`` in its place, where gathering
    the dense rows and transposing them reads and writes every feature of every row. The
    same values: an entry the CSR does not store is a zero of X."""
    out[:] = 0
    for b in range(cols.shape[0]):
        i = cols[b]
        for p in range(indptr[i], indptr[i + 1]):
            out[indices[p], b] = values[p]
