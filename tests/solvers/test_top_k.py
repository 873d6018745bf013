"""The k smallest entries (:func:`muflow.solvers.top_k.smallest`) against their definition.

The answer is defined by the order of (value, position): the first k finite entries in it,
returned by position. Checked against ``np.lexsort`` on vectors with many equal values, +inf,
-inf and NaN (never chosen), short ones (every finite entry sorted) and long ones (the
sampled bound), k from 0 to more than the finite entries, on one thread and on several: the
same positions. A vector whose strided sample misleads the bound still gets the exact answer.
"""

from __future__ import annotations

import numpy as np
import pytest

from muflow.solvers._working_set_compiled import Threads
from muflow.solvers.top_k import SAMPLE, smallest


def _reference(values, k):
    finite = np.flatnonzero(np.isfinite(values))
    first = np.lexsort((finite, values[finite]))[: max(k, 0)]
    return np.sort(finite[first])


def _vector(n, seed):
    rng = np.random.default_rng(seed)
    values = np.round(rng.standard_normal(n), 1)  # about 60 distinct values: many ties
    values[rng.random(n) < 0.3] = np.inf
    values[rng.random(n) < 0.02] = -np.inf
    values[rng.random(n) < 0.01] = np.nan
    return values


@pytest.mark.parametrize("n", [1, 50, SAMPLE - 1, SAMPLE, 3_000, 30_000, 300_000])
@pytest.mark.parametrize("k", [0, 1, 7, 512, 5_000, 10**6])
def test_the_first_k_in_the_order_of_value_then_position(n, k):
    values = _vector(n, n + k)
    expected = _reference(values, k)
    got = smallest(values, k)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n_threads", [2, 3, 5])
def test_the_same_positions_on_any_number_of_threads(n_threads):
    values = _vector(700_000, 1)  # long enough that the pass is shared out
    assert Threads(n_threads).parts(values.size, 1) == n_threads
    np.testing.assert_array_equal(smallest(values, 1_000, Threads(n_threads)), smallest(values, 1_000))
    np.testing.assert_array_equal(smallest(values, 1_000), _reference(values, 1_000))


def test_a_sample_that_misleads_the_bound_still_gives_the_exact_answer():
    n = 100 * SAMPLE
    stride = n // SAMPLE
    values = np.ones(n)
    values[::stride] = 0.0  # every sampled entry is 0: the bound is 0, and only SAMPLE are
    values[1::stride] = 0.5
    got = smallest(values, 3 * SAMPLE)
    np.testing.assert_array_equal(got, _reference(values, 3 * SAMPLE))


def test_nothing_finite_gives_nothing():
    assert smallest(np.full(10_000, np.inf), 5).size == 0
    assert smallest(np.array([np.nan, -np.inf]), 1).size == 0
