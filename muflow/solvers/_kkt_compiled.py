"""The KKT measure of :mod:`muflow.solvers.kkt`, compiled: its per-sample pieces and its value.

Every loop that measures a KKT violation calls the per-sample primitives here, inlined
(``inline="always"``: numba copies their code into the caller, so a vectorised loop stays
vectorised and no call is made per sample):

- :func:`residual`, the natural residual |r_i(b)| of one sample;
- :func:`bias_interval`, the biases a sample admits at a level tau (equality constraint);
- :func:`accumulate` and :func:`within`, the one-pass test "violation <= tol";
- :func:`bias_thresholds`, the same intervals as thresholds, for the bisection.

Their users: :func:`kkt_columns` (the value of the measure and its bias; every solver's
final certificate), the multiplicative per-pass summary (:mod:`muflow.solvers._compiled`),
the subset solvers' residuals (:func:`residuals_column`) and linear coordinate descent
(:mod:`muflow.solvers._linear_compiled`). The plain NumPy reference that the tests hold
them to is :func:`muflow.solvers.kkt.kkt_violation_reference`.

numba's on-disk cache does not follow inlined code across modules: after editing this
module, delete the ``.nbi``/``.nbc`` files of its users in ``muflow/solvers/__pycache__``
(or set ``NUMBA_CACHE_DIR`` to a fresh folder), or they keep running the old primitives.

Notation of :mod:`muflow.solvers.kkt`: for one column, alpha_i in [0, U_i], g_i the gradient
of F (Q alpha + p), y_i = +-1 and b the bias; U_i = 0 pins a sample (it bounds no bias).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def box_scale(u):
    """s_i = min(1, U_i), 1 for a pinned sample (U_i <= 0): the step of the residual
    (:mod:`muflow.solvers.kkt`), which measures alpha_i / s_i in the box [0, U_i / s_i]."""
    return u if 0.0 < u < 1.0 else 1.0


@njit(cache=True, inline="always")
def residual(a, g, u):
    """|r_i| = |alpha_i - clip(alpha_i - s_i g_i, 0, U_i)| / s_i for the Lagrangian
    gradient g_i, s_i = :func:`box_scale` (U_i): the natural residual of alpha_i / s_i in
    the box [0, U_i / s_i].

    With the equality constraint the caller passes g_i + y_i b. Branch-free (selects), so
    that a loop over columns that calls it is vectorised.
    """
    s = box_scale(u)
    a = a / s
    u = u / s
    t = a - g
    t = 0.0 if t < 0.0 else t
    t = u if t > u else t
    return abs(a - t)


@njit(cache=True, inline="always")
def bias_interval(a, g, y, u, tau):
    """``(lo, hi)``: the biases b with |r_i(b)| <= tau, for one sample.

    |r_i(b)| <= tau holds when alpha_i - (g_i + y_i b) lies in [alpha_i - tau, alpha_i + tau],
    widened to an unbounded side where that end passes a bound of the box (clipping keeps
    r_i there). Solved for y_i b, then for b. A pinned sample (U_i <= 0) admits every b.
    Measured on alpha_i / s_i in [0, U_i / s_i] (:func:`residual`). Branch-free.
    """
    s = box_scale(u)
    a = a / s
    u = u / s
    base = a - g
    lo_t = a - tau if a - tau > 0.0 else -np.inf
    hi_t = a + tau if a + tau < u else np.inf
    yb_lo = base - hi_t
    yb_hi = base - lo_t
    pos = y > 0
    lo = yb_lo if pos else -yb_hi
    hi = yb_hi if pos else -yb_lo
    free = u > 0.0
    return (lo if free else -np.inf), (hi if free else np.inf)


@njit(cache=True, inline="always")
def bias_thresholds(a, g, y, u):
    """:func:`bias_interval` at every level at once: ``(L, A, B)`` with, for tau >= 0,

        b >= L - tau while tau < A,        b <= L + tau while tau < B,

    L = -y_i g_i; A = U_i - alpha_i, B = alpha_i for y_i > 0 and the other way round for
    y_i < 0 (the level at which that end of the interval reaches a bound of the box and
    stops constraining b), alpha_i and U_i measured as :func:`residual` measures them
    (divided by s_i). A pinned sample bounds nothing (A = B = -inf).
    """
    if u <= 0.0:
        return 0.0, -np.inf, -np.inf
    s = box_scale(u)
    a = a / s
    u = u / s
    if y > 0:
        return -g, u - a, a
    return g, a, u - a


@njit(cache=True, inline="always")
def accumulate(equality, j, a, g, y, u, tol, lo_b, hi_b, worst):
    """Add one sample to column j's running test "violation <= tol".

    Without the equality constraint: ``worst[j]`` is the running max of :func:`residual`
    (b = 0). With it: ``[lo_b[j], hi_b[j]]`` is the running intersection of the samples'
    :func:`bias_interval` at level tol, which is non-empty exactly when some b has
    V(b) <= tol, i.e. when the minimised violation is at most tol (no bisection needed).
    """
    finite = abs(a) + abs(g) < np.inf  # NaN or inf in alpha or the gradient fails the test
    if equality:
        lo, hi = bias_interval(a, g, y, u, tol)
        lo = lo if finite else np.inf  # an empty interval: no bias satisfies this sample
        hi = hi if finite else -np.inf
        lo_b[j] = lo if lo > lo_b[j] else lo_b[j]
        hi_b[j] = hi if hi < hi_b[j] else hi_b[j]
    else:
        r = residual(a, g, u)
        r = r if finite else np.inf
        worst[j] = r if r > worst[j] else worst[j]


@njit(cache=True, inline="always")
def within(equality, lo_b, hi_b, worst, tol):
    """The verdict of :func:`accumulate` for one column's accumulators."""
    return lo_b <= hi_b if equality else worst <= tol


@njit(cache=True, inline="always")
def residual_max(alpha, grad, y, upper, b):
    """V(b) = max_i |r_i(b)| of one column (contiguous vectors)."""
    worst = 0.0
    for i in range(alpha.shape[0]):
        r = residual(alpha[i], grad[i] + y[i] * b, upper[i])
        if r > worst:
            worst = r
    return worst


@njit(cache=True)
def residuals_column(alpha, grad, y, upper, b, out):
    """``out[i] = |r_i(b)|`` for one column (b = 0 without the equality constraint)."""
    for i in range(alpha.shape[0]):
        out[i] = residual(alpha[i], grad[i] + y[i] * b, upper[i])


@njit(cache=True)
def _column_interval(alpha, grad, y, upper, tau):
    """The intersection of every sample's :func:`bias_interval` at level tau."""
    lo_b = -np.inf
    hi_b = np.inf
    for i in range(alpha.shape[0]):
        lo, hi = bias_interval(alpha[i], grad[i], y[i], upper[i], tau)
        if lo > lo_b:
            lo_b = lo
        if hi < hi_b:
            hi_b = hi
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
def _kkt_equality(aj, gj, yj, uj, b0, L, A, B, il, iu):
    """``(violation, bias)`` of one column with the sum constraint, on contiguous vectors:
    the bisection of :func:`kkt_columns` (``b0`` the hint; ``L``, ``A``, ``B``, ``il``,
    ``iu``: work space of n entries each)."""
    n = aj.shape[0]
    if not (np.all(np.isfinite(aj)) and np.all(np.isfinite(gj))):
        return np.inf, b0  # NaN or inf in alpha or the gradient: never a KKT point
    for i in range(n):
        L[i], A[i], B[i] = bias_thresholds(aj[i], gj[i], yj[i], uj[i])
    hi = residual_max(aj, gj, yj, uj, b0)
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
    blo, bhi = _column_interval(aj, gj, yj, uj, hi)
    if np.isfinite(blo) and np.isfinite(bhi):
        b = 0.5 * (blo + bhi)
    elif np.isfinite(blo):
        b = blo
    elif np.isfinite(bhi):
        b = bhi
    else:
        b = b0
    r = residual_max(aj, gj, yj, uj, b)
    r0 = residual_max(aj, gj, yj, uj, b0)
    if r0 <= r:
        b, r = b0, r0
    # far from a KKT point V is flat over a range of b (every residual at its cap: after
    # one step, or where a deadline stopped): the bisection's end then says nothing (it
    # gave 0, and a model that predicts one class); libsvm's bias where it is as good
    bl = libsvm_bias(aj, gj, yj, uj)
    rl = residual_max(aj, gj, yj, uj, bl)
    if rl <= r:
        b, r = bl, rl
    return r, b


@njit(cache=True)
def libsvm_bias(alpha, grad, y, upper):
    """libsvm's bias of any iterate: b = -rho, rho the mean of y_i g_i over the free
    variables or, with none free, the middle of [max over one bound set, min over the
    other] (Fan, Chen & Lin, JMLR 6, 2005; libsvm's ``calculate_rho``). A pinned sample
    (U_i <= 0) counts in neither."""
    lb = -np.inf
    ub = np.inf
    total = 0.0
    free = 0
    for i in range(alpha.shape[0]):
        u = upper[i]
        if u <= 0.0:
            continue
        yg = y[i] * grad[i]
        at_upper = alpha[i] >= u
        if at_upper or alpha[i] <= 0.0:
            if at_upper == (y[i] > 0):  # y = +1 at U, y = -1 at 0: rho >= y g
                lb = yg if yg > lb else lb
            else:
                ub = yg if yg < ub else ub
        else:
            total += yg
            free += 1
    if free > 0:
        return -total / free
    if np.isfinite(lb) and np.isfinite(ub):
        return -0.5 * (lb + ub)
    return 0.0


@njit(cache=True)
def kkt_columns(alpha, grad, y, upper, equality, hint, violation, bias):
    """Natural-residual KKT violation per column, and the bias minimising it (see kkt.py).

    All arrays are (n, m) float64 but ``hint`` (a bias to start from), ``violation`` and
    ``bias`` (m,). With the equality constraint the smallest level tau at which the
    samples' bias intervals intersect is found by bisection, on the per-sample thresholds
    of :func:`bias_thresholds` computed once per column; the bias is the middle of the
    intersection at that level (:func:`bias_interval`), or the hint where that is no worse,
    or libsvm's (:func:`libsvm_bias`) where that is no worse either (a V flat in b).

    Each column is copied into contiguous vectors first: the bisection visits it tens of
    times, and a strided column of a row-major (n, m) array costs a cache line per element.
    """
    n, m = alpha.shape
    if not equality:
        # one row-major pass; the gathering below pays off only for the bisection
        for j in range(m):
            bias[j] = 0.0
            violation[j] = 0.0
        for i in range(n):
            for j in range(m):
                a = alpha[i, j]
                g = grad[i, j]
                r = residual(a, g, upper[i, j])
                # NaN would compare false and leave the measure at 0: non-finite is inf
                r = r if abs(a) + abs(g) < np.inf else np.inf
                if r > violation[j]:
                    violation[j] = r
        return
    # contiguous rows: column j's alpha, g, y and U, its thresholds, the undecided samples
    work = np.empty((7, n))
    aj, gj, yj, uj, L, A, B = work[0], work[1], work[2], work[3], work[4], work[5], work[6]
    undecided = np.empty((2, n), dtype=np.int64)
    il, iu = undecided[0], undecided[1]
    for j in range(m):
        _gather_kkt_column(alpha, grad, y, upper, j, aj, gj, yj, uj)
        violation[j], bias[j] = _kkt_equality(aj, gj, yj, uj, hint[j], L, A, B, il, iu)


@njit(cache=True)
def kkt_vector(alpha, grad, y, upper, hint):
    """:func:`kkt_columns` with the sum constraint on one column given as contiguous vectors:
    ``(violation, bias)``, read in place (no gathered copy of the four)."""
    n = alpha.shape[0]
    work = np.empty((3, n))
    undecided = np.empty((2, n), dtype=np.int64)
    return _kkt_equality(alpha, grad, y, upper, hint, work[0], work[1], work[2], undecided[0],
                         undecided[1])
