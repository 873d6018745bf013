"""Compiled per-sample loops shared by the solvers (numba, cached on disk).

NumPy spends microseconds per call on small arrays; the root finding for the sum
constraint and the bisection of the KKT measure call their loops tens of times per
iteration, so they run here as tight loops, one column at a time.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

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


@njit(cache=True)
def _new_value(rule, w, P, N, c, floor, upper, flipped):
    v = w * factor(rule, P, N, c)
    if v < floor:
        v = floor
    if v > upper:
        v = upper
    return upper - v if flipped else v


@njit(cache=True)
def _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, j, lam):
    total = 0.0
    for i in range(w.shape[0]):
        a = _new_value(rule, w[i, j], P[i, j], N[i, j], c[i, j] + lam * z[i, j],
                       floor[i, j], upper[i, j], s[i, j] < 0)
        total += y[i, j] * a
    return total


@njit(cache=True)
def _solve_lambda(rule, w, P, N, c, z, y, s, floor, upper, j, lam0):
    """lambda with sum_i y_i alpha_i(lambda) = 0; the sum decreases in lambda (M3 Thm. 2)."""
    n = w.shape[0]
    scale = 1.0
    total = 1.0
    for i in range(n):
        ac = abs(c[i, j])
        if ac > scale:
            scale = ac
        if upper[i, j] < 1e300:
            total += upper[i, j]
        else:
            total += abs(w[i, j])
    a = lam0 - scale
    b = lam0 + scale
    ha = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, j, a)
    hb = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, j, b)
    for _ in range(200):
        if ha >= 0.0 and hb <= 0.0:
            break
        width = b - a
        if ha < 0.0:
            a -= width
            ha = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, j, a)
        if hb > 0.0:
            b += width
            hb = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, j, b)
    lam = 0.5 * (a + b)
    side = 0
    for _ in range(200):
        denom = ha - hb
        if denom != 0.0:
            lam = (a * (-hb) + b * ha) / denom
        if not (lam > a and lam < b):
            lam = 0.5 * (a + b)
        hl = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, j, lam)
        if abs(hl) <= 1e-14 * total or (b - a) <= 1e-15 * max(1.0, abs(lam)):
            break
        if hl < 0.0:
            b, hb = lam, hl
            if side == 1:
                ha *= 0.5
            side = 1
        else:
            a, ha = lam, hl
            if side == -1:
                hb *= 0.5
            side = -1
    return lam


@njit(cache=True)
def multiplicative_step(rule, w, P, N, c, z, y, s, floor, upper, equality, lam, out):
    """One update of every column into ``out``; solves lambda in place when ``equality``."""
    n, m = w.shape
    for j in range(m):
        if equality:
            lam[j] = _solve_lambda(rule, w, P, N, c, z, y, s, floor, upper, j, lam[j])
        shift = lam[j] if equality else 0.0
        for i in range(n):
            out[i, j] = _new_value(rule, w[i, j], P[i, j], N[i, j], c[i, j] + shift * z[i, j],
                                   floor[i, j], upper[i, j], s[i, j] < 0)


@njit(cache=True)
def _residual_max(alpha, grad, y, upper, j, b):
    worst = 0.0
    for i in range(alpha.shape[0]):
        t = alpha[i, j] - (grad[i, j] + y[i, j] * b)
        u = upper[i, j]
        if t < 0.0:
            t = 0.0
        if t > u:
            t = u
        r = abs(alpha[i, j] - t)
        if r > worst:
            worst = r
    return worst


@njit(cache=True)
def _bias_interval(alpha, grad, y, upper, j, tau):
    lo_b = -np.inf
    hi_b = np.inf
    for i in range(alpha.shape[0]):
        u = upper[i, j]
        if u <= 0.0:
            continue
        a = alpha[i, j]
        base = a - grad[i, j]
        lo_t = a - tau if a - tau > 0.0 else -np.inf
        hi_t = a + tau if a + tau < u else np.inf
        yb_lo = base - hi_t
        yb_hi = base - lo_t
        if y[i, j] > 0:
            blo, bhi = yb_lo, yb_hi
        else:
            blo, bhi = -yb_hi, -yb_lo
        if blo > lo_b:
            lo_b = blo
        if bhi < hi_b:
            hi_b = bhi
    return lo_b, hi_b


@njit(cache=True)
def kkt_columns(alpha, grad, y, upper, equality, hint, violation, bias):
    """Natural-residual KKT violation per column, bias minimising it (see kkt.py)."""
    n, m = alpha.shape
    for j in range(m):
        if not equality:
            bias[j] = 0.0
            violation[j] = _residual_max(alpha, grad, y, upper, j, 0.0)
            continue
        b0 = hint[j]
        hi = _residual_max(alpha, grad, y, upper, j, b0)
        lo = 0.0
        for _ in range(100):
            if hi - lo <= 1e-12 * max(1e-3, hi):
                break
            mid = 0.5 * (lo + hi)
            blo, bhi = _bias_interval(alpha, grad, y, upper, j, mid)
            if blo <= bhi:
                hi = mid
            else:
                lo = mid
        blo, bhi = _bias_interval(alpha, grad, y, upper, j, hi)
        if np.isfinite(blo) and np.isfinite(bhi):
            b = 0.5 * (blo + bhi)
        elif np.isfinite(blo):
            b = blo
        elif np.isfinite(bhi):
            b = bhi
        else:
            b = b0
        r = _residual_max(alpha, grad, y, upper, j, b)
        r0 = _residual_max(alpha, grad, y, upper, j, b0)
        if r0 <= r:
            b, r = b0, r0
        bias[j] = b
        violation[j] = r
