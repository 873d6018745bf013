"""Compiled pair steps of SMO with the sum constraint (numba, cached on disk).

The loop of :func:`smo_pairs` follows libsvm's solver: WSS 2 of Fan, Chen & Lin, "Working
set selection using second order information for training support vector machines" (JMLR
6, 2005), its closed-form pair update with clipping, and its shrinking (section 4). It reads
rows of K from the solver's :class:`muflow.solvers.rowcache.RowCache` (see
:mod:`muflow.solvers._subset_compiled` for the resumable protocol: ``NEED_ROW`` and the
state array) and keeps, across calls, a second cache of those rows restricted to the
active set (its arrays: :func:`muflow.solvers.smo.compact_rows`; the cache itself:
:mod:`muflow.solvers._compact_rows_compiled`).

The loop's helpers are inlined into it (``inline="always"``): a call from one compiled
function to another counts a reference up and down for every array it passes, atomic
operations that cost as much as the arithmetic of a step on a small active set.

Notation as in :mod:`muflow.solvers.problem`: for one column, G = Q alpha + p with
Q = diag(y) K diag(y), bounds 0 <= alpha_i <= U_i.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from muflow.solvers._subset_compiled import (CURVE_FULL, DONE, MAX_ITER, NEED_ROW, STATE_CURVE,
                                             STATE_ITER, STATE_NACT, STATE_NEED, STATE_PEND_I,
                                             STATE_PEND_J, STATE_SHRINK, UNSHRINK, _TAU, _slot,
                                             leaves_active_set)
from muflow.solvers._compact_rows_compiled import _compact_row, _compact_rows_for, _shrink_rows

_BLOCK = 64  # positions per block of the arg-min reductions


@njit(cache=True, inline="always")
def _membership(yk, ak, uk):
    """(in I_up, in I_low) of one variable: I_up = {y = +1, alpha < U} u {y = -1, alpha > 0},
    I_low = {y = +1, alpha > 0} u {y = -1, alpha < U} (Fan, Chen & Lin 2005, eq. (9))."""
    pos = yk > 0
    below = ak < uk
    above = ak > 0.0
    return (below if pos else above), (above if pos else below)


@njit(cache=True, inline="always")
def _lesser(x, m):
    return x if x < m else m


@njit(cache=True, inline="always")
def _block_minima(keys, bmin, n):
    """min(keys[:n]), and ``bmin[b]`` = the minimum of block b (positions 64 b .. 64 b + 63).

    Eight independent accumulators over a fixed trip count: numba (LLVM) does not vectorise
    a loop that tracks the index of its minimum, and the SMO step spent most of its time in
    two such loops. The minimum of a set does not depend on the order it is read in, so the
    value is the one the sequential loop finds; :func:`_tie_break` then finds the position.
    """
    best = np.inf
    full = n // _BLOCK
    for b in range(full):
        m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = np.inf
        for k in range(b * _BLOCK, (b + 1) * _BLOCK, 8):
            m0 = _lesser(keys[k], m0)
            m1 = _lesser(keys[k + 1], m1)
            m2 = _lesser(keys[k + 2], m2)
            m3 = _lesser(keys[k + 3], m3)
            m4 = _lesser(keys[k + 4], m4)
            m5 = _lesser(keys[k + 5], m5)
            m6 = _lesser(keys[k + 6], m6)
            m7 = _lesser(keys[k + 7], m7)
        m = _lesser(_lesser(_lesser(m0, m1), _lesser(m2, m3)),
                    _lesser(_lesser(m4, m5), _lesser(m6, m7)))
        bmin[b] = m
        best = _lesser(m, best)
    if full * _BLOCK < n:
        m = np.inf
        for k in range(full * _BLOCK, n):
            m = _lesser(keys[k], m)
        bmin[full] = m
        best = _lesser(m, best)
    return best


@njit(cache=True, inline="always")
def _tie_break(keys, bmin, target, idx, n):
    """Among the positions k < n with keys[k] == target, the one holding the largest sample
    index ``idx[k]``, searching only the blocks whose minimum is ``target`` (see
    :func:`_block_minima`); -1 if there is none. Ties go to the last sample, as a scan in
    index order with ``<=`` gives them, whatever order shrinking has left the positions in."""
    best = -1
    for b in range((n + _BLOCK - 1) // _BLOCK):
        if bmin[b] == target:
            for k in range(b * _BLOCK, min((b + 1) * _BLOCK, n)):
                if keys[k] == target and (best < 0 or idx[k] > idx[best]):
                    best = k
    return best


@njit(cache=True, inline="always")
def _argmin(keys, bmin, idx, n):
    """Position of the minimum of keys[:n] below +inf (ties: :func:`_tie_break`); -1 if every
    key is +inf (or NaN: NaN is never chosen, as in a scan)."""
    best = _block_minima(keys, bmin, n)
    if best == np.inf:
        return -1
    return _tie_break(keys, bmin, best, idx, n)


@njit(cache=True, error_model="numpy", inline="always")
def _pair_gains(yG, low, Dc, Ki, gmax, Dii, gain, lowkey, n_act):
    """``gain[k]`` = -(gmax + y_k G_k)^2 / (K_ii + K_kk - 2 K_ik) for k in I_low with
    gmax + y_k G_k > 0, else +inf: the objective change of the pair (i, k) in WSS 2 (Fan,
    Chen & Lin 2005, eq. (14); a non-positive curvature becomes tau). ``lowkey[k]`` =
    -y_k G_k on I_low, else +inf: its minimum is M(alpha), the stopping test's other half.

    Its own loop, with no reduction and no zero-division check (the curvature is at least
    tau), so that it is vectorised: the arg-min's reduction, fused in, would keep it scalar.
    """
    for k in range(n_act):
        gd = gmax + yG[k]
        quad = Dii + Dc[k] - 2.0 * Ki[k]
        quad = quad if quad > 0.0 else _TAU
        od = -(gd * gd) / quad
        gain[k] = od if (low[k] & (gd > 0.0)) else np.inf
        lowkey[k] = -yG[k] if low[k] else np.inf


@njit(cache=True, inline="always")
def _update_gradient(yG, up, Ki, Kj, ci, cj, upkey, n_act):
    """yG += ci K_i + cj K_j (the pair's change of y G), and ``upkey[k]`` = y_k G_k on I_up,
    else +inf: the keys of the next step's i (:func:`_working_index`). One loop with no
    reduction, so that it is vectorised."""
    for k in range(n_act):
        g = yG[k] + (ci * Ki[k] + cj * Kj[k])
        yG[k] = g
        upkey[k] = g if up[k] else np.inf


@njit(cache=True, inline="always")
def _working_index(yG, up, upkey, bmin, idx, n_act):
    """The position of the maximal -y G over I_up (ties: :func:`_tie_break`), -1 if I_up is
    empty, from the keys ``upkey`` (y G on I_up, +inf elsewhere). A y G of +inf, whose key
    is the +inf of a non-member, is looked for apart."""
    pos = _argmin(upkey, bmin, idx, n_act)
    if pos < 0:
        for k in range(n_act):
            if up[k] and yG[k] == np.inf and (pos < 0 or idx[k] > idx[pos]):
                pos = k
    return pos


@njit(cache=True, inline="always")
def _first_working_index(yG, up, upkey, bmin, idx, n_act):
    """:func:`_working_index` with the keys written first (a step's end writes them with its
    gradient update, :func:`_update_gradient`)."""
    for k in range(n_act):
        upkey[k] = yG[k] if up[k] else np.inf
    return _working_index(yG, up, upkey, bmin, idx, n_act)


@njit(cache=True, error_model="numpy")
def smo_pairs(y, U, alpha, G, QD, act, data, slot_of, stamp, clock, state, F, curve,
              gap_tol, unshrink_gap, max_updates, shrinking, shrink_every,
              cbuf, crow_of, cowner, cstamp, cidx, cstate):
    """SMO pair steps (sum constraint) on the active indices ``act[:state[0]]`` until the
    maximal-violation gap m(alpha) - M(alpha) is below ``gap_tol``; UNSHRINK as soon as it is
    at most ``unshrink_gap`` (-inf: never), so that the caller can bring the shrunk variables
    back before the active set is solved (libsvm's unshrinking, see
    :func:`muflow.solvers.smo.smo_column`).

    The working pair is chosen by WSS 2 (Fan, Chen & Lin 2005); the update and clipping are
    libsvm's. F (the objective) is updated exactly after every step and written to
    ``curve``. Returns DONE, NEED_ROW, MAX_ITER, CURVE_FULL or UNSHRINK (:mod:`._subset_compiled`).

    y, U, alpha, G and the diagonal of the active indices are copied into arrays indexed by
    position, so that the sweeps of a step read them contiguously and only the two kernel
    rows are gathered (libsvm keeps the same layout by permuting its indices). The copies
    are written back on every return and before shrinking. Shrinking moves the last kept
    variables into the dropped ones' positions, as libsvm swaps its indices, and applies
    the same moves to the cached compact rows (``cbuf`` and its bookkeeping, see
    :func:`_compact_rows_for`), which therefore stay valid; ``act[:state[0]]`` is left in
    position order, so that the next call finds the same layout.

    The sweeps have no data-dependent branches (labels and bounds are random from one
    position to the next, and mispredicted branches were most of a step's cost): the copy
    of G holds y_t G_t, in which both index sets of WSS 2 rank the same way (i maximises
    -y G over I_up, j is chosen over I_low with gradient y G), and set membership is kept
    in two flag arrays that change only at the pair a step moves. Multiplying by y = +-1
    is exact, so every step is the one the branching form takes. The arg-mins are block
    reductions (:func:`_block_minima`) whose ties go to the largest sample index: the steps
    do not depend on the order shrinking leaves the positions in.
    """
    n_act = state[STATE_NACT]
    idx = act[:n_act].copy()
    yc = np.empty(n_act)
    Uc = np.empty(n_act)
    ac = np.empty(n_act)
    yG = np.empty(n_act)
    Dc = np.empty(n_act)
    up = np.empty(n_act, dtype=np.bool_)
    low = np.empty(n_act, dtype=np.bool_)
    for k in range(n_act):
        t = idx[k]
        yc[k] = y[t]
        Uc[k] = U[t]
        ac[k] = alpha[t]
        yG[k] = y[t] * G[t]
        Dc[k] = QD[t]
        up[k], low[k] = _membership(yc[k], ac[k], Uc[k])
    rows = _compact_rows_for(idx, n_act, cbuf, crow_of, cowner, cidx, cstate)
    gain = np.empty(n_act)
    lowkey = np.empty(n_act)
    upkey = np.empty(n_act)
    bmin = np.empty((n_act + _BLOCK - 1) // _BLOCK)
    holes = np.empty(n_act, dtype=np.int64)
    sources = np.empty(n_act, dtype=np.int64)
    # a step interrupted by a cache miss resumes with its pair (global indices in state)
    pi = -1
    pj = -1
    if state[STATE_PEND_I] >= 0 or state[STATE_PEND_J] >= 0:
        for k in range(n_act):
            if idx[k] == state[STATE_PEND_I]:
                pi = k
            if idx[k] == state[STATE_PEND_J]:
                pj = k
    state[STATE_PEND_I] = -1
    state[STATE_PEND_J] = -1
    status = DONE
    while True:
        if state[STATE_ITER] >= max_updates:
            status = MAX_ITER
            break
        if state[STATE_CURVE] >= curve.shape[0]:
            status = CURVE_FULL
            break
        if shrinking and state[STATE_SHRINK] >= shrink_every:
            state[STATE_SHRINK] = 0
            pi = -1
            pj = -1
            kept, moves = shrink_compact(y, alpha, G, act, idx, yc, Uc, ac, yG, Dc, up, low,
                                          n_act, holes, sources)
            rows = _shrink_rows(cbuf, cowner, cidx, cstate, idx, kept, holes, sources, moves)
            n_act = kept
            state[STATE_NACT] = n_act
        resumed = pj >= 0
        if pi < 0:
            pi = _first_working_index(yG, up, upkey, bmin, idx, n_act)
            if pi < 0:
                break
        gmax = -yG[pi]
        i = idx[pi]
        si = _slot(i, slot_of, stamp, clock)
        if si < 0:
            state[STATE_NEED] = i
            state[STATE_PEND_I] = i
            status = NEED_ROW
            break
        Ki = _compact_row(i, data[si], idx, n_act, cbuf, rows, crow_of, cowner, cstamp, cstate)
        Dii = Dc[pi]
        if not resumed:
            _pair_gains(yG, low, Dc, Ki, gmax, Dii, gain, lowkey, n_act)
            gmax2 = -_block_minima(lowkey, bmin, n_act)
            # -inf: never (a gap of -inf, I_low empty where one class's bounds are all
            # 0, is no cue to unshrink: it returned UNSHRINK forever)
            if unshrink_gap > -np.inf and gmax + gmax2 <= unshrink_gap:
                status = UNSHRINK
                break
            if gmax + gmax2 < gap_tol:
                break
            pj = _argmin(gain, bmin, idx, n_act)
            if pj < 0:
                break
        j = idx[pj]
        sj = _slot(j, slot_of, stamp, clock)
        if sj < 0:
            state[STATE_NEED] = j
            state[STATE_PEND_I] = i
            state[STATE_PEND_J] = j
            status = NEED_ROW
            break
        Kj = _compact_row(j, data[sj], idx, n_act, cbuf, rows, crow_of, cowner, cstamp, cstate)
        yi = yc[pi]
        yj = yc[pj]
        qij = yi * yj * Ki[pj]
        Ci = Uc[pi]
        Cj = Uc[pj]
        ai = ac[pi]
        aj = ac[pj]
        Gi = yi * yG[pi]
        Gj = yj * yG[pj]
        Djj = Dc[pj]
        if yi != yj:
            quad = Dii + Djj + 2.0 * qij
            if quad <= 0.0:
                quad = _TAU
            delta = (-Gi - Gj) / quad
            diff = ai - aj
            ai += delta
            aj += delta
            if diff > 0.0:
                if aj < 0.0:
                    aj = 0.0
                    ai = diff
            else:
                if ai < 0.0:
                    ai = 0.0
                    aj = -diff
            if diff > Ci - Cj:
                if ai > Ci:
                    ai = Ci
                    aj = Ci - diff
            else:
                if aj > Cj:
                    aj = Cj
                    ai = Cj + diff
        else:
            quad = Dii + Djj - 2.0 * qij
            if quad <= 0.0:
                quad = _TAU
            delta = (Gi - Gj) / quad
            total = ai + aj
            ai -= delta
            aj += delta
            if total > Ci:
                if ai > Ci:
                    ai = Ci
                    aj = total - Ci
            else:
                if aj < 0.0:
                    aj = 0.0
                    ai = total
            if total > Cj:
                if aj > Cj:
                    aj = Cj
                    ai = total - Cj
            else:
                if ai < 0.0:
                    ai = 0.0
                    aj = total
        di = ai - ac[pi]
        dj = aj - ac[pj]
        ac[pi] = ai
        ac[pj] = aj
        alpha[i] = ai
        alpha[j] = aj
        F[0] += di * Gi + dj * Gj + 0.5 * (di * di * Dii + dj * dj * Djj) + di * dj * qij
        ci = di * yi
        cj = dj * yj
        up[pi], low[pi] = _membership(yi, ai, Ci)
        up[pj], low[pj] = _membership(yj, aj, Cj)
        pj = -1
        _update_gradient(yG, up, Ki, Kj, ci, cj, upkey, n_act)
        pi = _working_index(yG, up, upkey, bmin, idx, n_act)
        state[STATE_ITER] += 1
        state[STATE_SHRINK] += 1
        curve[state[STATE_CURVE]] = F[0]
        state[STATE_CURVE] += 1
        if pi < 0:
            break
    for k in range(n_act):
        G[idx[k]] = yc[k] * yG[k]
        alpha[idx[k]] = ac[k]
    return status


@njit(cache=True)
def shrink_compact(y, alpha, G, act, idx, yc, Uc, ac, yG, Dc, up, low, n_act, holes, sources):
    """libsvm's shrinking on the compact copies; returns (kept, moves).

    Writes the copies back, finds the variables libsvm drops (Fan, Chen & Lin 2005, sec. 4:
    bounded variables that the current maximal violating pair says cannot move), and fills
    each dropped position below ``kept`` with a kept variable from above it: move m takes
    position ``sources[m]`` to ``holes[m]``.
    ``idx`` and ``act`` swap instead, so that act stays a permutation with the dropped
    variables right after the kept ones. ``yG`` holds y_t G_t (see :func:`smo_pairs`).
    """
    for k in range(n_act):
        G[idx[k]] = yc[k] * yG[k]
        alpha[idx[k]] = ac[k]
    gmax1 = -np.inf  # m(alpha) = max over I_up of -y G
    gmax2 = -np.inf  # -M(alpha) = max over I_low of y G
    for k in range(n_act):
        if up[k] and -yG[k] > gmax1:
            gmax1 = -yG[k]
        if low[k] and yG[k] > gmax2:
            gmax2 = yG[k]
    drop = np.zeros(n_act, dtype=np.bool_)
    dropped = 0
    for k in range(n_act):
        drop[k] = leaves_active_set(yc[k], ac[k], Uc[k], yG[k], gmax1, gmax2)
        dropped += drop[k]
    kept = n_act - dropped
    moves = 0
    src = n_act - 1
    for h in range(kept):
        if not drop[h]:
            continue
        while drop[src]:
            src -= 1
        # src >= kept: [kept, n_act) holds as many kept variables as [0, kept) dropped ones
        holes[moves] = h
        sources[moves] = src
        moves += 1
        idx[h], idx[src] = idx[src], idx[h]
        act[h], act[src] = act[src], act[h]
        yc[h] = yc[src]
        Uc[h] = Uc[src]
        ac[h] = ac[src]
        yG[h] = yG[src]
        Dc[h] = Dc[src]
        up[h] = up[src]
        low[h] = low[src]
        src -= 1
    return kept, moves
