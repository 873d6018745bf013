"""The update under the sum constraint, checked column by column against SciPy's brentq.

:func:`muflow.solvers._equality_compiled.equality_step` solves lambda for all columns in
lockstep (one row-major pass per round), and evaluates the last few moving columns one
by one. Both paths must give every column the update at the root of
h(lambda) = sum_i y_i alpha_i(lambda) (M3 eq. (17)), which the reference here finds with
NumPy and brentq on each column alone.
"""

import numpy as np
import pytest
from scipy.optimize import brentq

from muflow.solvers._compiled import RULE_IDS
from muflow.solvers._equality_compiled import equality_step


def _reference_factor(rule, P, N, c):
    P = np.maximum(P, 1e-300)
    if rule == "m3":
        return (-c + np.sqrt(c * c + 4 * P * N)) / (2 * P)
    num = N + np.maximum(-c, 0.0)
    den = P + np.maximum(c, 0.0)
    if rule == "munk":
        return num / den
    if rule == "seminmf":
        return np.sqrt(num / den)
    return (num + N) / (den + N)


def _reference_column(rule, w, P, N, c, y, s, floor, upper):
    """alpha(lambda) at the root of h, for one column, from scratch."""
    z = s * y

    def alpha(lam):
        v = w * _reference_factor(rule, P, N, c + lam * z)
        v = np.clip(v, np.minimum(floor, upper), upper)
        return np.where(s < 0, upper - v, v)

    def h(lam):
        return float(np.sum(y * alpha(lam)))

    lo, hi = -1.0, 1.0
    while h(lo) < 0:
        lo *= 2
    while h(hi) > 0:
        hi *= 2
    root = brentq(h, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=500)
    return alpha(root)


def _inputs(seed, n, m, uniform):
    rng = np.random.default_rng(seed)
    w = rng.random((n, m)) * 0.5 + 1e-3
    P = rng.random((n, m)) + 0.05
    N = rng.random((n, m)) * 1.5
    y = np.where(rng.random((n, m)) < 0.4, -1.0, 1.0)
    floor = np.full(m, 1e-12)
    if uniform:
        c = np.full((1, m), -1.0)
        upper = rng.uniform(0.5, 2.0, size=(1, m))
        s = y  # not read
    else:
        c = -1.0 + 0.3 * rng.normal(size=(n, m))
        upper = rng.uniform(0.2, 2.0, size=(n, m))
        s = np.where(rng.random((n, m)) < 0.2, -1.0, 1.0)
    return w, P, N, c, y, s, floor, upper


def _check_against_reference(rule, inputs, uniform, out):
    w, P, N, c, y, s, floor, upper = inputs
    n, m = w.shape
    for j in range(m):
        cj = np.broadcast_to(c[:, j], (n,))
        uj = np.broadcast_to(upper[:, j], (n,))
        sj = np.ones(n) if uniform else s[:, j]
        expected = _reference_column(rule, w[:, j], P[:, j], N[:, j], cj, y[:, j], sj,
                                     floor[j], uj)
        np.testing.assert_allclose(out[:, j], expected, rtol=1e-9, atol=1e-12)
        assert abs(np.sum(y[:, j] * out[:, j])) <= 1e-10 * np.sum(np.abs(out[:, j]))


@pytest.mark.parametrize("uniform", [True, False], ids=["uniform", "weighted-flipped"])
@pytest.mark.parametrize("rule", ["m3", "munk", "seminmf", "musik"])
def test_every_column_gets_the_update_at_its_root(rule, uniform):
    inputs = _inputs(3, 300, 21, uniform)
    w, P, N, c, y, s, floor, upper = inputs
    lam = np.zeros(21)
    out = np.empty_like(w)
    equality_step(RULE_IDS[rule], w, P, N, c, y, s, floor, upper, uniform, lam, out)
    _check_against_reference(rule, inputs, uniform, out)


@pytest.mark.parametrize("uniform", [True, False], ids=["uniform", "weighted-flipped"])
def test_the_last_moving_columns_alone_reach_the_same_roots(uniform):
    """From the solved multipliers with two of 24 perturbed, only those two move after the
    first round: they are evaluated one by one (strided), the rest not at all."""
    rule = "munk"
    inputs = _inputs(5, 300, 24, uniform)
    w, P, N, c, y, s, floor, upper = inputs
    lam = np.zeros(24)
    out = np.empty_like(w)
    equality_step(RULE_IDS[rule], w, P, N, c, y, s, floor, upper, uniform, lam, out)
    solved = lam.copy()
    lam[[3, 17]] += [0.5, -0.25]
    out2 = np.full_like(w, np.nan)
    equality_step(RULE_IDS[rule], w, P, N, c, y, s, floor, upper, uniform, lam, out2)
    np.testing.assert_allclose(lam, solved, rtol=1e-9, atol=1e-12)
    _check_against_reference(rule, inputs, uniform, out2)


@pytest.mark.parametrize("rule", ["m3", "munk", "seminmf", "musik"])
def test_a_zero_row_of_k_takes_up_the_jump_of_h(rule):
    """Sample 0 has a zero row of K (P_0 = N_0 = 0): its factor is 0 for c_0 + lambda > 0
    and unbounded below, so h jumps past zero at lambda = 1 and has no root. The update is
    the one at lambda = 1 for the other samples, and sample 0 takes the value inside its
    box that makes sum_i y_i alpha_i = 0 (every value minimises its flat term there)."""
    m = 3
    w = np.array([[0.5], [0.1], [0.1], [0.3]]) * np.array([1.0, 1.5, 2.0])
    P = np.array([[0.0], [1.0], [1.0], [1.0]]) * np.ones(m)
    N = np.array([[0.0], [0.0], [0.0], [0.25]]) * np.ones(m)
    y = np.array([[1.0], [-1.0], [-1.0], [1.0]]) * np.ones(m)
    c = np.full((1, m), -1.0)
    upper = np.full((1, m), 1.0)
    floor = np.full(m, 1e-12)
    lam = np.zeros(m)
    out = np.empty_like(w)
    equality_step(RULE_IDS[rule], w, P, N, c, y, y, floor, upper, True, lam, out)
    others = np.clip(w[1:] * _reference_factor(rule, P[1:], N[1:], c + y[1:]), floor, 1.0)
    np.testing.assert_allclose(lam, 1.0, rtol=1e-12)
    np.testing.assert_allclose(out[1:], others, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(out[0], -np.sum(y[1:] * out[1:], axis=0), rtol=1e-12)
    assert np.all((out[0] > floor) & (out[0] < 1.0))
