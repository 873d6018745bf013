"""Independent solves shared out to forked processes: the sweep's chains
(:mod:`muflow.selection.fork_pool`) and the sub-problems of one fit, one-vs-one pairs on
rows over their own samples (:func:`muflow.subproblems.solve_on_own_samples`).

The solvers hold the GIL, so processes rather than threads; fork shares what this process
holds (X, an in-memory K) with the children copy-on-write. What a child runs is set in a
module global just before the fork (:data:`_FORK_STATE`), so that it is inherited, not
pickled: only a task's index goes to a child and only its result comes back.
"""

from __future__ import annotations

import os
import sys

# the division of cores among children is the thread budget's (one rule, one place)
from muflow.threads import blas_single_threaded, makespan, pool_size  # noqa: F401

_PR_SET_PDEATHSIG = 1

#: How long a broken pool's children are given to show their exit codes (seconds).
_EXIT_CODE_WAIT_S = 2.0

#: What forked workers run: set just before the fork, so that it is inherited.
_FORK_STATE = None

#: True in a process that :func:`forked_map` forked: it forks no further.
_IN_CHILD = False


def in_forked_child() -> bool:
    """Whether this process is one of :func:`forked_map`'s children."""
    return _IN_CHILD


def _child_starts(parent: int) -> None:
    """In each forked child, first: die with the parent, however it dies (a SIGKILL
    included: Linux's ``PR_SET_PDEATHSIG``), and leave Ctrl-C to it. A Ctrl-C to the
    process group reaches every child too; the parent hears it and stops them
    (:func:`forked_map`), where each child's own KeyboardInterrupt printed a traceback."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the command's handler (muflow.cli)
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the line above: nothing to do here
        os._exit(1)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when the one that forked it dies (Linux's
    ``prctl(PR_SET_PDEATHSIG)``; a no-op elsewhere): a child must not outlive a command
    killed by a batch scheduler or a container stop."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _stop_children(pool) -> None:
    """SIGKILL the pool's processes and reap them: an interrupted parent does not wait for
    the running tasks (their results would be thrown away) and leaves no process behind."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        try:
            process.kill()
        except (OSError, ValueError):
            pass
    for process in processes:
        try:
            process.join(timeout=5)
        except (OSError, ValueError, AssertionError):
            pass


def _killed_child(exc: BaseException, children: dict):
    """The error to raise when a child died of SIGKILL under a running task (the pool says
    only "terminated abruptly"): that is the kernel's out-of-memory killer, most likely."""
    from concurrent.futures.process import BrokenProcessPool

    if not isinstance(exc, BrokenProcessPool):
        return None
    import signal
    import time

    from muflow.exceptions import MuflowError

    # The pool's manager thread reaps the dead child and sets its exit code concurrently
    # with this thread being told the pool broke: until it has, ``exitcode`` reads None.
    deadline = time.monotonic() + _EXIT_CODE_WAIT_S
    while True:
        codes = {pid: process.exitcode for pid, process in children.items()}
        for pid, code in codes.items():
            if code == -signal.SIGKILL:
                return MuflowError(
                    f"a forked child (pid {pid}) was killed by signal 9, likely out of memory "
                    "(the kernel's OOM killer): lower cache_size or n_jobs")
        if None not in codes.values() or time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def _task_in_child(k):
    from muflow.threads import cap_threads

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
    global _FORK_STATE
    _FORK_STATE = (run, threads)
    try:
        # BLAS on one thread while the children are forked: they inherit the count, so that
        # their own hold (_task_in_child) has nothing to set; set there, OpenBLAS starts
        # its threads in the child, and they spin on the cores of the child's siblings
        with blas_single_threaded():
            return _map_in_children(n_tasks, processes)
    finally:
        _FORK_STATE = None


def _map_in_children(n_tasks: int, processes: int) -> list:
    """:func:`forked_map`'s pool: the tasks of :data:`_FORK_STATE` in ``processes`` forked
    children; on any failure the others are stopped and a child the kernel killed is named."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(processes, mp_context=ctx, initializer=_child_starts,
                               initargs=(os.getpid(),))
    children = {}
    try:
        futures = [pool.submit(_task_in_child, k) for k in range(n_tasks)]
        children = dict(getattr(pool, "_processes", None) or {})  # forked at the submits
        return [f.result() for f in futures]
    except BaseException as exc:  # Ctrl-C, SIGTERM (muflow.cli), a failed task: stop the others
        killed = _killed_child(exc, children)  # before the others are killed below
        _stop_children(pool)
        if killed is not None:
            raise killed from exc
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["die_with_parent", "forked_map", "in_forked_child", "makespan", "pool_size"]
