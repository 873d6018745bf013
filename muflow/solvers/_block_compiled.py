"""The working set's q x q subproblem solved in one compiled call (numba, GIL released).

The decomposition (Joachims 1999; :mod:`muflow.solvers.working_set_loop`) solves, each outer
iteration, the dual restricted to its working set B: min 1/2 a' Q_BB a + l' a over the box
[0, U_B] (and, with the intercept, y_B' a fixed), Q_BB = diag(y_B) K_BB diag(y_B), from
alpha_B whose gradient G_B is known. On a dense K_BB of a few hundred rows, SMO needs
neither a row cache nor shrinking nor a certificate of its own: :func:`block_smo` keeps the
subproblem's gradient in place and stops on its own gap.

With the sum constraint each step is a pair chosen by WSS 2 (Fan, Chen & Lin, "Working set
selection using second order information for training support vector machines", JMLR 6,
2005, section 3: i the maximal violator of eq. (9), j the largest second-order decrease
-b_it^2 / a_it of eq. (14)), solved in closed form and clipped to the box (Platt 1998).
Without it, greedy coordinate descent: the variable with the largest projected gradient,
moved to its clipped minimiser.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from muflow.solvers._subset_compiled import _TAU


@njit(cache=True, nogil=True, inline="always")
def _violation(a, U, g):
    """The projected gradient's size of one variable of the box-only subproblem."""
    if a <= 0.0:
        return -g if g < 0.0 else 0.0
    if a >= U:
        return g if g > 0.0 else 0.0
    return abs(g)


@njit(cache=True, nogil=True)
def block_smo(K, y, U, a, G, equality, tol, max_steps):
    """SMO on the dense subproblem: ``a`` (alpha_B) and ``G`` (its gradient Q_BB a + l) are
    updated in place until the gap (sum constraint: max_{I_up} -y G + max_{I_low} y G, eq.
    (9); box only: the largest projected gradient) is at most ``tol`` or ``max_steps`` steps
    are taken. Returns the steps taken.

    Arrays: K (q, q) float64 or float32, C-ordered (row b of K for variable b), each entry
    read as float64 (a float32 K gives the steps of its float64 copy, without the copy);
    y, U, a, G float64. K's diagonal is read once into a vector (the second-order pass reads
    it at every step). Box only, the next step's variable is scanned in the same pass as
    the gradient's update, in the same order: the same steps as a separate pass; with the
    sum constraint the passes are vector loops (:func:`_pairs`).
    """
    q = a.shape[0]
    steps = 0
    diag = np.empty(q)
    for t in range(q):
        diag[t] = float(K[t, t])
    if not equality:
        best, i = 0.0, -1
        for t in range(q):
            v = _violation(a[t], U[t], G[t])
            if v > best:
                best, i = v, t
        while steps < max_steps:
            if i < 0 or best <= tol:
                break
            kii = diag[i]
            Kii = kii if kii > _TAU else _TAU
            new = min(max(a[i] - G[i] / Kii, 0.0), U[i])
            d = (new - a[i]) * y[i]
            a[i] = new
            row = K[i]
            best, i = 0.0, -1
            for t in range(q):
                G[t] += y[t] * float(row[t]) * d
                v = _violation(a[t], U[t], G[t])
                if v > best:
                    best, i = v, t
            steps += 1
        return steps
    return _pairs(K, y, U, a, G, diag, tol, max_steps)


@njit(cache=True, nogil=True, inline="always")
def _largest(x, q):
    """max(x[:q]) in four lanes (the loop's vector registers): the same value as one pass,
    the maximum of a set not depending on the order it is read in."""
    m0 = m1 = m2 = m3 = -np.inf
    t = 0
    while t + 4 <= q:
        a0, a1, a2, a3 = x[t], x[t + 1], x[t + 2], x[t + 3]
        m0 = a0 if a0 > m0 else m0
        m1 = a1 if a1 > m1 else m1
        m2 = a2 if a2 > m2 else m2
        m3 = a3 if a3 > m3 else m3
        t += 4
    while t < q:
        m0 = x[t] if x[t] > m0 else m0
        t += 1
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    return m2 if m2 > m0 else m0


@njit(cache=True, nogil=True, inline="always")
def _smallest(x, q):
    """min(x[:q]) in four lanes, as :func:`_largest`."""
    m0 = m1 = m2 = m3 = np.inf
    t = 0
    while t + 4 <= q:
        a0, a1, a2, a3 = x[t], x[t + 1], x[t + 2], x[t + 3]
        m0 = a0 if a0 < m0 else m0
        m1 = a1 if a1 < m1 else m1
        m2 = a2 if a2 < m2 else m2
        m3 = a3 if a3 < m3 else m3
        t += 4
    while t < q:
        m0 = x[t] if x[t] < m0 else m0
        t += 1
    m0 = m1 if m1 < m0 else m0
    m2 = m3 if m3 < m2 else m2
    return m2 if m2 < m0 else m0


@njit(cache=True, nogil=True, inline="always")
def _last_at(x, value, mask, q):
    """The last position t < q with ``mask[t]`` and ``x[t] == value`` (-1: none): the
    choice of a pass that takes every later tie (``>=``), found from the end."""
    for t in range(q - 1, -1, -1):
        if mask[t] and x[t] == value:
            return t
    return -1


@njit(cache=True, nogil=True)
def _pairs(K, y, U, a, G, diag, tol, max_steps):
    """:func:`block_smo` with the sum constraint: WSS 2's pairs (eq. (9) and (14)).

    Each step's passes over B are element-wise loops that write the violations and the
    gains into vectors, then their extremes are read by :func:`_largest` and the position
    by :func:`_last_at`: the compiler runs the element-wise loops on vector registers,
    which a loop carrying its running maximum and its position cannot be. The choices are
    those of one pass that keeps the last of equal values: the same steps bit for bit.
    I_up and I_low change only where a step moved, so their masks are kept, not rebuilt.
    """
    q = a.shape[0]
    steps = 0
    up = np.empty(q, dtype=np.bool_)
    low = np.empty(q, dtype=np.bool_)
    for t in range(q):
        up[t] = (a[t] < U[t]) if y[t] > 0 else (a[t] > 0.0)
        low[t] = (a[t] > 0.0) if y[t] > 0 else (a[t] < U[t])
    v_up = np.empty(q)
    v_low = np.empty(q)
    gain = np.empty(q)
    for t in range(q):
        v_up[t] = -y[t] * G[t] if up[t] else -np.inf
    gmax = _largest(v_up, q)
    i = _last_at(v_up, gmax, up, q)
    while steps < max_steps:
        if i < 0:
            break
        Ki = K[i]
        kii = diag[i]
        for t in range(q):
            v = y[t] * G[t]
            b = gmax + v
            quad = kii + diag[t] - 2.0 * float(Ki[t])
            quad = quad if quad > 0.0 else _TAU
            g = -(b * b) / quad
            gain[t] = g if (low[t] and b > 0.0) else np.inf
            v_low[t] = v if low[t] else -np.inf
        gmax2 = _largest(v_low, q)
        best = _smallest(gain, q)
        j = _last_at(gain, best, low, q) if best < np.inf else -1
        if j < 0 or gmax + gmax2 <= tol:
            break
        quad = kii + diag[j] - 2.0 * float(Ki[j])
        if quad <= 0.0:
            quad = _TAU
        s = (-y[i] * G[i] + y[j] * G[j]) / quad
        lo_i, hi_i = (-a[i], U[i] - a[i]) if y[i] > 0 else (a[i] - U[i], a[i])
        lo_j, hi_j = (a[j] - U[j], a[j]) if y[j] > 0 else (-a[j], U[j] - a[j])
        s = min(max(s, max(lo_i, lo_j)), min(hi_i, hi_j))
        if s == 0.0:
            break
        ai = min(max(a[i] + y[i] * s, 0.0), U[i])
        aj = min(max(a[j] - y[j] * s, 0.0), U[j])
        di = (ai - a[i]) * y[i]
        dj = (aj - a[j]) * y[j]
        a[i], a[j] = ai, aj
        for t in (i, j):
            up[t] = (a[t] < U[t]) if y[t] > 0 else (a[t] > 0.0)
            low[t] = (a[t] > 0.0) if y[t] > 0 else (a[t] < U[t])
        Kj = K[j]
        for t in range(q):
            g = G[t] + y[t] * (float(Ki[t]) * di + float(Kj[t]) * dj)
            G[t] = g
            v_up[t] = -y[t] * g if up[t] else -np.inf
        gmax = _largest(v_up, q)
        i = _last_at(v_up, gmax, up, q)
        steps += 1
    return steps
