"""Successive halving over the C values of one kernel setting (``halving=eta``, off by default).

The batched path (:mod:`muflow.selection.batched`) then solves in rungs of
``halving_min_iter * eta**r`` iterations (r = 0, 1, ...), each warm-started from the
previous rung. After each rung, the configurations (C values) still running are ranked by
their current mean validation accuracy; the best ``ceil(k / eta)`` of the k go on, the
others stop there and are reported with the accuracy of that rung (``stopped_early`` in the
table). Ties keep the smaller C. The last configuration standing runs to convergence (or
``max_iter`` iterations in all).
"""

from __future__ import annotations

import math


def first_budget(max_iter: int, halving, halving_min_iter: int) -> int:
    """Iterations of the first solve: all of ``max_iter`` without halving, the first rung
    (``halving_min_iter``) with it."""
    return max_iter if halving is None else min(max_iter, halving_min_iter)


def survivors(accuracy, eta: int) -> list[int]:
    """Positions (into the running configurations, ascending C) of those that go on: the
    ``ceil(k / eta)`` best by mean validation accuracy, ties to the smaller C; in the
    order given."""
    keep_n = math.ceil(len(accuracy) / eta)
    order = sorted(range(len(accuracy)), key=lambda k: (-accuracy[k], k))
    return sorted(order[:keep_n])


def next_budget(budget: int, *, spent: int, max_iter: int, running: int, eta: int) -> int:
    """Iterations of the next rung: ``eta`` times the last, within what is left of
    ``max_iter``; everything left once one configuration is running."""
    left = max_iter - spent
    return left if running == 1 else min(left, budget * eta)
