"""How much memory bandwidth a second core adds on this machine: the ceiling of every
memory-bound pass's speed-up (the working-set loop's gradient update reads each moved row
of K once; a row cache's writes stream too). And how much a second core adds to the
computation of kernel rows, the largest phase of a fit, when each core computes its own
(:func:`rows_scaling`: the ceiling of that phase's speed-up, where cores that share a
cache, a memory bus or a clock budget slow one another).

:func:`memory_scaling` runs the gradient update's own pass
(:func:`muflow.solvers._working_set_compiled.add_rows`, 256 float32 rows of 100,000 columns,
each read once a pass) in one process pinned to one CPU, then in one process per CPU at
once, and returns the GB/s of rows each read. Where one process alone nearly fills the
memory bus, two processes each get about half of it, and a pass that only streams memory
cannot run faster on two cores than on one, however its work is shared out
(docs/benchmarks.md, "Threads and workers"). A NumPy sum is no measure of that ceiling:
on one core it can read well below what the pass reads (docs/benchmarks.md, session 35).
"""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

#: The streamed rows: far larger than any cache (256 float32 rows of 100,000, 102 MB).
STREAM_ROWS, STREAM_COLUMNS = 256, 100_000
#: Passes over them per measurement: 3 GB read, long enough that starting the processes
#: does not count.
PASSES = 30


def _stream(cpu, start, answer) -> None:
    """Pinned to ``cpu``: wait for ``start``, then time :data:`PASSES` gradient updates
    (muflow's compiled pass, every row read once); GB/s of rows to ``answer``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [cpu])
    from muflow.solvers._working_set_compiled import add_rows

    rng = np.random.default_rng(cpu)
    data = rng.random((STREAM_ROWS, STREAM_COLUMNS), dtype=np.float32)
    G, y = np.zeros(STREAM_COLUMNS), np.ones(STREAM_COLUMNS)
    slots, coef = np.arange(STREAM_ROWS, dtype=np.int64), rng.standard_normal(STREAM_ROWS)
    add_rows(G, y, data, slots, coef, 0, STREAM_COLUMNS)  # compiled, the pages touched
    start.wait()
    t = time.perf_counter()
    for _ in range(PASSES):
        add_rows(G, y, data, slots, coef, 0, STREAM_COLUMNS)
    answer.send(PASSES * data.nbytes / (time.perf_counter() - t) / 1e9)


#: The rows timed per process: a working set's new rows (512) of rbf against 30,000 x 50
#: columns (the Dask case's partition on 2 workers), float32 as a fit computes them.
ROWS, COLUMNS, FEATURES, ROW_CALLS = 512, 30_000, 50, 20


def _rows(cpu, start, answer) -> None:
    """Pinned to ``cpu``, BLAS on one thread: wait for ``start``, then time
    :data:`ROW_CALLS` batches of kernel rows (muflow's own code); million entries a second
    to ``answer``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [cpu])
    from threadpoolctl import threadpool_limits

    from muflow.kernel_rows import KernelRows
    from muflow.kernels import Kernel

    rng = np.random.default_rng(cpu)
    rows = KernelRows(rng.standard_normal((COLUMNS, FEATURES)), Kernel("rbf", gamma=0.02),
                      dtype="float32", n_threads=1)
    data = np.empty((ROWS, COLUMNS), dtype=np.float32)
    idx, slots = rng.choice(COLUMNS, ROWS, replace=False), np.arange(ROWS)
    with threadpool_limits(1):
        rows.rows_into(idx, data, slots)  # compiled, and the pages touched
        start.wait()
        t = time.perf_counter()
        for _ in range(ROW_CALLS):
            rows.rows_into(idx, data, slots)
        answer.send(ROW_CALLS * ROWS * COLUMNS / (time.perf_counter() - t) / 1e6)


def _together(cpus, target=_stream) -> list[float]:
    """The rates of one process per CPU in ``cpus`` running ``target``, all started at once
    (GB/s streamed by default)."""
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    start = ctx.Barrier(len(cpus))
    pipes, procs = [], []
    for cpu in cpus:
        here, there = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(cpu, start, there), daemon=True)
        proc.start()
        pipes.append(here)
        procs.append(proc)
    rates = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    return rates


def _scaling(cpus, target, unit: str, digits: int | None) -> dict:
    """``{"one_process_<unit>", "each_of_all_<unit>", "all_<unit>", "cpus"}``: the rate of
    ``target`` in one process alone, in each of one process per CPU in ``cpus`` at once,
    and the sum of those, rounded to ``digits`` (at least two CPUs; None where fewer)."""
    cpus = list(cpus)
    keys = (f"one_process_{unit}", f"each_of_all_{unit}", f"all_{unit}")
    if len(cpus) < 2:
        return {**dict.fromkeys(keys), "cpus": len(cpus)}
    alone = _together(cpus[:1], target)[0]
    each = _together(cpus, target)
    values = (alone, float(np.mean(each)), float(np.sum(each)))
    return {**{key: round(v, digits) for key, v in zip(keys, values)}, "cpus": len(cpus)}


def memory_scaling(cpus) -> dict:
    """``{"one_process_gb_s", "each_of_all_gb_s", "all_gb_s", "cpus"}``: the GB/s at which
    the gradient update's pass reads rows (:func:`_scaling`)."""
    return _scaling(cpus, _stream, "gb_s", 1)


def rows_scaling(cpus) -> dict:
    """``{"one_process_m_s", "each_of_all_m_s", "all_m_s", "cpus"}``: million kernel-row
    entries a second (:func:`_scaling`). Each process computes the same amount, so ``all /
    one`` is what the cores together add to the rows of a fit whose columns they share."""
    return _scaling(cpus, _rows, "m_s", None)
