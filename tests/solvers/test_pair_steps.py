"""The compiled pair steps of SMO: branch-free arg-min with its tie rule, the order of the
positions, resumed calls, and compact rows kept exact through shrinking."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from muflow.kernels import Kernel
from muflow.solvers import _compact_rows_compiled as cr
from muflow.solvers import _pairs_compiled as pc
from muflow.solvers import _subset_compiled as sc
from muflow.solvers.smo import compact_rows
from tests._references import a8a


def scan_argmin(keys, idx):
    """The reference: a scan with ``<=`` over the positions in sample order."""
    best, pos = np.inf, -1
    for k in np.argsort(idx, kind="stable"):
        if keys[k] < np.inf and keys[k] <= best:
            best, pos = keys[k], k
    return pos


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2**31 - 1), levels=st.integers(1, 6))
def test_block_argmin_is_the_scan_with_ties_to_the_last_sample(n, seed, levels):
    rng = np.random.default_rng(seed)
    # few distinct values: ties everywhere; +inf for non-members, a NaN now and then
    keys = rng.integers(-levels, levels, n).astype(np.float64)
    keys[rng.random(n) < 0.3] = np.inf
    keys[rng.random(n) < 0.05] = np.nan
    if rng.random() < 0.1:
        keys[:] = np.inf
    idx = rng.permutation(4 * n)[:n].astype(np.int64)
    bmin = np.empty((n + pc._BLOCK - 1) // pc._BLOCK)
    assert pc._argmin(keys, bmin, idx, n) == scan_argmin(keys, idx)


@pytest.fixture(scope="module")
def a8a_problem():
    """600 a8a rows (binary features: many duplicate samples, so many tied gains), rbf."""
    X, y = a8a(600)
    X = X.toarray()
    K = Kernel("rbf", gamma=0.05).block(X, X)
    return K, np.where(y > 0, 1.0, -1.0)


def run_pairs(K, y, C, act_order, *, shrinking, shrink_every=1000, curve_size=1 << 16,
              unshrink_gap=-np.inf, paused=None):
    """smo_pairs from alpha = 0 on every variable, K's rows all in place, resumed until DONE
    (after an UNSHRINK too, which ``paused`` collects as (steps, gap of the active set));
    returns (alpha, steps, compact-row arrays)."""
    n = len(y)
    U = np.full(n, C)
    alpha = np.zeros(n)
    G = -np.ones(n)
    QD = np.ascontiguousarray(np.diag(K))
    act = np.asarray(act_order, dtype=np.int64).copy()
    data = np.ascontiguousarray(K)
    slot_of = np.arange(n, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    clock = np.zeros(1, dtype=np.int64)
    state = np.zeros(sc.STATE_SIZE, dtype=np.int64)
    state[sc.STATE_PEND_I] = state[sc.STATE_PEND_J] = -1
    state[sc.STATE_NACT] = n
    F = np.zeros(1)
    curve = np.empty(curve_size)
    compact = compact_rows(n, data.dtype)
    calls = 0
    while True:
        calls += 1
        status = pc.smo_pairs(y, U, alpha, G, QD, act, data, slot_of, stamp, clock, state, F,
                              curve, 1e-3, unshrink_gap, 10**7, shrinking, shrink_every,
                              *compact)
        state[sc.STATE_CURVE] = 0
        if status == sc.DONE:
            return alpha, int(state[sc.STATE_ITER]), compact, act, state, calls
        if status == sc.UNSHRINK:
            paused.append((int(state[sc.STATE_ITER]), active_gap(y, U, alpha, G, act, state)))
            unshrink_gap = -np.inf
            state[sc.STATE_PEND_I] = state[sc.STATE_PEND_J] = -1
            continue
        assert status == sc.CURVE_FULL


def active_gap(y, U, alpha, G, act, state):
    """m(alpha) - M(alpha) over the active set (Fan, Chen & Lin 2005, eq. (9))."""
    k = act[: state[sc.STATE_NACT]]
    yk, ak, uk, yG = y[k], alpha[k], U[k], y[k] * G[k]
    up = np.where(yk > 0, ak < uk, ak > 0)
    low = np.where(yk > 0, ak > 0, ak < uk)
    return np.max(-yG[up]) - np.min(-yG[low])


def test_the_steps_do_not_depend_on_the_order_of_the_positions(a8a_problem):
    K, y = a8a_problem
    n = len(y)
    assert len(np.unique(K, axis=0)) < n  # duplicate samples: tied gains are met
    ref_alpha, ref_steps, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=False)
    order = np.random.default_rng(1).permutation(n)
    alpha, steps, *_ = run_pairs(K, y, 10.0, order, shrinking=False)
    assert steps == ref_steps > 100
    np.testing.assert_array_equal(alpha, ref_alpha)


def test_a_resumed_call_finds_its_compact_rows_and_takes_the_same_steps(a8a_problem):
    K, y = a8a_problem
    n = len(y)
    ref_alpha, ref_steps, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=True, shrink_every=50)
    alpha, steps, compact, _, _, calls = run_pairs(K, y, 10.0, np.arange(n), shrinking=True,
                                                   shrink_every=50, curve_size=37)
    assert calls > 10
    assert steps == ref_steps
    np.testing.assert_array_equal(alpha, ref_alpha)


def test_the_steps_pause_once_the_gap_reaches_the_unshrink_gap_and_resume_unchanged(a8a_problem):
    """UNSHRINK (libsvm's unshrinking point, the driver's to act on) comes the first time the
    active set's gap is at most ``unshrink_gap``, before the active set is solved; a call
    that goes on from there takes the steps an uninterrupted call takes."""
    K, y = a8a_problem
    n = len(y)
    ref_alpha, ref_steps, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=True,
                                         shrink_every=50)
    paused = []
    alpha, steps, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=True, shrink_every=50,
                                 unshrink_gap=1e-2, paused=paused)
    assert len(paused) == 1
    at, gap = paused[0]
    assert 0 < at < ref_steps and gap <= 1e-2
    assert steps == ref_steps
    np.testing.assert_array_equal(alpha, ref_alpha)


def test_compact_rows_stay_exact_through_shrinking(a8a_problem):
    K, y = a8a_problem
    n = len(y)
    alpha, steps, compact, act, state, _ = run_pairs(K, y, 10.0, np.arange(n), shrinking=True,
                                                     shrink_every=20)
    cbuf, crow_of, cowner, cstamp, cidx, cstate = compact
    layout = int(cstate[cr.CR_LAYOUT])
    stride = int(cstate[cr.CR_STRIDE])
    assert layout == state[sc.STATE_NACT] < n / 2  # shrunk, and repacked to a shorter stride
    assert stride < n
    np.testing.assert_array_equal(np.sort(cidx[:layout]), np.sort(act[:layout]))
    np.testing.assert_array_equal(np.sort(act), np.arange(n))  # act is still a permutation
    used = int(cstate[cr.CR_USED])
    assert used > 10
    rows = cbuf[:used * stride].reshape(used, stride)
    for r in range(used):
        np.testing.assert_array_equal(rows[r, :layout], K[cowner[r], cidx[:layout]])
        assert crow_of[cowner[r]] == r
    # the same solution as without shrinking, to the solver's tolerance
    full_alpha, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=False)
    Q = (y[:, None] * y[None, :]) * K

    def objective(a):
        return 0.5 * a @ Q @ a - a.sum()

    assert abs(objective(alpha) - objective(full_alpha)) <= 1e-3 * abs(objective(full_alpha))


def test_a_cache_of_two_compact_rows_takes_the_same_steps(a8a_problem, monkeypatch):
    """The least a step needs (the rows of i and j at once): rows are replaced every step."""
    import muflow.solvers.smo as smo

    K, y = a8a_problem
    n = len(y)
    ref_alpha, ref_steps, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=True, shrink_every=50)
    monkeypatch.setattr(smo, "COMPACT_ROWS_BYTES", 8)
    alpha, steps, compact, *_ = run_pairs(K, y, 10.0, np.arange(n), shrinking=True, shrink_every=50)
    assert compact[0].size == 2 * n
    assert steps == ref_steps
    np.testing.assert_array_equal(alpha, ref_alpha)
