"""Compiled per-sample loops shared by the solvers (numba, cached on disk).

NumPy spends microseconds per call on small arrays and a temporary per operation on large
ones: a solver pass (the class split of the operand and of the product, the update, the
objective and the stopping test) is a few fused row-major loops here. The update under the
sum constraint is in :mod:`muflow.solvers._equality_compiled`; the KKT measure that the
stopping test inlines, and its value for the final certificate, in
:mod:`muflow.solvers._kkt_compiled`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from muflow.solvers._kkt_compiled import accumulate, within as kkt_within

RULE_IDS = {"m3": 0, "munk": 1, "seminmf": 2, "musik": 3}
_TINY = 1e-300


@njit(cache=True, inline="always")
def factor(rule, P, N, c):
    """The multiplicative factor of one rule for one sample (see multiplicative.py)."""
    if P < _TINY:
        P = _TINY
    if rule == 0:
        root = math.sqrt(c * c + 4.0 * P * N)
        if c <= 0.0:
            return (root - c) / (2.0 * P)
        den = c + root
        return 2.0 * N / den if den > _TINY else 0.0
    num = N + (-c if c < 0.0 else 0.0)
    den = P + (c if c > 0.0 else 0.0)
    if rule == 1:
        return num / den
    if rule == 2:
        return math.sqrt(num / den)
    return (num + N) / (den + N)


@njit(cache=True, inline="always")
def _new_value(rule, w, P, N, c, floor, upper, flipped):
    v = w * factor(rule, P, N, c)
    if v < floor:
        v = floor
    if v > upper:
        v = upper
    return upper - v if flipped else v


@njit(cache=True, inline="always")
def factor_slope(rule, P, N, c):
    """:func:`factor` and its derivative in c, ``(r, dr/dc)``, written branch-free.

    Every rule's factor decreases in c and is smooth except at c = 0 (the max(+-c, 0) of
    MUNK, semi-NMF and MUSIK), where the right-hand derivative is taken. For M3,
    d/dc (-c + root) / (2P) = -r / root with root = sqrt(c^2 + 4 P N), in either form.
    """
    P = _TINY if P < _TINY else P
    if rule == 0:
        root = math.sqrt(c * c + 4.0 * P * N)
        den = c + root
        r_pos = 2.0 * N / den if den > _TINY else 0.0
        r = (root - c) / (2.0 * P) if c <= 0.0 else r_pos
        dr = -r / root if root > _TINY else -0.5 / P
        return r, dr
    neg = c < 0.0
    num = N - c if neg else N
    den = P if neg else P + c
    if rule == 3:
        num = num + N
        den = den + N
    inv = 1.0 / den
    r = num * inv
    dr = -inv if neg else -r * inv
    if rule == 2:
        g = r
        r = math.sqrt(g)
        dr = 0.5 * dr / r if r > _TINY else 0.0
    return r, dr


@njit(cache=True, inline="always")
def _step_row(rule, uniform, w, P, N, c, s, floor, upper, out):
    for j in range(w.shape[0]):
        u = upper[j]
        f = floor[j] if floor[j] < u else u
        flipped = False if uniform else s[j] < 0
        out[j] = _new_value(rule, w[j], P[j], N[j], c[j], f, u, flipped)


@njit(cache=True, error_model="numpy")
def multiplicative_step(rule, w, P, N, c, s, floor, upper, uniform, out):
    """One update of every column into ``out`` (no sum constraint; with it, see
    :func:`muflow.solvers._equality_compiled.equality_step`).

    ``w``, ``P``, ``N`` and ``out`` are (n, m); ``floor`` holds one value per column
    (sample i's floor is min(floor_j, upper_ij)). With ``uniform`` (no flips, and the
    linear term and the bounds constant within each column) ``c`` and ``upper`` are (1, m)
    and ``s`` is not read; otherwise ``c``, ``s`` and ``upper`` are (n, m).
    """
    if uniform:
        for i in range(w.shape[0]):
            _step_row(rule, True, w[i], P[i], N[i], c[0], s[0], floor, upper[0], out[i])
    else:
        for i in range(w.shape[0]):
            _step_row(rule, False, w[i], P[i], N[i], c[i], s[i], floor, upper[i], out[i])


@njit(cache=True)
def split_by_class(w, z, V):
    """``V = [w * (z > 0), w * (z <= 0)]`` in one pass, V of shape (n, 2m).

    The operand of MUNK's one product per pass on a non-negative kernel: the same-class
    and cross-class blocks of munk eq. (7) come from K times these two halves.
    """
    n, m = w.shape
    for i in range(n):
        _split_row(w[i], z[i], V[i, :m], V[i, m:])


@njit(cache=True, inline="always")
def _split_row(w_row, z_row, pos_row, neg_row):
    # branch-free, so that the loop over the columns is vectorised
    for j in range(w_row.shape[0]):
        v = w_row[j]
        pos = z_row[j] > 0
        pos_row[j] = v if pos else 0.0
        neg_row[j] = 0.0 if pos else v


@njit(cache=True, inline="always")
def _class_row(kp_row, kn_row, y_row, P_row, N_row, q_row):
    """P, N and Q alpha of one row from ``KV = K @ split_by_class(alpha, y)``.

    With Kp = K (alpha y+) and Kn = K (alpha y-): P = Kp, N = Kn on the positive class and
    the other way round on the negative one, and Q alpha = y * (Kp - Kn). ``KV`` may be
    float32 (the product of a float32 Gram); every value is widened to float64 before any
    arithmetic. Branch-free, so that the loop over the columns is vectorised.
    """
    for j in range(y_row.shape[0]):
        kp = np.float64(kp_row[j])  # a float32 product is widened here, not in a copy
        kn = np.float64(kn_row[j])
        pos = y_row[j] > 0
        P_row[j] = kp if pos else kn
        N_row[j] = kn if pos else kp
        q_row[j] = y_row[j] * (kp - kn)


@njit(cache=True, inline="always")
def _summary_row(a_row, q_row, l_row, y_row, u_row, equality, tol, F, top, lo_b, hi_b, worst):
    """One row of :func:`pass_summary`: every column's accumulator advances by one sample.

    The KKT test is :func:`muflow.solvers._kkt_compiled.accumulate` on the gradient
    q + p. Branch-free, and each column keeps its own running sum, so the loop over the
    columns is vectorised without changing any column's order of summation.
    """
    for j in range(a_row.shape[0]):
        a = a_row[j]
        q = q_row[j]
        p = l_row[j]
        F[j] += a * (0.5 * q + p)
        top[j] = a if a > top[j] else top[j]
        accumulate(equality, j, a, q + p, y_row[j], u_row[j], tol, lo_b, hi_b, worst)


@njit(cache=True, inline="always")
def _summary_rows(products, equality, KV, y, alpha, linear, upper, tol, P, N, q_alpha,
                  objective, within, col_max):
    """The loop of :func:`pass_summary` and :func:`class_products_summary`: with
    ``products`` each row of P, N and Q alpha is first made from ``KV`` (z = y)."""
    n, m = alpha.shape
    lo_b = np.full(m, -np.inf)
    hi_b = np.full(m, np.inf)
    worst = np.zeros(m)
    for j in range(m):
        objective[j] = 0.0
        col_max[j] = -np.inf
    step_l = 1 if linear.shape[0] > 1 else 0
    step_u = 1 if upper.shape[0] > 1 else 0
    for i in range(n):
        if products:
            _class_row(KV[i, :m], KV[i, m:], y[i], P[i], N[i], q_alpha[i])
        _summary_row(alpha[i], q_alpha[i], linear[i * step_l], y[i], upper[i * step_u],
                     equality, tol, objective, col_max, lo_b, hi_b, worst)
    for j in range(m):
        within[j] = kkt_within(equality, lo_b[j], hi_b[j], worst[j], tol)


@njit(cache=True, error_model="numpy")
def pass_summary(alpha, q_alpha, linear, y, upper, equality, tol, objective, within, col_max):
    """One row-major pass for what a solver pass needs besides the products.

    Per column: the objective F = sum_i alpha_i (q_i / 2 + p_i), whether the KKT violation
    (:mod:`muflow.solvers.kkt`) on the gradient q + p is at most ``tol``, and max_i alpha_i.
    ``linear`` and ``upper`` are (n, m), or (1, m) when every sample of a column has the
    same value.
    """
    # equality as a constant in each loop, so that only its branch is compiled into it
    if equality:
        _summary_rows(False, True, q_alpha, y, alpha, linear, upper, tol, q_alpha, q_alpha,
                      q_alpha, objective, within, col_max)
    else:
        _summary_rows(False, False, q_alpha, y, alpha, linear, upper, tol, q_alpha, q_alpha,
                      q_alpha, objective, within, col_max)


@njit(cache=True, error_model="numpy")
def class_products_summary(KV, y, alpha, linear, upper, equality, tol, P, N, q_alpha,
                           objective, within, col_max):
    """P, N and Q alpha from the unflipped product (:func:`_class_row`) and
    :func:`pass_summary` in one pass.

    Each row of Q alpha is summarised while it is still in cache, rather than written out
    and read back with alpha, the labels and the bounds by a second pass over all of them.
    """
    if equality:
        _summary_rows(True, True, KV, y, alpha, linear, upper, tol, P, N, q_alpha, objective,
                      within, col_max)
    else:
        _summary_rows(True, False, KV, y, alpha, linear, upper, tol, P, N, q_alpha, objective,
                      within, col_max)


@njit(cache=True)
def objective_rose(objective, previous, slack, worse):
    """``worse[j]``: column j's objective rose above the previous pass's by more than its
    round-off ``slack[j]``; True when any did. (The solver's per-pass tests on m values,
    compiled: as NumPy calls each would cost a call's overhead, most of a pass on a small
    problem.)"""
    any_worse = False
    for j in range(objective.shape[0]):
        worse[j] = objective[j] > previous[j] + slack[j]
        any_worse |= worse[j]
    return any_worse


@njit(cache=True)
def pass_verdict(objective, satisfied, col_max, relative_floor, floor):
    """``(unbounded, all_satisfied)`` after a pass, and each column's floor for the next
    update, ``relative_floor * max(max_i alpha_i, 1e-8)``. Unbounded: an objective that is
    not finite or below -1e250 (a hard margin on data that are not separable)."""
    unbounded = False
    done = True
    for j in range(objective.shape[0]):
        f = objective[j]
        unbounded |= not (math.isfinite(f) and f >= -1e250)
        done &= satisfied[j]
        floor[j] = relative_floor * max(col_max[j], 1e-8)
    return unbounded, done
