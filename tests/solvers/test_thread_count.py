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


class _RowsBeingWritten:
    """Rows written on other threads for the first ``blocks`` checks (a stand-in for a
    :class:`muflow.solvers.rowcache.RowCache` write, whose threads this test does not need)."""

    def __init__(self, blocks):
        self.blocks = blocks

    def running(self):
        self.blocks -= 1
        return self.blocks >= 0


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_older_rows_sum_is_the_same_wherever_the_rows_being_written_cut_it(threads, monkeypatch):
    """The moved rows cached before the step are summed on this thread a block of targets at
    a time while B's new rows are written, and the targets left on every thread once they
    are written (:func:`add_older_rows`); then the caller sums the new rows. G is the two
    sums' to the bit wherever the cut falls, and the rows are settled once."""
    from muflow.solvers._working_set_compiled import Threads, add_older_rows, add_rows

    monkeypatch.setattr(_working_set_compiled, "_SPLIT_MIN_WORK", 1)
    monkeypatch.setattr(_working_set_compiled, "BLOCK", 96)
    rng = np.random.default_rng(0)
    n, rows = 1000, 13
    data = rng.random((rows, n)).astype(np.float32)
    y = rng.choice([-1.0, 1.0], n)
    G0 = rng.standard_normal(n)
    slots = np.arange(rows)[::-1].copy()
    coef = rng.standard_normal(rows)
    fresh = np.arange(rows) % 3 == 0
    expected = G0.copy()
    add_rows(expected, y, data, slots[~fresh], coef[~fresh], 0, n)
    add_rows(expected, y, data, slots[fresh], coef[fresh], 0, n)
    for blocks in (0, 1, 4, 11, 50):
        G, settled = G0.copy(), []
        left, left_coef, seconds = add_older_rows(Threads(threads), G, y, data, slots, coef, fresh,
                                                  _RowsBeingWritten(blocks), lambda: settled.append(1))
        assert settled == [1] and seconds >= 0
        assert np.array_equal(left, slots[fresh]) and np.array_equal(left_coef, coef[fresh])
        add_rows(G, y, data, left, left_coef, 0, n)
        assert np.array_equal(G, expected), blocks
    # moved rows all new, all older, or not known: nothing summed here, the rows settled
    for mask in (np.ones(rows, bool), np.zeros(rows, bool), None):
        G, settled = G0.copy(), []
        left, left_coef, _ = add_older_rows(Threads(threads), G, y, data, slots, coef, mask,
                                            _RowsBeingWritten(5), lambda: settled.append(1))
        assert settled == [1] and np.array_equal(G, G0) and left is slots and left_coef is coef
