"""Chains of solves shared out to forked processes (the sweep's ``n_jobs``), and how many.

The chains of one Gram are independent and the subset solvers hold the GIL, so processes
rather than threads; fork shares the in-memory K with the children without a copy. What a
child reads is set in a module global just before the fork (:data:`_FORK_STATE`), so that
it is inherited, not pickled.
"""

from __future__ import annotations

import numpy as np


#: What forked workers read: set just before the fork, so K is shared copy-on-write.
_FORK_STATE = None


def _chain_in_child(k):
    from muflow.inmemory import _blas_single_threaded

    state, tasks = _FORK_STATE
    local, c_indices = tasks[k]
    # the chains' products (a warm start's gradient, each certificate) are BLAS calls whose
    # idle threads would spin on the cores the other chains need: one thread per chain
    with _blas_single_threaded():
        return state.run(local, c_indices)


def forked_chains(state, tasks, n_jobs):
    """``state.run(local, c_indices)`` (a :class:`muflow.selection.continuation.ChainState`)
    for the tasks ``(local columns, C indices)`` in ``n_jobs`` forked processes, in the
    order given (each process takes the next task when it is free).

    The tasks are independent (a column's warm start comes from the same column at the
    previous C, inside one task), and the subset solvers hold the GIL, so processes rather
    than threads; fork shares the in-memory K with the children without a copy.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from muflow.operators import DenseGram, operand_dtype
    from muflow.solvers import DualProblem

    # load (or compile) the solver's loops here once, not in every child: for K's dtype,
    # which selects the compiled version (a float32 Gram compiled apart took 8 s per child)
    warm_up = DenseGram(np.eye(2, dtype=operand_dtype(state.operator)))
    state.info.solve(DualProblem(warm_up, [1.0, -1.0], 1.0, equality=state.equality),
                     tol=state.tol, max_iter=5)
    global _FORK_STATE
    _FORK_STATE = (state, tasks)
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(pool_size(len(tasks), n_jobs), mp_context=ctx) as pool:
            futures = [pool.submit(_chain_in_child, k) for k in range(len(tasks))]
            return [f.result() for f in futures]
    finally:
        _FORK_STATE = None


def makespan(tasks: int, processes: int, cores: int) -> float:
    """Wall time of ``tasks`` equal tasks (1 each) on ``processes`` processes sharing
    ``cores`` cores evenly: rounds of up to ``processes`` tasks, each round as long as its
    tasks' total work over the cores it can use."""
    full, last = divmod(tasks, processes)
    rounds = [processes] * full + ([last] if last else [])
    return sum(max(1.0, k / cores) for k in rounds)


def pool_size(tasks: int, n_jobs: int) -> int:
    """Processes for ``tasks`` chains on ``n_jobs`` cores.

    With 5 folds on 2 cores, 2 processes take 3 rounds while the work is 2.5 rounds: the
    last fold runs alone and a core idles. A few more processes than cores (the kernel
    time-shares them) end together instead: the smallest count, at most 2 * n_jobs,
    whose makespan for equal tasks is the least. On full a8a this took the 5-fold
    chains of gamma = 0.05 from 59.6 s (2 processes) to 53.0 s (3).
    """
    if tasks <= n_jobs:
        return max(1, tasks)
    candidates = range(n_jobs, min(tasks, 2 * n_jobs) + 1)
    return min(candidates, key=lambda p: (makespan(tasks, p, n_jobs), p))
