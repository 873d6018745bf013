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


@njit(cache=True)
def _shrink_pair(y, U, alpha, G, act, n_act):
    """libsvm's shrinking (Fan, Chen & Lin 2005, sec. 4): drop bounded variables that the
    current maximal violating pair says cannot move."""
    gmax1 = -np.inf  # max over I_up of -y G
    gmax2 = -np.inf  # max over I_low of y G
    for k in range(n_act):
        t = act[k]
        if y[t] > 0:
            if alpha[t] < U[t] and -G[t] > gmax1:
                gmax1 = -G[t]
            if alpha[t] > 0.0 and G[t] > gmax2:
                gmax2 = G[t]
        else:
            if alpha[t] < U[t] and -G[t] > gmax2:
                gmax2 = -G[t]
            if alpha[t] > 0.0 and G[t] > gmax1:
                gmax1 = G[t]
    return _compact(act, n_act, _pair_drop(y, U, alpha, G, act, n_act, gmax1, gmax2))


@njit(cache=True)
def _pair_drop(y, U, alpha, G, act, n_act, gmax1, gmax2):
    drop = np.zeros(n_act, dtype=np.bool_)
    for k in range(n_act):
        t = act[k]
        if alpha[t] >= U[t]:
            drop[k] = (-G[t] > gmax1) if y[t] > 0 else (-G[t] > gmax2)
        elif alpha[t] <= 0.0:
            drop[k] = (G[t] > gmax2) if y[t] > 0 else (G[t] > gmax1)
    return drop


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
    n_act = state[STATE_NACT]
    while True:
        if state[STATE_ITER] >= max_updates:
            return MAX_ITER
        if state[STATE_CURVE] >= curve.shape[0]:
            return CURVE_FULL
        if shrinking and state[STATE_SHRINK] >= shrink_every:
            state[STATE_SHRINK] = 0
            state[STATE_PEND_I] = -1
            if equality:
                n_act = _shrink_pair(y, U, alpha, G, act, n_act)
            else:
                gm = 0.0
                for k in range(n_act):
                    t = act[k]
                    g = G[t]
                    if alpha[t] <= 0.0 and g > 0.0:
                        g = 0.0
                    elif alpha[t] >= U[t] and g < 0.0:
                        g = 0.0
                    if abs(g) > gm:
                        gm = abs(g)
                n_act = _shrink_single(U, alpha, G, act, n_act, gm)
            state[STATE_NACT] = n_act
        if not equality:
            i = -1
            best = 0.0
            for k in range(n_act):
                t = act[k]
                g = G[t]
                if alpha[t] <= 0.0 and g > 0.0:
                    g = 0.0
                elif alpha[t] >= U[t] and g < 0.0:
                    g = 0.0
                if abs(g) > best:
                    best = abs(g)
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
        else:
            # a step interrupted by a cache miss resumes with its pair: no second selection
            i = state[STATE_PEND_I]
            j = state[STATE_PEND_J]
            state[STATE_PEND_I] = -1
            state[STATE_PEND_J] = -1
            if i < 0:
                gmax = -np.inf
                for k in range(n_act):
                    t = act[k]
                    if y[t] > 0:
                        if alpha[t] < U[t] and -G[t] >= gmax:
                            gmax = -G[t]
                            i = t
                    else:
                        if alpha[t] > 0.0 and G[t] >= gmax:
                            gmax = G[t]
                            i = t
                if i < 0:
                    return DONE
            else:
                gmax = -G[i] if y[i] > 0 else G[i]
            si = _slot(i, slot_of, stamp, clock)
            if si < 0:
                state[STATE_NEED] = i
                state[STATE_PEND_I] = i
                return NEED_ROW
            Ki = data[si]
            yi = y[i]
            gmax2 = -np.inf
            obj_min = np.inf
            resumed = j >= 0
            for k in range(0 if resumed else n_act):
                t = act[k]
                if y[t] > 0:
                    if alpha[t] > 0.0:
                        gd = gmax + G[t]
                        if G[t] >= gmax2:
                            gmax2 = G[t]
                        if gd > 0.0:
                            quad = QD[i] + QD[t] - 2.0 * Ki[t]
                            if quad <= 0.0:
                                quad = _TAU
                            od = -(gd * gd) / quad
                            if od <= obj_min:
                                j = t
                                obj_min = od
                else:
                    if alpha[t] < U[t]:
                        gd = gmax - G[t]
                        if -G[t] >= gmax2:
                            gmax2 = -G[t]
                        if gd > 0.0:
                            quad = QD[i] + QD[t] - 2.0 * Ki[t]
                            if quad <= 0.0:
                                quad = _TAU
                            od = -(gd * gd) / quad
                            if od <= obj_min:
                                j = t
                                obj_min = od
            if j < 0 or (not resumed and gmax + gmax2 < gap_tol):
                return DONE
            sj = _slot(j, slot_of, stamp, clock)
            if sj < 0:
                state[STATE_NEED] = j
                state[STATE_PEND_I] = i
                state[STATE_PEND_J] = j
                return NEED_ROW
            Kj = data[sj]
            yj = y[j]
            qij = yi * yj * Ki[j]
            Ci = U[i]
            Cj = U[j]
            ai = alpha[i]
            aj = alpha[j]
            if yi != yj:
                quad = QD[i] + QD[j] + 2.0 * qij
                if quad <= 0.0:
                    quad = _TAU
                delta = (-G[i] - G[j]) / quad
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
                quad = QD[i] + QD[j] - 2.0 * qij
                if quad <= 0.0:
                    quad = _TAU
                delta = (G[i] - G[j]) / quad
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
            di = ai - alpha[i]
            dj = aj - alpha[j]
            alpha[i] = ai
            alpha[j] = aj
            F[0] += (di * G[i] + dj * G[j] + 0.5 * (di * di * QD[i] + dj * dj * QD[j])
                     + di * dj * qij)
            ci = di * yi
            cj = dj * yj
            # the gradient update and the next step's choice of i share one sweep
            nxt = -1
            gnext = -np.inf
            for k in range(n_act):
                t = act[k]
                g = G[t] + y[t] * (ci * Ki[t] + cj * Kj[t])
                G[t] = g
                if y[t] > 0:
                    if alpha[t] < U[t] and -g >= gnext:
                        gnext = -g
                        nxt = t
                else:
                    if alpha[t] > 0.0 and g >= gnext:
                        gnext = g
                        nxt = t
            state[STATE_PEND_I] = nxt
            if nxt < 0:
                state[STATE_ITER] += 1
                state[STATE_SHRINK] += 1
                curve[state[STATE_CURVE]] = F[0]
                state[STATE_CURVE] += 1
                return DONE
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


# ----------------------------------------------------------------------------------------
# Linear coordinate descent (n > d form, primal vector kept): dense and CSR rows.


@njit(cache=True, inline="always")
def _beta(v, nonneg, j):
    b = v[j]
    if nonneg[j] and b < 0.0:
        return 0.0
    return b


@njit(cache=True, inline="always")
def _linear_grad_dense(X, y, p, v, nonneg, i, any_nonneg):
    s = 0.0
    if any_nonneg:
        for j in range(X.shape[1]):
            s += X[i, j] * _beta(v, nonneg, j)
    else:
        for j in range(X.shape[1]):
            s += X[i, j] * v[j]
    return y[i] * s + p[i]


@njit(cache=True, inline="always")
def _linear_grad_csr(data, indices, indptr, y, p, v, nonneg, i, any_nonneg):
    s = 0.0
    if any_nonneg:
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * _beta(v, nonneg, indices[k])
    else:
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * v[indices[k]]
    return y[i] * s + p[i]


@njit(cache=True, inline="always")
def _xorshift(state):
    x = state[0]
    x ^= (x << np.uint64(13))
    x ^= (x >> np.uint64(7))
    x ^= (x << np.uint64(17))
    state[0] = x
    return x


@njit(cache=True)
def _linear_cd(dense, X, data, indices, indptr, y, p, U, alpha, v, nonneg, QD, tol,
               max_epochs, seed, shrinking, shuffle, out_curve, info):
    """Dual coordinate descent keeping v = sum_i alpha_i y_i x_i (LIBLINEAR, Hsieh et al.
    2008; svm-variants-coordinate-descent.txt eq. (4)).

    The primal vector is beta = v, or, for the nonnegative drifted SVM (eq. (5)-(6)),
    beta_j = max(v_j, 0) on the features flagged ``nonneg``: that is v + rho with rho the
    exact minimiser over rho >= 0 of dual (6), i.e. the paper's rho update
    delta_rho = max(-rho_j, -beta_j) carried out after every alpha step. The gradient of
    the dual in alpha_i is y_i beta' x_i + p_i with p = -(e - dbar) (drifted, sec. 2).

    Stops when the natural KKT residual (muflow.solvers.kkt, no equality) over all samples
    is at most ``tol``, checked whenever the projected gradient of an epoch (over the
    active set) is within ``tol``. ``info`` receives (epochs, violation, updates).
    """
    n = y.shape[0]
    rng = np.empty(1, dtype=np.uint64)
    rng[0] = np.uint64(seed) * np.uint64(2654435761) + np.uint64(88172645463325252)
    any_nonneg = False
    for j in range(nonneg.shape[0]):
        if nonneg[j]:
            any_nonneg = True
    act = np.empty(n, dtype=np.int64)
    n_act = 0
    for i in range(n):
        if U[i] > 0.0:
            act[n_act] = i
            n_act += 1
    n_all = n_act
    pg_max_old = np.inf
    pg_min_old = -np.inf
    violation = np.inf
    updates = 0
    epoch = 0
    F = 0.0
    # F(alpha) = 1/2 ||beta||^2 + p' alpha, evaluated exactly at epoch ends
    while epoch < max_epochs:
        if shuffle:
            for k in range(n_act - 1, 0, -1):
                r = np.int64(_xorshift(rng) % np.uint64(k + 1))
                tmp = act[k]
                act[k] = act[r]
                act[r] = tmp
        pg_max = -np.inf
        pg_min = np.inf
        k = 0
        while k < n_act:
            i = act[k]
            if dense:
                g = _linear_grad_dense(X, y, p, v, nonneg, i, any_nonneg)
            else:
                g = _linear_grad_csr(data, indices, indptr, y, p, v, nonneg, i, any_nonneg)
            pg = 0.0
            if alpha[i] <= 0.0:
                if shrinking and g > pg_max_old:
                    n_act -= 1
                    act[k] = act[n_act]
                    act[n_act] = i
                    continue
                if g < 0.0:
                    pg = g
            elif alpha[i] >= U[i]:
                if shrinking and g < pg_min_old:
                    n_act -= 1
                    act[k] = act[n_act]
                    act[n_act] = i
                    continue
                if g > 0.0:
                    pg = g
            else:
                pg = g
            if pg > pg_max:
                pg_max = pg
            if pg < pg_min:
                pg_min = pg
            if abs(pg) > 1e-14 and QD[i] > 0.0:
                new = alpha[i] - g / QD[i]
                if new < 0.0:
                    new = 0.0
                if new > U[i]:
                    new = U[i]
                d = (new - alpha[i]) * y[i]
                alpha[i] = new
                updates += 1
                if dense:
                    for j in range(X.shape[1]):
                        v[j] += d * X[i, j]
                else:
                    for kk in range(indptr[i], indptr[i + 1]):
                        v[indices[kk]] += d * data[kk]
            k += 1
        epoch += 1
        # objective after this epoch
        F = 0.0
        for j in range(v.shape[0]):
            b = _beta(v, nonneg, j)
            F += 0.5 * b * b
        for i in range(n):
            F += p[i] * alpha[i]
        if epoch < out_curve.shape[0]:
            out_curve[epoch] = F
        if n_act == 0:
            pg_max = 0.0
            pg_min = 0.0
        if max(abs(pg_max), abs(pg_min)) <= tol:
            # full check with the natural residual over every sample
            violation = 0.0
            for i in range(n):
                if U[i] <= 0.0:
                    continue
                if dense:
                    g = _linear_grad_dense(X, y, p, v, nonneg, i, any_nonneg)
                else:
                    g = _linear_grad_csr(data, indices, indptr, y, p, v, nonneg, i, any_nonneg)
                t = alpha[i] - g
                if t < 0.0:
                    t = 0.0
                if t > U[i]:
                    t = U[i]
                r = abs(alpha[i] - t)
                if r > violation:
                    violation = r
            if violation <= tol:
                break
            n_act = n_all
            pg_max_old = np.inf
            pg_min_old = -np.inf
            continue
        pg_max_old = pg_max if pg_max > 0.0 else np.inf
        pg_min_old = pg_min if pg_min < 0.0 else -np.inf
    info[0] = epoch
    info[1] = violation
    info[2] = updates
    return F


def linear_cd(X, y, p, U, alpha, v, nonneg, *, tol, max_epochs, seed, shrinking=True,
              shuffle=True, curve=None):
    """Run :func:`_linear_cd` on dense ``X`` or a scipy CSR matrix; returns (F, info)."""
    import scipy.sparse as sp

    if curve is None:
        curve = np.empty(max_epochs + 1)
    info = np.zeros(3)
    if sp.issparse(X):
        X = X.tocsr()
        dense_X = np.empty((1, 1))
        QD = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        F = _linear_cd(False, dense_X, X.data.astype(np.float64), X.indices.astype(np.int64),
                       X.indptr.astype(np.int64), y, p, U, alpha, v, nonneg, QD, tol,
                       max_epochs, seed, shrinking, shuffle, curve, info)
    else:
        QD = np.einsum("ij,ij->i", X, X)
        empty_f = np.empty(0)
        empty_i = np.zeros(1, dtype=np.int64)
        F = _linear_cd(True, X, empty_f, empty_i, empty_i, y, p, U, alpha, v, nonneg, QD,
                       tol, max_epochs, seed, shrinking, shuffle, curve, info)
    return F, info
