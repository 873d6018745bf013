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
UNSHRINK = 4      # SMO: the active set's gap reached the caller's unshrink_gap (libsvm's
                  # unshrinking at 10 eps): the driver restores the gradient and every variable

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


@njit(cache=True, inline="always")
def leaves_active_set(yk, ak, uk, ygk, gmax1, gmax2):
    """libsvm's shrinking rule, the one copy (Fan, Chen & Lin, JMLR 6, 2005, sec. 4; Chang &
    Lin, LIBSVM sec. 5.2): a variable at a bound leaves the active set when its gradient
    points out of the box further than the maximal violating pair reaches.

    ``ygk`` is y_k G_k; gmax1 = m(alpha) = max over I_up of -y G, gmax2 = -M(alpha) = max
    over I_low of y G. Without the sum constraint call it with y_k = 1 and gmax1 = gmax2 =
    the largest projected gradient: a variable at 0 leaves when G_k > gmax, one at U_k when
    -G_k > gmax.
    """
    # at U_k: leaves when y = +1 and -y G > gmax1, or y = -1 and y G > gmax2; at 0 the
    # mirror; free: never. Written without branches (the bounds and signs of a pool's
    # variables come in no order a branch predictor could learn), the same truth table.
    pos = yk > 0
    out_up = -ygk > gmax1
    out_low = ygk > gmax2
    upper = ak >= uk
    lower = (ak <= 0.0) & (not upper)
    return ((upper & ((pos & out_up) | ((not pos) & out_low)))
            | (lower & ((pos & out_low) | ((not pos) & out_up))))


@njit(cache=True)
def shrink_mask(y, alpha, U, G, act, gmax1, gmax2, equality):
    """Which of the variables ``act`` leave the active set (:func:`leaves_active_set`; y
    ignored without the sum constraint)."""
    drop = np.zeros(act.shape[0], dtype=np.bool_)
    for k in range(act.shape[0]):
        t = act[k]
        yk = y[t] if equality else 1.0
        drop[k] = leaves_active_set(yk, alpha[t], U[t], yk * G[t], gmax1, gmax2)
    return drop


@njit(cache=True)
def _shrink_single(U, alpha, G, act, n_act, gm):
    """Drop bounded variables whose gradient pushes them outward by more than ``gm``."""
    drop = np.zeros(n_act, dtype=np.bool_)
    for k in range(n_act):
        t = act[k]
        drop[k] = leaves_active_set(1.0, alpha[t], U[t], G[t], gm, gm)
    return _compact(act, n_act, drop)


@njit(cache=True)
def smo_single(y, U, alpha, G, QD, act, data, slot_of, stamp, clock, state, F, curve,
               gap_tol, max_updates, shrinking, shrink_every):
    """SMO without the sum constraint on the active indices ``act[:state[0]]``: the working
    set is the single most violating coordinate (largest projected gradient) and the step is
    its exact one-variable minimiser (greedy coordinate descent), until the largest projected
    gradient is below ``gap_tol``. F (the objective) is updated exactly after every step and
    written to ``curve``. The pair steps of the sum constraint are
    :func:`muflow.solvers._pairs_compiled.smo_pairs`.
    """
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
