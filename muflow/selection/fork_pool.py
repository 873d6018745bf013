"""Chains of solves shared out to forked processes (the sweep's thread budget), and how many.

The chains of one Gram are independent; :func:`muflow.forking.forked_map` runs them in
forked processes, which share the in-memory K without a copy, each on its share of the
budget (:func:`muflow.threads.divide_budget`).
"""

from __future__ import annotations

import numpy as np

from muflow.forking import forked_map
from muflow.threads import divide_budget, makespan, pool_size


def forked_chains(state, tasks, budget):
    """``state.run(local, c_indices)`` (a :class:`muflow.selection.continuation.ChainState`)
    for the tasks ``(local columns, C indices)`` in forked processes sharing ``budget``
    threads (P = min(tasks, budget) processes of budget // P threads, more processes than
    threads only to end equal tasks together, :func:`pool_size`), in the order given (each
    process takes the next task when it is free).

    The tasks are independent (a column's warm start comes from the same column at the
    previous C, inside one task), and the subset solvers hold the GIL, so processes rather
    than threads; fork shares the in-memory K with the children without a copy.
    """
    from muflow.operators import DenseGram, operand_dtype
    from muflow.solvers import DualProblem

    # load (or compile) the solver's loops here once, not in every child: for K's dtype,
    # which selects the compiled version (each child would otherwise load or compile its own)
    warm_up = DenseGram(np.eye(2, dtype=operand_dtype(state.operator)))
    state.info.solve(DualProblem(warm_up, [1.0, -1.0], 1.0, equality=state.equality),
                     tol=state.tol, max_iter=5, **state.options)
    share = divide_budget(len(tasks), budget)
    return forked_map(lambda k: state.run(*tasks[k]), len(tasks), share.processes,
                      threads=share.threads)


__all__ = ["forked_chains", "makespan", "pool_size"]
