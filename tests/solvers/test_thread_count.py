"""The working-set solver's result does not depend on how many threads share its ranges.

Every range pass (rows split by columns, K_BB by rows, the gradient update, WSS 2's passes)
computes each number with the same operations whatever the split, so 1, 2 and 3 threads give
the same alpha to the bit. The split threshold is lowered so that these small problems are
split at all (:data:`muflow.solvers._working_set_compiled._SPLIT_MIN_WORK`).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification

from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.solvers import _working_set_compiled
from muflow.solvers.problem import DualProblem
from muflow.solvers.working_set import solve_working_set
from tests._references import a8a


def _solve(X, y, kernel, threads, *, C=1.0, q=64, cache_mb=2.0):
    rows = KernelRows(X, kernel, dtype="float32", block_rows=32, n_threads=threads)
    problem = DualProblem(rows, y, upper=C, equality=True)
    return solve_working_set(problem, tol=1e-3, q=q, cache_mb=cache_mb, n_threads=threads)


@pytest.mark.parametrize("data", ["a8a", "generated"])
def test_one_two_and_three_threads_give_the_same_alpha(data, monkeypatch):
    monkeypatch.setattr(_working_set_compiled, "_SPLIT_MIN_WORK", 1)
    if data == "a8a":
        X, y = a8a(3000)
        kernel = Kernel("rbf", gamma=0.05)
    else:
        X, y = make_classification(3000, 20, n_informative=10, flip_y=0.05, random_state=3)
        y = np.where(y > 0, 1.0, -1.0)
        kernel = Kernel("rbf", gamma=0.05)
    solutions = [_solve(X, y, kernel, t) for t in (1, 2, 3)]
    first = solutions[0]
    assert first.n_iter > 5 and first.kkt_violation[0] <= 1e-3
    # the row cache (174 rows of 2 MB) starts at two working sets (128 rows): a8a's rows
    # come back soon and it grows, the generated set's do not (muflow.solvers.rowcache)
    assert first.timings["cache_slots"] == (174 if data == "a8a" else 128)
    for other in solutions[1:]:
        assert np.array_equal(other.alpha, first.alpha)
        assert other.n_iter == first.n_iter
        assert other.timings["cache_slots"] == first.timings["cache_slots"]


def test_a_pass_is_cut_into_no_more_pieces_than_its_work_fills():
    """Each piece of a split pass is a hand-off to a thread of the pool: a pass is split
    from :data:`_SPLIT_MIN_WORK` on, into pieces of at least half of it, so that sixteen
    threads are woken only for a pass that fills them; two threads split as before."""
    from muflow.solvers._working_set_compiled import _SPLIT_MIN_WORK, Threads

    half = _SPLIT_MIN_WORK // 2
    sixteen = Threads(16)
    assert sixteen.n_threads == 16
    assert sixteen.parts(_SPLIT_MIN_WORK - 1, 1) == 1
    assert sixteen.parts(_SPLIT_MIN_WORK, 1) == 2
    assert sixteen.parts(512, 512) == 2  # K_BB gathered for q = 512
    assert sixteen.parts(5 * half + 1, 1) == 5
    assert sixteen.parts(100 * half, 1) == 16
    assert [Threads(2).parts(w, 1) for w in (_SPLIT_MIN_WORK - 1, _SPLIT_MIN_WORK, 10**9)] == [1, 2, 2]
