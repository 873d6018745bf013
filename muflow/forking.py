"""Independent solves shared out to forked processes: the sweep's chains
(:mod:`muflow.selection.fork_pool`) and the sub-problems of one fit, one-vs-one pairs on
rows over their own samples (:func:`muflow.subproblems.solve_on_own_samples`).

The solvers hold the GIL, so processes rather than threads; fork shares what this process
holds (X, an in-memory K) with the children copy-on-write. What a child runs is set in a
module global just before the fork (:data:`_FORK_STATE`), so that it is inherited, not
pickled: only a task's index goes to a child and only its result comes back.
"""

from __future__ import annotations

# the division of cores among children is the thread budget's (one rule, one place)
from muflow.threads import makespan, pool_size  # noqa: F401

#: What forked workers run: set just before the fork, so that it is inherited.
_FORK_STATE = None

#: True in a process that :func:`forked_map` forked: it forks no further.
_IN_CHILD = False


def in_forked_child() -> bool:
    """Whether this process is one of :func:`forked_map`'s children."""
    return _IN_CHILD


def _task_in_child(k):
    from muflow.threads import blas_single_threaded, cap_threads

    global _IN_CHILD
    run, threads = _FORK_STATE
    _IN_CHILD = True
    if threads is not None:
        cap_threads(threads)
    # a task's products are BLAS calls whose idle threads would spin on the cores the
    # other tasks need: one BLAS thread per task
    with blas_single_threaded():
        return run(k)


def forked_map(run, n_tasks: int, processes: int, *, threads: int | None = None) -> list:
    """``[run(0), ..., run(n_tasks - 1)]``, computed in ``processes`` forked processes, each
    taking the next task in order when it is free.

    Parameters
    ----------
    run : callable
        ``run(k)`` for task k; inherited by the children (a closure will do), its result
        pickled back.
    n_tasks, processes : int
    threads : int, optional
        The threads a child's own panels and gradient updates use: its share of this
        process's budget (:func:`muflow.threads.divide_budget`), which caps the child's
        :func:`muflow.threads.thread_budget`; default the CPUs it may use.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    global _FORK_STATE
    _FORK_STATE = (run, threads)
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(processes, mp_context=ctx) as pool:
            futures = [pool.submit(_task_in_child, k) for k in range(n_tasks)]
            return [f.result() for f in futures]
    finally:
        _FORK_STATE = None


__all__ = ["forked_map", "in_forked_child", "makespan", "pool_size"]
