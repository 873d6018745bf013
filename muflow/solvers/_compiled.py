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


@njit(cache=True, inline="always")
def _new_value(rule, w, P, N, c, floor, upper, flipped):
    v = w * factor(rule, P, N, c)
    if v < floor:
        v = floor
    if v > upper:
        v = upper
    return upper - v if flipped else v


@njit(cache=True)
def _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, lam):
    total = 0.0
    for i in range(w.shape[0]):
        a = _new_value(rule, w[i], P[i], N[i], c[i] + lam * z[i],
                       floor[i], upper[i], s[i] < 0)
        total += y[i] * a
    return total


@njit(cache=True)
def _solve_lambda(rule, w, P, N, c, z, y, s, floor, upper, lam0):
    """lambda with sum_i y_i alpha_i(lambda) = 0; the sum decreases in lambda (M3 Thm. 2).

    Works on one column held in contiguous vectors (see :func:`multiplicative_step`).
    """
    n = w.shape[0]
    scale = 1.0
    total = 1.0
    for i in range(n):
        ac = abs(c[i])
        if ac > scale:
            scale = ac
        if upper[i] < 1e300:
            total += upper[i]
        else:
            total += abs(w[i])
    a = lam0 - scale
    b = lam0 + scale
    ha = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, a)
    hb = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, b)
    for _ in range(200):
        if ha >= 0.0 and hb <= 0.0:
            break
        width = b - a
        if ha < 0.0:
            a -= width
            ha = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, a)
        if hb > 0.0:
            b += width
            hb = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, b)
    lam = 0.5 * (a + b)
    side = 0
    for _ in range(200):
        denom = ha - hb
        if denom != 0.0:
            lam = (a * (-hb) + b * ha) / denom
        if not (lam > a and lam < b):
            lam = 0.5 * (a + b)
        hl = _constraint_sum(rule, w, P, N, c, z, y, s, floor, upper, lam)
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
    """One update of every column into ``out``; solves lambda in place when ``equality``.

    The arrays are (n, m) and row-major, so a column is strided; the root finding visits
    each column tens of times, so the column is first copied into contiguous vectors
    (with m > 1 a strided pass touches one cache line per element).
    """
    n, m = w.shape
    if not equality:
        for i in range(n):
            for j in range(m):
                out[i, j] = _new_value(rule, w[i, j], P[i, j], N[i, j], c[i, j],
                                       floor[i, j], upper[i, j], s[i, j] < 0)
        return
    wj = np.empty(n)
    Pj = np.empty(n)
    Nj = np.empty(n)
    cj = np.empty(n)
    zj = np.empty(n)
    yj = np.empty(n)
    sj = np.empty(n)
    fj = np.empty(n)
    uj = np.empty(n)
    for j in range(m):
        for i in range(n):
            wj[i] = w[i, j]
            Pj[i] = P[i, j]
            Nj[i] = N[i, j]
            cj[i] = c[i, j]
            zj[i] = z[i, j]
            yj[i] = y[i, j]
            sj[i] = s[i, j]
            fj[i] = floor[i, j]
            uj[i] = upper[i, j]
        lam[j] = _solve_lambda(rule, wj, Pj, Nj, cj, zj, yj, sj, fj, uj, lam[j])
        shift = lam[j]
        for i in range(n):
            out[i, j] = _new_value(rule, wj[i], Pj[i], Nj[i], cj[i] + shift * zj[i],
                                   fj[i], uj[i], sj[i] < 0)


@njit(cache=True)
def _residual_max(alpha, grad, y, upper, b):
    worst = 0.0
    for i in range(alpha.shape[0]):
        t = alpha[i] - (grad[i] + y[i] * b)
        u = upper[i]
        if t < 0.0:
            t = 0.0
        if t > u:
            t = u
        r = abs(alpha[i] - t)
        if r > worst:
            worst = r
    return worst


@njit(cache=True)
def _bias_interval(alpha, grad, y, upper, tau):
    lo_b = -np.inf
    hi_b = np.inf
    for i in range(alpha.shape[0]):
        u = upper[i]
        if u <= 0.0:
            continue
        a = alpha[i]
        base = a - grad[i]
        lo_t = a - tau if a - tau > 0.0 else -np.inf
        hi_t = a + tau if a + tau < u else np.inf
        yb_lo = base - hi_t
        yb_hi = base - lo_t
        if y[i] > 0:
            blo, bhi = yb_lo, yb_hi
        else:
            blo, bhi = -yb_hi, -yb_lo
        if blo > lo_b:
            lo_b = blo
        if bhi < hi_b:
            hi_b = bhi
    return lo_b, hi_b


@njit(cache=True)
def _split_bounds(L, T, lo, hi, idx, count, const, sign):
    """Fold samples whose bound is active at every level in (lo, hi) into ``const``.

    A sample bounds b (``sign`` = +1: from below, by L_i - tau; -1: from above, by
    L_i + tau) while tau < T_i. For levels in (lo, hi): T_i >= hi means always active
    (folded into ``const``, the running max of sign * L), T_i <= lo never active
    (dropped). The undecided rest stays in ``idx[:count]``, compacted in place.
    """
    kept = 0
    for k in range(count):
        i = idx[k]
        t = T[i]
        if t >= hi:
            v = sign * L[i]
            if v > const:
                const = v
        elif t > lo:
            idx[kept] = i
            kept += 1
    return kept, const


@njit(cache=True)
def _undecided_extreme(L, T, tau, idx, count, const, sign):
    """max of sign * L_i over ``const`` and the undecided samples active at tau."""
    best = const
    for k in range(count):
        i = idx[k]
        if tau < T[i]:
            v = sign * L[i]
            if v > best:
                best = v
    return best


@njit(cache=True)
def _gather_kkt_column(alpha, grad, y, upper, j, aj, gj, yj, uj):
    """Copy column j of the KKT inputs into contiguous vectors (row-major columns are strided)."""
    for i in range(alpha.shape[0]):
        aj[i] = alpha[i, j]
        gj[i] = grad[i, j]
        yj[i] = y[i, j]
        uj[i] = upper[i, j]


@njit(cache=True)
def kkt_columns(alpha, grad, y, upper, equality, hint, violation, bias):
    """Natural-residual KKT violation per column, bias minimising it (see kkt.py).

    Each column is copied into contiguous vectors first: the bisection visits it tens of
    times, and a strided column of a row-major (n, m) array costs a cache line per element.
    The bisection tests levels on per-sample thresholds computed once per column (the
    same intervals as :func:`_bias_interval`, which gives the bias itself).
    """
    n, m = alpha.shape
    if not equality:
        # one row-major pass; the gathering below pays off only for the bisection
        for j in range(m):
            bias[j] = 0.0
            violation[j] = 0.0
        for i in range(n):
            for j in range(m):
                t = alpha[i, j] - grad[i, j]
                u = upper[i, j]
                if t < 0.0:
                    t = 0.0
                if t > u:
                    t = u
                r = abs(alpha[i, j] - t)
                if r > violation[j]:
                    violation[j] = r
        return
    aj = np.empty(n)
    gj = np.empty(n)
    yj = np.empty(n)
    uj = np.empty(n)
    L = np.empty(n)
    A = np.empty(n)
    B = np.empty(n)
    il = np.empty(n, dtype=np.int64)
    iu = np.empty(n, dtype=np.int64)
    for j in range(m):
        _gather_kkt_column(alpha, grad, y, upper, j, aj, gj, yj, uj)
        # b >= L_i - tau while alpha_i + tau < U_i (y > 0) or alpha_i - tau > 0 (y < 0),
        # b <= L_i + tau while alpha_i - tau > 0 (y > 0) or alpha_i + tau < U_i (y < 0),
        # with L_i = -y_i g_i; pinned samples (U_i <= 0) bound nothing
        for i in range(n):
            a = aj[i]
            u = uj[i]
            if u <= 0.0:
                L[i] = 0.0
                A[i] = -np.inf
                B[i] = -np.inf
            elif yj[i] > 0:
                L[i] = -gj[i]
                A[i] = u - a
                B[i] = a
            else:
                L[i] = gj[i]
                A[i] = a
                B[i] = u - a
        b0 = hint[j]
        hi = _residual_max(aj, gj, yj, uj, b0)
        lo = 0.0
        # the bisection narrows (lo, hi); a sample whose threshold leaves that window is
        # decided for good, so each step only scans the still undecided ones
        nl, nu = n, n
        for i in range(n):
            il[i] = i
            iu[i] = i
        nl, clo = _split_bounds(L, A, lo, hi, il, nl, -np.inf, 1.0)
        nu, chi = _split_bounds(L, B, lo, hi, iu, nu, -np.inf, -1.0)
        for _ in range(100):
            if hi - lo <= 1e-12 * max(1e-3, hi):
                break
            mid = 0.5 * (lo + hi)
            lo_b = _undecided_extreme(L, A, mid, il, nl, clo, 1.0)
            hi_b = -_undecided_extreme(L, B, mid, iu, nu, chi, -1.0)
            if lo_b - mid <= hi_b + mid:
                hi = mid
            else:
                lo = mid
            nl, clo = _split_bounds(L, A, lo, hi, il, nl, clo, 1.0)
            nu, chi = _split_bounds(L, B, lo, hi, iu, nu, chi, -1.0)
        blo, bhi = _bias_interval(aj, gj, yj, uj, hi)
        if np.isfinite(blo) and np.isfinite(bhi):
            b = 0.5 * (blo + bhi)
        elif np.isfinite(blo):
            b = blo
        elif np.isfinite(bhi):
            b = bhi
        else:
            b = b0
        r = _residual_max(aj, gj, yj, uj, b)
        r0 = _residual_max(aj, gj, yj, uj, b0)
        if r0 <= r:
            b, r = b0, r0
        bias[j] = b
        violation[j] = r


@njit(cache=True)
def split_by_class(w, z, V):
    """``V = [w * (z > 0), w * (z <= 0)]`` in one pass, V of shape (n, 2m).

    The operand of MUNK's one product per pass on a non-negative kernel: the same-class
    and cross-class blocks of munk eq. (7) come from K times these two halves.
    """
    n, m = w.shape
    for i in range(n):
        for j in range(m):
            v = w[i, j]
            if z[i, j] > 0:
                V[i, j] = v
                V[i, m + j] = 0.0
            else:
                V[i, j] = 0.0
                V[i, m + j] = v


@njit(cache=True)
def class_products(KV, z, y, P, N, q_alpha):
    """P, N and Q alpha from ``KV = K @ split_by_class(w, z)`` in one pass.

    With Kp = K (w z+) and Kn = K (w z-): P = Kp, N = Kn on the positive class and the
    other way round on the negative one, and Q alpha = y * (Kp - Kn).
    """
    n, m = z.shape
    for i in range(n):
        for j in range(m):
            kp = KV[i, j]
            kn = KV[i, m + j]
            if z[i, j] > 0:
                P[i, j] = kp
                N[i, j] = kn
            else:
                P[i, j] = kn
                N[i, j] = kp
            q_alpha[i, j] = y[i, j] * (kp - kn)


@njit(cache=True)
def objective_columns(alpha, q_alpha, linear, out):
    """F_j = sum_i alpha_ij (q_ij / 2 + p_ij) per column, without an (n, m) temporary."""
    n, m = alpha.shape
    for j in range(m):
        out[j] = 0.0
    for i in range(n):
        for j in range(m):
            out[j] += alpha[i, j] * (0.5 * q_alpha[i, j] + linear[i, j])


@njit(cache=True)
def kkt_within_columns(alpha, grad, y, upper, equality, tol, out):
    """Whether the KKT violation of each column is at most ``tol`` (one pass per column).

    The cheap form of :func:`kkt_columns` for a per-pass stopping test: with the equality
    constraint, the violation is <= tol exactly when the bias intervals allowed at level tol
    intersect, so no bisection is needed.
    """
    n, m = alpha.shape
    aj = np.empty(n)
    gj = np.empty(n)
    yj = np.empty(n)
    uj = np.empty(n)
    for j in range(m):
        _gather_kkt_column(alpha, grad, y, upper, j, aj, gj, yj, uj)
        if equality:
            lo, hi = _bias_interval(aj, gj, yj, uj, tol)
            out[j] = lo <= hi
        else:
            out[j] = _residual_max(aj, gj, yj, uj, 0.0) <= tol
