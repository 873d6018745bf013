"""Compiled passes of the working-set selection (numba, cached on disk, GIL released).

WSS 2 (Fan, Chen & Lin, "Working set selection using second order information for training
support vector machines", JMLR 6, 2005) reads every active variable twice an outer
iteration: once for the violations of eq. (9) (:func:`side_pass`), once for the gains of
eq. (14) against the maximal violators (:func:`pair_gains`). After a gradient update the
first is fused with it (:func:`add_rows_sides`): each block of the gradient is read for
the violations while it is still in the CPU's cache, and each range hands back its maximal
violators for the caller to merge (:func:`merge_maxima`). libsvm's shrinking reads the same
pool (:func:`shrink_pool`). Each is one fused loop over a
range ``[lo, hi)`` of the pool, so that a thread takes a range
(:meth:`muflow.solvers._working_set_compiled.Threads.split`) and the NumPy expressions they
replace (:func:`muflow.solvers.working_set_loop.side_violations` and the gains of
:func:`~muflow.solvers.working_set_loop.select_working_set`) are computed with the same
operations in the same order: the same numbers, however the ranges are shared out.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from muflow.solvers._subset_compiled import _TAU, leaves_active_set
from muflow.solvers._working_set_compiled import BLOCK, add_block

#: A pass's work an item, in the multiply-adds that
#: :meth:`muflow.solvers._working_set_compiled.Threads.split` weighs work in. Written
#: without data-dependent branches, a pass costs a few of the gradient's multiply-adds an
#: item even with its arrays out of the CPU's cache (mispredicted branches cost several
#: times that), so it is shared out from 32,768 variables on, where each thread's part
#: outweighs its hand-off (docs/benchmarks.md, "Threads and workers").
WORK_PER_ITEM = 8


@njit(cache=True, nogil=True)
def side_pass(y, alpha, U, G, act, v_up, v_low, a_pool, U_pool, lo, hi):
    """For the active variables ``t = act[p]``, lo <= p < hi: ``v_up[p] = -y_t G_t`` on
    I_up = {y = +1, a < U} u {y = -1, a > 0}, ``v_low[p] = y_t G_t`` on I_low (the mirror),
    -inf outside (eq. (9)); ``a_pool[p]``, ``U_pool[p]``: alpha_t and its bound."""
    for p in range(lo, hi):
        # the sides by logic, not branches: y and the bounds come in no order a branch
        # predictor could learn
        t = act[p]
        a = alpha[t]
        u = U[t]
        yG = y[t] * G[t]
        pos = y[t] > 0
        below, above = a < u, a > 0
        up = (pos & below) | ((not pos) & above)
        low = (pos & above) | ((not pos) & below)
        v_up[p] = -yG if up else -np.inf
        v_low[p] = yG if low else -np.inf
        a_pool[p] = a
        U_pool[p] = u


@njit(cache=True, nogil=True)
def pair_gains(v_up, v_low, QD, at, QD_i, QD_j, row_i, row_j, gmax, gmax2, gain_up, gain_low,
               lo, hi):
    """WSS 2's gains (eq. (14)) of the pool's variables p in [lo, hi): a variable of I_up by
    its pair with the maximal violator j of I_low, ``-(b_pj)^2 / a_pj`` with
    ``b = v_up + gmax2`` and ``a = max(K_tt + K_jj - 2 K_tj, tau)``, one of I_low by its
    pair with the violator i of I_up (``b = v_low + gmax``); +inf where the variable is not
    on that side or does not violate. ``at[p]`` is the variable's position in ``QD`` and the
    rows; an empty ``row_i`` / ``row_j`` ranks that side by b alone (a = 1)."""
    tau = _TAU
    has_i = row_i.shape[0] > 0
    has_j = row_j.shape[0] > 0
    for p in range(lo, hi):
        # each gain computed whatever the side, then kept or not: no branch on the
        # variables' sides (a side's -inf gives b = -inf, never > 0)
        t = at[p]
        b_up = v_up[p] + gmax2
        b_low = v_low[p] + gmax
        a_up = max(QD[t] + QD_j - 2.0 * np.float64(row_j[t]), tau) if has_j else 1.0
        a_low = max(QD_i + QD[t] - 2.0 * np.float64(row_i[t]), tau) if has_i else 1.0
        gain_up[p] = -(b_up * b_up) / a_up if b_up > 0 else np.inf
        gain_low[p] = -(b_low * b_low) / a_low if b_low > 0 else np.inf


@njit(cache=True, nogil=True, inline="always")
def range_maxima(v_up, v_low, lo, hi, best, k):
    """Row k of ``best`` = (max v_up, its first position, max v_low, its first position)
    over the pool's positions lo <= p < hi; a position -1 where none is above -inf."""
    best_up, at_up, best_low, at_low = -np.inf, -1, -np.inf, -1
    for r in range(lo, hi):
        if v_up[r] > best_up:
            best_up, at_up = v_up[r], r
        if v_low[r] > best_low:
            best_low, at_low = v_low[r], r
    best[k, 0], best[k, 1], best[k, 2], best[k, 3] = best_up, at_up, best_low, at_low


@njit(cache=True, nogil=True)
def add_rows_sides(G, y, data, slots, coef, alpha, U, act, v_up, v_low, a_pool, U_pool, best,
                   k, lo, hi):
    """The gradient update (:func:`muflow.solvers._working_set_compiled.add_rows`) of the
    targets lo <= t < hi, then, block by block (:data:`BLOCK` targets, the update's own
    blocks) while the block's G is in the CPU's cache,
    :func:`side_pass` of the active variables among them (``act`` ascending; the pool's
    positions p with lo <= act[p] < hi); row k of ``best`` receives this range's maximal
    violators (:func:`range_maxima`). The same operations in the same order as
    ``add_rows`` then ``side_pass``, however the ranges are shared out."""
    acc = np.empty(BLOCK)
    n_act = act.shape[0]
    first = p = np.searchsorted(act, lo)
    for start in range(lo, hi, BLOCK):
        stop = min(start + BLOCK, hi)
        add_block(G, y, data, slots, coef, acc, start, stop)
        end = p
        while end < n_act and act[end] < stop:
            end += 1
        side_pass(y, alpha, U, G, act, v_up, v_low, a_pool, U_pool, p, end)
        p = end
    range_maxima(v_up, v_low, first, p, best, k)


def merge_maxima(best: np.ndarray) -> tuple[int, int]:
    """The pool's maximal violators (ku, kl) from the ranges' rows of ``best``
    (:func:`range_maxima`): the first position of each maximum, as ``np.argmax`` over the
    whole pool gives it (0 where every entry is -inf)."""
    ku = kl = 0
    best_up = best_low = -np.inf
    for row in best:
        if row[1] >= 0 and row[0] > best_up:
            best_up, ku = row[0], int(row[1])
        if row[3] >= 0 and row[2] > best_low:
            best_low, kl = row[2], int(row[3])
    return ku, kl


@njit(cache=True, nogil=True)
def shrink_pool(y, act, v_up, v_low, a_pool, U_pool, gmax1, gmax2, best):
    """libsvm's shrinking (the rule's one copy:
    :func:`muflow.solvers._subset_compiled.leaves_active_set`) read from the pool that
    :func:`side_pass` or :func:`add_rows_sides` left at the current point, in one pass: y_t
    G_t is ``v_low`` where the variable is in I_low, else ``-v_up`` (the same value: a
    negation is exact; a free variable, on both sides, never leaves whichever it is given).
    The variables kept move to the front of ``act`` and of the pool, in order, so that the
    next selection reads their violations without a pass; row 0 of ``best`` receives their
    maximal violators (:func:`range_maxima`). Returns how many are kept and the variables
    that left (their indices, ascending as in ``act``)."""
    n = act.shape[0]
    dropped = np.empty(n, dtype=np.int64)
    kept = 0
    left = 0
    for p in range(n):
        # every entry is written to both ends and the counts say which write stays: no
        # branch on the rule's answer (kept <= p, so nothing unread is overwritten)
        t = act[p]
        vu, vl, a, u = v_up[p], v_low[p], a_pool[p], U_pool[p]
        leave = np.int64(leaves_active_set(y[t], a, u, vl if vl > -np.inf else -vu, gmax1,
                                           gmax2))
        act[kept] = t
        v_up[kept], v_low[kept], a_pool[kept], U_pool[kept] = vu, vl, a, u
        dropped[left] = t
        kept += 1 - leave
        left += leave
    range_maxima(v_up, v_low, 0, kept, best, 0)
    return kept, dropped[:left]


@njit(cache=True, nogil=True)
def sampled_bound(values, k, sample):
    """A value that about ``1.5 k`` of the finite entries of ``values`` do not exceed, read
    from ``sample`` entries a stride apart (the stride's share of each sampled value): +inf
    where the sample is too small to tell. Any bound is correct for :func:`collect_at_most`
    (a bound too low is seen and replaced), a good one only saves work."""
    n = values.shape[0]
    stride = max(1, n // sample)
    found = np.empty(n // stride + 1)
    c = 0
    for p in range(0, n, stride):
        v = values[p]
        if np.isfinite(v):
            found[c] = v
            c += 1
    rank = int(1.5 * k / stride) + 8
    if rank >= c:
        return np.inf
    return np.sort(found[:c])[rank]


@njit(cache=True, nogil=True)
def collect_at_most(values, bound, out, starts, counts, k, lo, hi):
    """The positions lo <= p < hi of the finite entries at most ``bound``, ascending, into
    ``out[lo:]``; ``starts[k] = lo`` and ``counts[k]`` = how many (a range per thread)."""
    c = lo
    for p in range(lo, hi):
        v = values[p]
        if v <= bound and np.isfinite(v):
            out[c] = p
            c += 1
    starts[k] = lo
    counts[k] = c - lo


@njit(cache=True, nogil=True)
def smallest_in_one(values, k, sample):
    """:func:`muflow.solvers.top_k.smallest` on this thread in one call (a pool too short to
    share out): the bound from ``sample`` entries (:func:`sampled_bound`), the positions of
    the finite entries at most it (:func:`collect_at_most`), every finite one where the
    bound was low, and of those the k first (:func:`first_k`). The same steps as the
    threaded path; none where k <= 0."""
    n = values.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    bound = np.inf if n < sample else sampled_bound(values, k, sample)
    out = np.empty(n, dtype=np.int64)
    starts, counts = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    collect_at_most(values, bound, out, starts, counts, 0, 0, n)
    if counts[0] < k and bound < np.inf:
        collect_at_most(values, np.inf, out, starts, counts, 0, 0, n)
    return first_k(values, out[: counts[0]], k)


@njit(cache=True, nogil=True)
def first_k(values, pos, k):
    """Of the ascending positions ``pos``, the (at most) k first in the order of (value,
    position), ascending: a stable sort of their values keeps equal ones in position order."""
    if pos.size <= k:
        return pos
    return np.sort(pos[np.argsort(values[pos], kind="mergesort")[:k]])


@njit(cache=True, nogil=True)
def choose_working_set(v_up, v_low, a, U, previous, ku, kl, gmax, gmax2, gain_up, gain_low, q,
                       sample):
    """The working set's positions in the pool with the sum constraint, in the order chosen
    (:func:`muflow.solvers.working_set_loop.select_working_set`, whose steps these are, in
    one call): the maximal violators ``ku`` and ``kl``; then the previous set's useful
    variables (``previous``, positions ascending: violating, max(v_up + gmax2, v_low + gmax)
    > 0, or free), at most q // 2, most violating first, equal ones in position order; then
    need // 2 of I_up with the smallest ``gain_up`` (:func:`pair_gains`), the rest of I_low
    by ``gain_low``, the first side filling what the second lacks. The gains of the
    variables taken are set to +inf in place."""
    m = previous.shape[0]
    useful = np.empty(m, dtype=np.int64)
    score = np.empty(m)
    c = 0
    for r in range(m):
        p = previous[r]
        s = max(v_up[p] + gmax2, v_low[p] + gmax)
        if s > 0 or (a[p] > 0 and a[p] < U[p]):
            useful[c] = p
            score[c] = -s
            c += 1
    kept = useful[:c][np.argsort(score[:c], kind="mergesort")[: q // 2]]
    anchors = np.array([ku, kl], dtype=np.int64)
    seen = np.zeros(v_up.shape[0], dtype=np.bool_)
    taken = 0
    for part in (anchors, kept):
        for p in part:
            if not seen[p]:
                seen[p] = True
                taken += 1
            gain_up[p] = np.inf
            gain_low[p] = np.inf
    need = q - taken
    new_up = smallest_in_one(gain_up, need // 2, sample)
    for p in new_up:
        gain_low[p] = np.inf
    new_low = smallest_in_one(gain_low, need - new_up.size, sample)
    if new_up.size + new_low.size < need:  # one side ran short: the other fills B
        for p in new_low:
            gain_up[p] = np.inf
        for p in new_up:
            gain_up[p] = np.inf
        extra = smallest_in_one(gain_up, need - new_up.size - new_low.size, sample)
        new_up = np.concatenate((new_up, extra))
    # each once, in order of first appearance, at most q
    out = np.empty(q, dtype=np.int64)
    seen[:] = False
    c = 0
    for part in (anchors, kept, new_up, new_low):
        for p in part:
            if not seen[p] and c < q:
                seen[p] = True
                out[c] = p
                c += 1
    return out[:c]
