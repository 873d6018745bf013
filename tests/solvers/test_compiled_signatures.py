"""Each compiled multiplicative step is compiled for one signature only.

A read-only or non-contiguous array is another type to numba, and compiling the
equality-constrained step again costs about 30 s in a fresh environment (the suite's first
run, and every user's first fit). The solver hands the steps C-contiguous, writable float64
arrays on every path: unflipped, flipped (M3 eq. 20-25) and per-sample bounds.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba.core import types

from muflow import SVC
from muflow.solvers import _compiled, _equality_compiled


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = np.where(X[:, 0] + 0.3 * rng.standard_normal(60) > 0, 1, -1)
    return X, y


@pytest.mark.parametrize("step, intercept", [(_equality_compiled.equality_step, "exact"),
                                             (_compiled.multiplicative_step, "none")])
def test_every_path_hands_the_step_writable_contiguous_arrays(data, step, intercept):
    X, y = data
    weights = np.linspace(0.5, 1.5, len(y))
    for solver in ("m3", "m3_flipped"):
        for sample_weight in (None, weights):
            SVC(solver=solver, intercept=intercept, max_iter=3).fit(X, y, sample_weight=sample_weight)
    arrays = [t for sig in step.signatures for t in sig if isinstance(t, types.Array)]
    assert arrays and all(t.layout == "C" and t.mutable for t in arrays), step.signatures
