"""Compiled inner loops of the subset and coordinate solvers (numba, cached on disk).

The kernel solvers (SMO, Kernel Adatron, kernel coordinate descent) never hold K: they
read rows from a :class:`muflow.solvers.rowcache.RowCache` whose storage arrays are passed
in here. When a loop needs a row that is not cached it stops and returns ``NEED_ROW``
with the row index in ``state[STATE_NEED]``; the Python driver fetches the row through
the operator (``operator.rows``) and calls the loop again, which resumes where it left
off (all of its state lives in the arrays it was given). A hit refreshes the row's
least-recently-used stamp.

Notation as in :mod:`muflow.solvers.problem`: for one column, G = Q alpha + p with
Q = diag(y) K diag(y), bounds 0 <= alpha_i <= U_i.
"""

from __future__ import annotations

import numpy as np
from numba import njit

DONE = 0          # the active set meets the internal tolerance (or the epoch is over)
NEED_ROW = 1      # row state[STATE_NEED] is missing from the cache
MAX_ITER = 2      # the update budget is spent
CURVE_FULL = 3    # the objective buffer is full; the driver stores it and resets the position

STATE_NACT = 0    # number of active indices at the front of ``act``
STATE_ITER = 1    # updates done
STATE_NEED = 2    # the missing row
STATE_SHRINK = 3  # updates since the last shrinking
STATE_CURVE = 4   # next free position in the objective buffer
STATE_POS = 5     # position in the epoch's order (coordinate descent)
STATE_PEND_I = 6  # SMO: working index i already selected, waiting for its row (-1: none)
STATE_PEND_J = 7  # SMO: working index j already selected, waiting for its row (-1: none)
STATE_SIZE = 8

_TAU = 1e-12


@njit(cache=True, inline="always")
def _slot(i, slot_of, stamp, clock):
    s = slot_of[i]
    if s >= 0:
        clock[0] += 1
        stamp[s] = clock[0]
    return s


@njit(cache=True, inline="always")
def _projected(a, u, g):
    """The gradient g of a variable a in [0, u] projected on the directions it can move."""
    if a <= 0.0 and g > 0.0:
        return 0.0
    if a >= u and g < 0.0:
        return 0.0
    return g


@njit(cache=True)
def _compact(act, n_act, drop):
    """Move the dropped indices behind the kept ones, keeping both in index order:
    sweeps over act[:n_act] then read memory in order (swapping would scatter them)."""
    dropped = np.empty(n_act, dtype=np.int64)
    kept = 0
    nd = 0
    for k in range(n_act):
        if drop[k]:
            dropped[nd] = act[k]
            nd += 1
        else:
            act[kept] = act[k]
            kept += 1
    for k in range(nd):
        act[kept + k] = dropped[k]
    return kept


@njit(cache=True)
def _shrink_single(U, alpha, G, act, n_act, gm):
    """Drop bounded variables whose gradient pushes them outward by more than ``gm``."""
    drop = np.zeros(n_act, dtype=np.bool_)
    for k in range(n_act):
        t = act[k]
        drop[k] = (alpha[t] <= 0.0 and G[t] > gm) or (alpha[t] >= U[t] and -G[t] > gm)
    return _compact(act, n_act, drop)


@njit(cache=True)
def smo_run(y, U, alpha, G, QD, act, data, slot_of, stamp, clock, state, F, curve,
            gap_tol, max_updates, equality, shrinking, shrink_every):
    """SMO on the active indices ``act[:state[0]]`` until the internal gap is met.

    With ``equality`` the working pair is chosen by the second-order rule WSS 2 of Fan,
    Chen & Lin (2005), the update and clipping are libsvm's; the loop stops when the
    maximal-violation gap m(alpha) - M(alpha) is below ``gap_tol``. Without it the sum
    constraint is absent, the working set is the single most violating coordinate
    (largest projected gradient) and the step is its exact one-variable minimiser. F
    (the objective) is updated exactly after every step and written to ``curve``.
    """
    if equality:
        return _smo_pairs(y, U, alpha, G, QD, act, data, slot_of, stamp, clock, state, F, curve,
                          gap_tol, max_updates, shrinking, shrink_every)
    n_act = state[STATE_NACT]
    while True:
        if state[STATE_ITER] >= max_updates:
            return MAX_ITER
        if state[STATE_CURVE] >= curve.shape[0]:
            return CURVE_FULL
        if shrinking and state[STATE_SHRINK] >= shrink_every:
            state[STATE_SHRINK] = 0
            state[STATE_PEND_I] = -1
            gm = 0.0
            for k in range(n_act):
                t = act[k]
                gm = max(gm, abs(_projected(alpha[t], U[t], G[t])))
            n_act = _shrink_single(U, alpha, G, act, n_act, gm)
            state[STATE_NACT] = n_act
        i = -1
        best = 0.0
        for k in range(n_act):
            t = act[k]
            g = abs(_projected(alpha[t], U[t], G[t]))
            if g > best:
                best = g
                i = t
        if i < 0 or best <= gap_tol:
            return DONE
        si = _slot(i, slot_of, stamp, clock)
        if si < 0:
            state[STATE_NEED] = i
            return NEED_ROW
        Ki = data[si]
        qii = QD[i] if QD[i] > _TAU else _TAU
        new = alpha[i] - G[i] / qii
        if new < 0.0:
            new = 0.0
        if new > U[i]:
            new = U[i]
        d = new - alpha[i]
        alpha[i] = new
        F[0] += d * G[i] + 0.5 * d * d * QD[i]
        dy = d * y[i]
        for k in range(n_act):
            t = act[k]
            G[t] += y[t] * dy * Ki[t]
        state[STATE_ITER] += 1
        state[STATE_SHRINK] += 1
        curve[state[STATE_CURVE]] = F[0]
        state[STATE_CURVE] += 1


_NO_PAIR = 1.7976931348623157e308  # largest float: above any gain, below the inf of a non-candidate


@njit(cache=True, inline="always")
def _membership(yk, ak, uk):
    """(in I_up, in I_low) of one variable: I_up = {y = +1, alpha < U} u {y = -1, alpha > 0},
    I_low = {y = +1, alpha > 0} u {y = -1, alpha < U} (Fan, Chen & Lin 2005, eq. (9))."""
    pos = yk > 0
    below = ak < uk
    above = ak > 0.0
    return (below if pos else above), (above if pos else below)


_COMPACT_ROWS_BYTES = 128 << 20  # per solve call: rows of K restricted to the active set


@njit(cache=True, inline="always")
def _compact_row(i, Krow, idx, n_act, crows, crow_of, cowner, cstamp, cstate):
    """K[i, idx[:n_act]] as a contiguous vector, from the compact-row cache.

    libsvm caches its kernel rows over the active set only; the sweeps of a step then read
    n_act contiguous values instead of gathering them from a full row of K (which, for K
    much larger than the cache and a small active set, reads most of the row's cache lines
    from memory). Least-recently-used rows are replaced; ``cstate`` = [clock, rows used].
    """
    cstate[0] += 1
    s = crow_of[i]
    if s < 0:
        if cstate[1] < crows.shape[0]:
            s = cstate[1]
            cstate[1] += 1
        else:
            s = 0
            for r in range(1, crows.shape[0]):
                if cstamp[r] < cstamp[s]:
                    s = r
            crow_of[cowner[s]] = -1
        cowner[s] = i
        crow_of[i] = s
        dst = crows[s]
        for k in range(n_act):
            dst[k] = Krow[idx[k]]
    cstamp[s] = cstate[0]
    return crows[s, :n_act]


@njit(cache=True, error_model="numpy")
def _pair_gains(yG, low, Dc, Ki, gmax, Dii, gain, n_act):
    """``gain[k]`` = -(gmax + y_k G_k)^2 / (K_ii + K_kk - 2 K_ik) for k in I_low with
    gmax + y_k G_k > 0, else +inf: the objective change of the pair (i, k) in WSS 2 (Fan,
    Chen & Lin 2005, eq. (14); a non-positive curvature becomes tau).

    Its own loop, with no reduction and no zero-division check (the curvature is at least
    tau), so that it is vectorised: fused with the arg-min it ran 2.5x slower per element.
    """
    for k in range(n_act):
        gd = gmax + yG[k]
        quad = Dii + Dc[k] - 2.0 * Ki[k]
        quad = quad if quad > 0.0 else _TAU
        od = -(gd * gd) / quad
        gain[k] = od if (low[k] & (gd > 0.0)) else np.inf


@njit(cache=True)
def _smo_pairs(y, U, alpha, G, QD, act, data, slot_of, stamp, clock, state, F, curve,
               gap_tol, max_updates, shrinking, shrink_every):
    """The pair steps of :func:`smo_run` (sum constraint) on compact copies of the active set.

    y, U, alpha, G and the diagonal of the active indices ``act[:n_act]`` are copied into
    arrays indexed by position, so that the two sweeps of a step (choice of j; gradient
    update fused with the next choice of i) read them contiguously and only the two kernel
    rows are gathered (libsvm keeps the same layout by permuting its indices). The copies
    are written back on every return and before shrinking, which moves positions.

    The sweeps are written without data-dependent branches (labels and bounds are random
    from one position to the next, and mispredicted branches were most of a step's cost):
    the copy of G holds y_t G_t, in which both index sets of WSS 2 rank the same way
    (i maximises -y G over I_up, j is chosen over I_low with gradient y G), and set
    membership is kept in two flag arrays that change only at the pair a step moves.
    Multiplying by y = +-1 is exact, so every step is the one the branching form takes.
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
    cap = max(2, min(y.shape[0], _COMPACT_ROWS_BYTES // max(1, n_act * data.itemsize)))
    crows = np.empty((cap, n_act), dtype=data.dtype)
    crow_of = np.full(y.shape[0], -1, dtype=np.int64)
    cowner = np.full(cap, -1, dtype=np.int64)
    cstamp = np.zeros(cap, dtype=np.int64)
    cstate = np.zeros(2, dtype=np.int64)
    gain = np.empty(n_act)
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
            kept = _shrink_compact(y, alpha, G, act, idx, yc, Uc, ac, yG, Dc, up, low, n_act)
            if kept < n_act:  # positions moved: the compact rows are stale
                for r in range(cstate[1]):
                    crow_of[cowner[r]] = -1
                cstate[1] = 0
            n_act = kept
            state[STATE_NACT] = n_act
        resumed = pj >= 0
        if pi < 0:
            gmax = -np.inf
            for k in range(n_act):
                if up[k] and -yG[k] >= gmax:
                    gmax = -yG[k]
                    pi = k
            if pi < 0:
                break
        else:
            gmax = -yG[pi]
        i = idx[pi]
        si = _slot(i, slot_of, stamp, clock)
        if si < 0:
            state[STATE_NEED] = i
            state[STATE_PEND_I] = i
            status = NEED_ROW
            break
        Ki = _compact_row(i, data[si], idx, n_act, crows, crow_of, cowner, cstamp, cstate)
        Dii = Dc[pi]
        gmax2 = -np.inf
        obj_min = _NO_PAIR
        if not resumed:
            _pair_gains(yG, low, Dc, Ki, gmax, Dii, gain, n_act)
            for k in range(n_act):
                gl = yG[k] if low[k] else -np.inf
                gmax2 = gl if gl > gmax2 else gmax2
                od = gain[k]
                if od <= obj_min:
                    pj = k
                    obj_min = od
            if pj < 0 or gmax + gmax2 < gap_tol:
                break
        j = idx[pj]
        sj = _slot(j, slot_of, stamp, clock)
        if sj < 0:
            state[STATE_NEED] = j
            state[STATE_PEND_I] = i
            state[STATE_PEND_J] = j
            status = NEED_ROW
            break
        Kj = _compact_row(j, data[sj], idx, n_act, crows, crow_of, cowner, cstamp, cstate)
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
        # the gradient update and the next step's choice of i share one sweep
        pi = -1
        pj = -1
        gnext = -np.inf
        for k in range(n_act):
            g = yG[k] + (ci * Ki[k] + cj * Kj[k])
            yG[k] = g
            v = -g if up[k] else -np.inf
            if v >= gnext and up[k]:  # the rare comparison first: a predictable branch
                gnext = v
                pi = k
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
def _shrink_compact(y, alpha, G, act, idx, yc, Uc, ac, yG, Dc, up, low, n_act):
    """libsvm's shrinking on the compact copies: write them back, drop the variables that
    libsvm drops (Fan, Chen & Lin 2005, sec. 4: bounded variables that the current maximal
    violating pair says cannot move), close the gaps in every copy and in ``act`` (kept first, in
    index order; the dropped follow them). ``yG`` holds y_t G_t (see :func:`_smo_pairs`)."""
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
    for k in range(n_act):
        # a variable at a bound stays there when its gradient points out of the box
        # further than the maximal violating pair reaches
        pos = yc[k] > 0
        if ac[k] >= Uc[k]:
            drop[k] = (-yG[k] > gmax1) if pos else (yG[k] > gmax2)
        elif ac[k] <= 0.0:
            drop[k] = (yG[k] > gmax2) if pos else (-yG[k] > gmax1)
    kept = 0
    for k in range(n_act):
        if not drop[k]:
            idx[kept] = idx[k]
            yc[kept] = yc[k]
            Uc[kept] = Uc[k]
            ac[kept] = ac[k]
            yG[kept] = yG[k]
            Dc[kept] = Dc[k]
            up[kept] = up[k]
            low[kept] = low[k]
            kept += 1
    _compact(act, n_act, drop)
    return kept


@njit(cache=True)
def cd_epoch(y, U, alpha, G, QD, order, upd, n_upd, active, data, slot_of, stamp, clock,
             state, F, bounds, shrinking, eta):
    """One pass of dual coordinate descent over ``order`` (resumable at state[STATE_POS]).

    Each visit takes the exact one-variable step of svm-variants-coordinate-descent.txt
    (d >= n form): delta = max(-alpha_i, min(U_i - alpha_i, -eta G_i / Q_ii)); eta = 1 is the
    exact minimiser, the Kernel Adatron's rate 1/K_ii (Friess et al. 1998). The gradient is
    kept for the indices ``upd[:n_upd]`` (the active set at the epoch's start). With
    ``shrinking`` (LIBLINEAR, Hsieh et al. 2008, sec. 3.2) a variable at a bound whose
    gradient lies outside last epoch's projected-gradient range ``bounds[0:2]`` is
    dropped (``active[i] = False``). ``bounds[2:4]`` collect this epoch's range.
    """
    pg_max_old = bounds[0]
    pg_min_old = bounds[1]
    pos = state[STATE_POS]
    while pos < order.shape[0]:
        i = order[pos]
        g = G[i]
        pg = 0.0
        if alpha[i] <= 0.0:
            if shrinking and g > pg_max_old:
                active[i] = False
                pos += 1
                continue
            if g < 0.0:
                pg = g
        elif alpha[i] >= U[i]:
            if shrinking and g < pg_min_old:
                active[i] = False
                pos += 1
                continue
            if g > 0.0:
                pg = g
        else:
            pg = g
        if pg > bounds[2]:
            bounds[2] = pg
        if pg < bounds[3]:
            bounds[3] = pg
        if abs(pg) > 1e-14:
            qii = QD[i] if QD[i] > _TAU else _TAU
            new = alpha[i] - eta * g / qii
            if new < 0.0:
                new = 0.0
            if new > U[i]:
                new = U[i]
            d = new - alpha[i]
            if d != 0.0:
                si = _slot(i, slot_of, stamp, clock)
                if si < 0:
                    state[STATE_POS] = pos
                    state[STATE_NEED] = i
                    # the pg bookkeeping of this visit is repeated on resume: harmless
                    return NEED_ROW
                Ki = data[si]
                alpha[i] = new
                F[0] += d * g + 0.5 * d * d * QD[i]
                dy = d * y[i]
                for k in range(n_upd):
                    t = upd[k]
                    G[t] += y[t] * dy * Ki[t]
                state[STATE_ITER] += 1
        pos += 1
    state[STATE_POS] = pos
    return DONE
