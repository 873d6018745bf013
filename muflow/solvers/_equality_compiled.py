"""The multiplicative update under the sum constraint: lambda solved for every column (numba).

With sum_i y_i alpha_i = 0 the linear term of every rule becomes c + lambda z (M3 eq.
(14)-(16), z = s y in the flipped basis), and lambda is the root of
h(lambda) = sum_i y_i alpha_i(lambda) (eq. (17)), which decreases in lambda (M3 Theorem 2;
here with the clipping inside it). A safeguarded Newton iteration on the analytic slope
replaces the fixed point (18) (:func:`_root_propose`). Theorem 2 assumes a_i = P_i > 0
(footnote 4); a zero row of K breaks it: h then jumps, possibly past zero, and where the
bracket closes on such a jump the update is bridged across it (:func:`_bridge_jump`), so
that every update satisfies the constraint.

The iterates are (n, m) and row-major, so one column is strided. The root finders of all
m columns therefore run in lockstep: each round evaluates every column at its own lambda
in one row-major pass (:func:`_columns_eval`, whose loop over a row's m adjacent values
the compiler vectorises), then moves each column's lambda. A column whose root is found
stops moving; while others go on it is evaluated again at the same lambda, which
rewrites the same values. Copying the columns into contiguous vectors instead would read
a cache line per element.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from muflow.solvers._compiled import factor_slope

_MAX_ROUNDS = 400
# a round with at most m / _FEW_COLUMNS columns still moving evaluates them one by one
# (strided: a cache line per element, where the pass over all m columns is vectorised)
_FEW_COLUMNS = 8

# slots of the per-column root-finder state, st[slot, j]
_LAM, _A, _B, _HA, _HB, _STEP, _W1, _W2, _HPREV, _TOL, _SCALE, _DONE = range(12)
_SLOTS = 12


@njit(cache=True, inline="always")
def _element(rule, uniform, w, P, N, c, y, s, floor, u, lam):
    """alpha_i(lambda) and its slope, both times y_i: ``(alpha_i, y_i alpha_i, y_i dalpha_i)``.

    alpha_i(lambda) is the clipped (and, where s_i < 0, flipped back) update with the
    linear term c_i + lambda z_i, z_i = s_i y_i; a clipped coefficient contributes no slope.
    Each term is non-increasing in lambda, hence so is h. Branch-free. With ``uniform``
    s_i = 1 and ``s`` is not read.
    """
    si = 1.0 if uniform else s
    zi = si * y
    fl = floor if floor < u else u
    r, dr = factor_slope(rule, P, N, c + lam * zi)
    v = w * r
    d = w * dr * zi
    low = v < fl
    v = fl if low else v
    d = 0.0 if low else d
    high = v > u
    v = u if high else v
    d = 0.0 if high else d
    if not uniform:
        flip = si < 0.0
        v = u - v if flip else v
        d = -d if flip else d
    return v, y * v, y * d


@njit(cache=True, inline="always")
def _row_eval(rule, uniform, w, P, N, c, y, s, floor, upper, lam, total, slope, out):
    """One row's contribution to every column's h(lambda_j) and slope; its updates in ``out``.

    Each column keeps its own running sums, so that the loop over the columns is vectorised
    (which a loop over a sub-range of the columns, j0 <= j < j1, is not).
    """
    for j in range(w.shape[0]):
        v, yv, yd = _element(rule, uniform, w[j], P[j], N[j], c[j], y[j], s[j], floor[j],
                             upper[j], lam[j])
        out[j] = v
        total[j] += yv
        slope[j] += yd


@njit(cache=True, inline="always")
def _columns_loop(rule, uniform, w, P, N, c, y, s, floor, upper, lam, total, slope, out):
    """``out[:, j] = alpha_j(lambda_j)``, h_j and dh_j/dlambda for every column j.

    ``uniform``: no flips (s = 1, z = y) and the linear term and the bounds the same for
    every sample of a column: ``c`` and ``upper`` are then (1, m) and ``s`` is not read;
    otherwise they are (n, m).
    """
    for j in range(w.shape[1]):
        total[j] = 0.0
        slope[j] = 0.0
    step = 0 if uniform else 1
    for i in range(w.shape[0]):
        _row_eval(rule, uniform, w[i], P[i], N[i], c[i * step], y[i], s[i * step], floor,
                  upper[i * step], lam, total, slope, out[i])


# The lockstep evaluation compiled for SIMD: error_model="numpy" drops the zero-division
# checks (every division is guarded or its lane discarded) that keep LLVM from vectorising,
# and "reassoc" lets a sum be accumulated in vector lanes (a different rounding order,
# nothing else: no assumption about inf or NaN, which hard-margin bounds contain).
@njit(cache=True, error_model="numpy", fastmath={"reassoc"})
def _columns_eval(rule, uniform, w, P, N, c, y, s, floor, upper, lam, total, slope, out):
    """:func:`_columns_loop` with the rule and the mode as constants, one inlined copy per
    branch, so that each copy keeps only its rule's arithmetic and is vectorised."""
    if uniform:
        if rule == 0:
            _columns_loop(0, True, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
        elif rule == 1:
            _columns_loop(1, True, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
        elif rule == 2:
            _columns_loop(2, True, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
        else:
            _columns_loop(3, True, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
    elif rule == 0:
        _columns_loop(0, False, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
    elif rule == 1:
        _columns_loop(1, False, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
    elif rule == 2:
        _columns_loop(2, False, w, P, N, c, y, s, floor, upper, lam, total, slope, out)
    else:
        _columns_loop(3, False, w, P, N, c, y, s, floor, upper, lam, total, slope, out)


@njit(cache=True)
def _column_eval(rule, uniform, w, P, N, c, y, s, floor, upper, lam, j, out):
    """h_j(lambda) and its slope for column j alone, ``out[:, j]`` its update.

    Strided (a cache line per element), for the rounds in which only a few columns are
    still moving; ``rule`` is not a compile-time constant here (a few columns, not SIMD).
    """
    step = 0 if uniform else 1
    total = 0.0
    slope = 0.0
    for i in range(w.shape[0]):
        r = i * step
        v, yv, yd = _element(rule, uniform, w[i, j], P[i, j], N[i, j], c[r, j], y[i, j],
                             s[r, j], floor[j], upper[r, j], lam)
        out[i, j] = v
        total += yv
        slope += yd
    return total, slope


@njit(cache=True)
def _scales(w, c, upper, uniform, st):
    """Per column: the first blind step max(1, max_i |c_i|), and the root tolerance
    1e-14 (1 + sum_i (U_i if finite else |w_i|)), relative to the size of the sum."""
    n, m = w.shape
    for j in range(m):
        st[_SCALE, j] = 1.0
        st[_TOL, j] = 1.0
    if uniform:
        for j in range(m):
            st[_SCALE, j] = max(1.0, abs(c[0, j]))
            if upper[0, j] < 1e300:
                st[_TOL, j] += n * upper[0, j]
            else:
                for i in range(n):
                    st[_TOL, j] += abs(w[i, j])
    else:
        for i in range(n):
            for j in range(m):
                ac = abs(c[i, j])
                st[_SCALE, j] = ac if ac > st[_SCALE, j] else st[_SCALE, j]
                u = upper[i, j]
                st[_TOL, j] += u if u < 1e300 else abs(w[i, j])
    for j in range(m):
        st[_TOL, j] *= 1e-14


@njit(cache=True, inline="always")
def _narrow(st, j, h):
    """The current lambda, with h(lambda) = h, becomes the bracket's end on its side."""
    if h > 0.0:
        st[_A, j] = st[_LAM, j]
        st[_HA, j] = h
    else:
        st[_B, j] = st[_LAM, j]
        st[_HB, j] = h


@njit(cache=True, inline="always")
def _root_begin(st, j, h):
    """After the evaluation at the previous pass's lambda: done, or the bracket begun."""
    if abs(h) <= st[_TOL, j] or not math.isfinite(h):
        st[_DONE, j] = 1.0
        return
    st[_DONE, j] = 0.0
    # the bracket: h(a) >= 0 >= h(b)
    st[_A, j] = -np.inf
    st[_B, j] = np.inf
    st[_HA, j] = 0.0
    st[_HB, j] = 0.0
    _narrow(st, j, h)
    st[_STEP, j] = 0.0
    st[_W1, j] = np.inf
    st[_W2, j] = np.inf
    st[_HPREV, j] = h


@njit(cache=True, inline="always")
def _root_propose(st, j, h, d):
    """The next lambda of column j from h and its slope d at the current one.

    Near the solution lambda moves little between passes, so from the previous pass's
    multiplier one Newton step usually reaches the tolerance. Until the root is bracketed,
    steps go downhill with at least doubling length when the last one did not halve the
    residual; once it is bracketed, a Newton step outside the bracket becomes regula falsi,
    and bisection whenever the bracket has not halved in two steps.
    """
    lam = st[_LAM, j]
    a = st[_A, j]
    b = st[_B, j]
    if a > -np.inf and b < np.inf:
        x = lam - h / d if d < 0.0 else np.nan
        if not (x > a and x < b):
            ha = st[_HA, j]
            hb = st[_HB, j]
            x = (a * (-hb) + b * ha) / (ha - hb)
            if not (x > a and x < b):
                x = 0.5 * (a + b)
        if b - a > 0.5 * st[_W2, j]:
            x = 0.5 * (a + b)
        st[_W2, j] = st[_W1, j]
        st[_W1, j] = b - a
    else:
        # Newton's step length, downhill (h > 0: lambda up, h < 0: down)
        step = st[_STEP, j]
        dist = -h / d if d < 0.0 else 0.0
        if h < 0.0:
            dist = -dist
        if not (dist > 0.0 and dist < np.inf):
            dist = 2.0 * step if step > 0.0 else st[_SCALE, j]
        elif step > 0.0 and dist < 2.0 * step and abs(h) > 0.5 * abs(st[_HPREV, j]):
            dist = 2.0 * step
        st[_STEP, j] = dist
        x = lam + dist if h > 0.0 else lam - dist
    st[_HPREV, j] = h
    st[_LAM, j] = x


@njit(cache=True, inline="always")
def _root_accept(st, j, h):
    """After the evaluation at the proposed lambda: done, or the bracket narrowed."""
    lam = st[_LAM, j]
    if abs(h) <= st[_TOL, j]:
        st[_DONE, j] = 1.0
        return
    _narrow(st, j, h)
    if (st[_B, j] - st[_A, j]) <= 1e-15 * max(1.0, abs(lam)):
        st[_DONE, j] = 1.0


@njit(cache=True)
def _bridge_jump(rule, uniform, w, P, N, c, y, s, floor, upper, st, j, out):
    """Column j's update where h has no root: the bracket [a, b] closed on a jump of h.

    A sample whose row of K is zero (P_i = N_i = 0: a zero vector under a linear or a
    homogeneous polynomial kernel) has no quadratic term; its factor is 0 for
    c_i + lambda z_i > 0 and unbounded below it, so alpha_i(lambda) jumps from the floor to
    U_i there and h jumps with it, past zero (M3 Theorem 2 assumes a_i > 0, footnote 4).
    At the jump that sample's term of the extended objective (14) is flat, so every value
    in its box minimises it: the update is the convex combination of the updates at a and
    b, (1 - t) alpha(a) + t alpha(b) with t = h(a) / (h(a) - h(b)), for which
    sum_i y_i alpha_i = 0. The other samples barely move across the collapsed bracket.
    Should the rounds end before the bracket closes, the same combination still keeps the
    iterate feasible. Without a bracket (h of one sign everywhere: no feasible point) the
    last update stays.
    """
    a = st[_A, j]
    b = st[_B, j]
    if not (a > -np.inf and b < np.inf and a < b):
        return
    n = w.shape[0]
    at_a = np.empty(n)
    ha, _ = _column_eval(rule, uniform, w, P, N, c, y, s, floor, upper, a, j, out)
    for i in range(n):
        at_a[i] = out[i, j]
    hb, _ = _column_eval(rule, uniform, w, P, N, c, y, s, floor, upper, b, j, out)
    if not (ha > 0.0 and hb < 0.0):
        return
    t = ha / (ha - hb)
    for i in range(n):
        va = at_a[i]
        vb = out[i, j]
        v = va + t * (vb - va)
        lo = va if va < vb else vb
        hi = vb if va < vb else va
        out[i, j] = lo if v < lo else (hi if v > hi else v)
    st[_LAM, j] = a + t * (b - a)


@njit(cache=True, nogil=True)
def equality_step(rule, w, P, N, c, y, s, floor, upper, uniform, lam, out):
    """The update of every column with lambda solved per column, in place in ``lam``.

    ``w``, ``P``, ``N``, ``y`` and ``out`` are (n, m) and row-major; ``floor`` holds one
    value per column (sample i's floor is min(floor_j, upper_ij)). With ``uniform`` (no
    flips, and the linear term and the bounds constant within each column) ``c`` and
    ``upper`` are (1, m) and ``s`` is not read; otherwise ``c``, ``s`` and ``upper`` are
    (n, m) and the labels of the flipped basis are z = s y.

    The root is unique up to a flat stretch on which no alpha_i changes (each term is
    monotone), so the update is that of any other root finder at this tolerance. The lambda
    left in ``lam`` is the last one evaluated, so ``out`` holds its update, except where h
    has no root (a jump past zero): there ``out`` is :func:`_bridge_jump`'s update and
    ``lam`` the point of the jump. Free of the GIL. (No parameter has a default: numba's
    dispatcher sends a call that omits an argument down its slow Python path, once per
    pass.)
    """
    n, m = w.shape
    st = np.zeros((_SLOTS, m))
    h = np.empty(m)
    d = np.empty(m)
    _scales(w, c, upper, uniform, st)
    lam_now = st[_LAM]
    lam_now[:] = lam
    _columns_eval(rule, uniform, w, P, N, c, y, s, floor, upper, lam_now, h, d, out)
    active = 0
    for j in range(m):
        _root_begin(st, j, h[j])
        active += st[_DONE, j] == 0.0
    rounds = 0
    while active > 0 and rounds < _MAX_ROUNDS:
        for j in range(m):
            if st[_DONE, j] == 0.0:
                _root_propose(st, j, h[j], d[j])
        if active * _FEW_COLUMNS <= m:
            for j in range(m):
                if st[_DONE, j] == 0.0:
                    h[j], d[j] = _column_eval(rule, uniform, w, P, N, c, y, s, floor, upper,
                                              lam_now[j], j, out)
        else:
            _columns_eval(rule, uniform, w, P, N, c, y, s, floor, upper, lam_now, h, d, out)
        active = 0
        for j in range(m):
            if st[_DONE, j] == 0.0:
                _root_accept(st, j, h[j])
                active += st[_DONE, j] == 0.0
        rounds += 1
    for j in range(m):
        if not abs(h[j]) <= st[_TOL, j]:
            _bridge_jump(rule, uniform, w, P, N, c, y, s, floor, upper, st, j, out)
    lam[:] = lam_now
