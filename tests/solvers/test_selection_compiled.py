"""The compiled selection passes equal their NumPy references, however the range is split.

:func:`muflow.solvers._selection_compiled.side_pass` against
:func:`muflow.solvers.working_set_loop.side_violations` (eq. (9) of Fan, Chen & Lin 2005) and
:func:`~muflow.solvers._selection_compiled.pair_gains` against WSS 2's gains (eq. (14))
written in NumPy, on random states with variables at both bounds and free; bit for bit, since
a thread's range must not change a number. The gradient update fused with the first pass
(:func:`~muflow.solvers._selection_compiled.add_rows_sides`) and the shrink read from the
pool (:func:`~muflow.solvers._selection_compiled.shrink_pool`) against the passes they
replace, with ``np.argmax``'s maximal violators (ties and an empty side included); the
working set's choice (:func:`~muflow.solvers._selection_compiled.choose_working_set`) against
its NumPy steps.
"""

from __future__ import annotations

import numpy as np
import pytest

from muflow.solvers._selection_compiled import (add_rows_sides, merge_maxima, pair_gains,
                                               shrink_pool, side_pass)
from muflow.solvers._working_set_compiled import BLOCK, add_rows
from muflow.solvers._subset_compiled import _TAU, shrink_mask
from muflow.solvers.working_set_loop import side_violations


def _state(n, seed):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    U = rng.uniform(0.5, 2.0, n)
    alpha = np.where(rng.random(n) < 0.3, 0.0, np.where(rng.random(n) < 0.5, U, rng.uniform(0, 1, n) * U))
    G = rng.standard_normal(n)
    act = np.sort(rng.choice(n, n * 3 // 4, replace=False)).astype(np.int64)
    return y, alpha, U, G, act


@pytest.mark.parametrize("edges", [[0, 750], [0, 1, 300, 750], [0, 374, 375, 750]])
def test_side_pass_is_side_violations_on_any_split(edges):
    y, alpha, U, G, act = _state(1000, 0)
    v_up, v_low, a, u = (np.full(act.size, np.nan) for _ in range(4))
    for lo, hi in zip(edges[:-1], edges[1:]):
        side_pass(y, alpha, U, G, act, v_up, v_low, a, u, lo, hi)
    _, _, _, ref_up, ref_low = side_violations(y[act], alpha[act], U[act], G[act])
    assert np.array_equal(v_up, ref_up) and np.array_equal(v_low, ref_low)
    assert np.array_equal(a, alpha[act]) and np.array_equal(u, U[act])


@pytest.mark.parametrize("rows", ["both", "i only", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pair_gains_are_wss2_gains(rows, dtype):
    y, alpha, U, G, act = _state(1000, 1)
    _, _, _, v_up, v_low = side_violations(y[act], alpha[act], U[act], G[act])
    rng = np.random.default_rng(2)
    QD = rng.uniform(0.5, 1.5, 1000)
    row_i = rng.uniform(-1, 1, 1000).astype(dtype)
    row_j = rng.uniform(-1, 1, 1000).astype(dtype)
    ku, kl = int(np.argmax(v_up)), int(np.argmax(v_low))
    gmax, gmax2 = v_up[ku], v_low[kl]
    ri = row_i if rows != "none" else None
    rj = row_j if rows == "both" else None
    # WSS 2 in NumPy over the pool act (the expressions of eq. (14))
    yG = np.where(np.isfinite(v_low), v_low, -v_up)
    b_up, b_low = -yG + gmax2, yG + gmax
    Qp = QD[act]
    a_up = np.maximum(Qp + Qp[kl] - 2.0 * rj[act], _TAU) if rj is not None else 1.0
    a_low = np.maximum(Qp[ku] + Qp - 2.0 * ri[act], _TAU) if ri is not None else 1.0
    ref_up = np.where(np.isfinite(v_up) & (b_up > 0), -(b_up * b_up) / a_up, np.inf)
    ref_low = np.where(np.isfinite(v_low) & (b_low > 0), -(b_low * b_low) / a_low, np.inf)
    gain_up, gain_low = np.empty(act.size), np.empty(act.size)
    none = np.zeros(0)
    for lo, hi in ((0, 200), (200, 201), (201, act.size)):
        pair_gains(v_up, v_low, QD, act, QD[act[ku]], QD[act[kl]], none if ri is None else ri,
                   none if rj is None else rj, gmax, gmax2, gain_up, gain_low, lo, hi)
    assert np.array_equal(gain_up, ref_up) and np.array_equal(gain_low, ref_low)
    assert np.isfinite(gain_up).sum() > 10 and np.isfinite(gain_low).sum() > 10


def _rows_state(n, seed, ties):
    y, alpha, U, G, act = _state(n, seed)
    rng = np.random.default_rng(seed + 10)
    data = rng.uniform(-1, 1, (40, n)).astype(np.float32)
    slots = np.ascontiguousarray(rng.choice(40, 13, replace=False), dtype=np.int64)
    coef = rng.standard_normal(13)
    if ties:  # moved by nothing, and every variable tied on its side: the first must win
        coef[:] = 0.0
        G = np.where(y > 0, 1.0, -1.0) * 0.5
    return y, alpha, U, G, act, data, slots, coef


#: Targets of the split test: more than two of the update's blocks, and a part of one
N_SPLIT = 2 * BLOCK + 904


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("edges", [[0, N_SPLIT], [0, N_SPLIT // 2, N_SPLIT],
                                   [0, 1, BLOCK + 1, 2 * BLOCK + 1, N_SPLIT],
                                   [0, N_SPLIT - 1, N_SPLIT]])
def test_the_fused_update_is_the_update_then_the_side_pass_on_any_split(edges, ties):
    n = N_SPLIT
    y, alpha, U, G, act, data, slots, coef = _rows_state(n, 3, ties)
    G_ref = G.copy()
    add_rows(G_ref, y, data, slots, coef, 0, n)
    _, _, _, ref_up, ref_low = side_violations(y[act], alpha[act], U[act], G_ref[act])
    G_new = G.copy()
    pool = [np.full(act.size, np.nan) for _ in range(4)]
    best = np.full((len(edges) - 1, 4), np.nan)
    for k, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        add_rows_sides(G_new, y, data, slots, coef, alpha, U, act, *pool, best, k, lo, hi)
    assert np.array_equal(G_new, G_ref)
    assert np.array_equal(pool[0], ref_up) and np.array_equal(pool[1], ref_low)
    assert np.array_equal(pool[2], alpha[act]) and np.array_equal(pool[3], U[act])
    assert merge_maxima(best) == (int(np.argmax(ref_up)), int(np.argmax(ref_low)))
    assert 2 * BLOCK < n  # the blocks inside a range are exercised too


def test_merge_maxima_of_ranges_without_a_violator_is_argmax_of_the_whole():
    best = np.array([[-np.inf, -1, -np.inf, -1], [2.0, 7, -np.inf, -1], [2.0, 9, 1.0, 12]])
    assert merge_maxima(best) == (7, 12)
    assert merge_maxima(best[:1]) == (0, 0)  # np.argmax of an all -inf side


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pool_drops_the_variables_the_shrink_rule_drops(seed):
    """:func:`shrink_pool` reads libsvm's shrinking rule from the pool (violations, alpha,
    bounds) where :func:`shrink_mask` reads it from alpha, U and G through the active set:
    the same variables leave, at gaps that drop none, some or most of those at a bound; the
    kept ones' indices and pool entries move to the front in order, and their maximal
    violators are np.argmax's over what is kept (the old maximal violator may have left)."""
    y, alpha, U, G, act = _state(1000, seed)
    v_up, v_low, a, u = (np.empty(act.size) for _ in range(4))
    side_pass(y, alpha, U, G, act, v_up, v_low, a, u, 0, act.size)
    gmax1, gmax2 = float(v_up.max()), float(v_low.max())
    dropped = set()
    for scale in (10.0, 1.0, 0.0, -1.0):
        ref = shrink_mask(y, alpha, U, G, act, scale * gmax1, scale * gmax2, True)
        pool = [act.copy(), v_up.copy(), v_low.copy(), a.copy(), u.copy()]
        best = np.empty((1, 4))
        kept, left = shrink_pool(y, *pool, scale * gmax1, scale * gmax2, best)
        keep = ~ref
        assert np.array_equal(left, act[ref]) and kept == keep.sum()
        for got, before in zip(pool, [act, v_up, v_low, a, u]):
            assert np.array_equal(got[:kept], before[keep])
        if kept:
            assert merge_maxima(best) == (int(np.argmax(v_up[keep])), int(np.argmax(v_low[keep])))
        dropped.add(int(ref.sum()))
    free = (alpha[act] > 0) & (alpha[act] < U[act])
    assert 0 in dropped and max(dropped) > act.size // 3 and not ref[free].any()


def _choose_in_numpy(v_up, v_low, a, U, previous, ku, kl, gmax, gmax2, gain_up, gain_low, q):
    """The working set's choice in NumPy, step by step (WSS 2 of Fan, Chen & Lin 2005 with
    the previous set's useful part kept), as the selection did before the compiled call."""
    from muflow.solvers.top_k import smallest

    score = lambda pos: np.maximum(v_up[pos] + gmax2, v_low[pos] + gmax)  # noqa: E731
    useful = previous[(score(previous) > 0) | ((a[previous] > 0) & (a[previous] < U[previous]))]
    kept = useful[np.argsort(-score(useful), kind="stable")[: q // 2]]
    anchors = np.array([ku, kl], dtype=np.int64)
    taken = np.union1d(kept, anchors)
    need = q - taken.size
    gain_up[taken] = np.inf
    gain_low[taken] = np.inf
    new_up = smallest(gain_up, need // 2)
    gain_low[new_up] = np.inf
    new_low = smallest(gain_low, need - new_up.size)
    if new_up.size + new_low.size < need:
        gain_up[new_low] = np.inf
        gain_up[new_up] = np.inf
        new_up = np.concatenate([new_up, smallest(gain_up, need - new_up.size - new_low.size)])
    idx = np.concatenate([anchors, kept, new_up, new_low])
    _, first = np.unique(idx, return_index=True)
    return idx[np.sort(first)][:q]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("q", [2, 3, 16, 64, 600])
def test_the_compiled_choice_is_the_numpy_steps(seed, q):
    """:func:`choose_working_set` picks the positions the NumPy steps pick, in the same
    order, and leaves the same gains: pools of 5 to 3,000 variables with ties (gains rounded
    to a few values), sides too short to fill B, a previous set of any size, equal maximal
    violators, and pools above top_k's sample."""
    from muflow.solvers._selection_compiled import choose_working_set
    from muflow.solvers.top_k import SAMPLE

    rng = np.random.default_rng(seed)
    n = [5, 40, 300, 3000, 2500, 1200][seed]
    y, alpha, U, G, act = _state(n * 4 // 3 + 1, seed)
    _, _, _, v_up, v_low = side_violations(y[act], alpha[act], U[act], G[act])
    a, u = alpha[act], U[act]
    size = act.size
    ku, kl = int(np.argmax(v_up)), int(np.argmax(v_low))
    if seed == 4:
        kl = ku
    gmax, gmax2 = float(v_up[ku]), float(v_low[kl])
    gain_up = np.round(rng.standard_normal(size), 1) - 1.0
    gain_low = np.round(rng.standard_normal(size), 1) - 1.0
    # variables off a side have +inf gains; one side nearly empty in two of the pools
    gain_up[rng.random(size) < (0.97 if seed in (1, 5) else 0.3)] = np.inf
    gain_low[rng.random(size) < 0.3] = np.inf
    previous = np.sort(rng.choice(size, min(size, q), replace=False)).astype(np.int64)
    ref_up, ref_low = gain_up.copy(), gain_low.copy()
    expected = _choose_in_numpy(v_up, v_low, a, u, previous, ku, kl, gmax, gmax2, ref_up,
                                ref_low, q)
    got = choose_working_set(v_up, v_low, a, u, previous, ku, kl, gmax, gmax2, gain_up,
                             gain_low, q, SAMPLE)
    assert np.array_equal(got, expected)
    assert np.array_equal(gain_up, ref_up) and np.array_equal(gain_low, ref_low)
