"""How much memory bandwidth a second core adds on this machine: the ceiling of every
memory-bound pass's speed-up (the working-set loop's gradient update reads each moved row
of K once; a row cache's writes stream too).

:func:`memory_scaling` streams a 160 MB float64 array (a sum, read once per pass) in one
process pinned to one CPU, then in one process per CPU at once, and returns the GB/s each
reached. Where one process alone nearly fills the memory bus, two processes each get about
half of it, and a pass that only streams memory cannot run faster on two cores than on one,
however its work is shared out (docs/benchmarks.md, "Threads and workers").
"""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

#: The streamed array: far larger than any cache (8 bytes x 20 million).
STREAM_VALUES = 20_000_000
#: Passes over it per measurement: 3.2 GB read, long enough that starting the processes
#: does not count.
PASSES = 20


def _stream(cpu, start, answer) -> None:
    """Pinned to ``cpu``: wait for ``start``, then time :data:`PASSES` sums; GB/s to ``answer``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [cpu])
    values = np.ones(STREAM_VALUES)
    values.sum()  # the pages are touched before the clock starts
    start.wait()
    t = time.perf_counter()
    for _ in range(PASSES):
        values.sum()
    answer.send(PASSES * values.nbytes / (time.perf_counter() - t) / 1e9)


def _together(cpus) -> list[float]:
    """GB/s of one streaming process per CPU in ``cpus``, all started at once."""
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                      else "spawn")
    start = ctx.Barrier(len(cpus))
    pipes, procs = [], []
    for cpu in cpus:
        here, there = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_stream, args=(cpu, start, there), daemon=True)
        proc.start()
        pipes.append(here)
        procs.append(proc)
    rates = [pipe.recv() for pipe in pipes]
    for proc in procs:
        proc.join()
    return rates


def memory_scaling(cpus) -> dict:
    """``{"one_process_gb_s", "each_of_all_gb_s", "all_gb_s", "cpus"}``: the streaming rate
    of one process alone, of each of one process per CPU in ``cpus`` at once, and their sum
    (at least two CPUs; None where fewer)."""
    cpus = list(cpus)
    if len(cpus) < 2:
        return {"one_process_gb_s": None, "each_of_all_gb_s": None, "all_gb_s": None,
                "cpus": len(cpus)}
    alone = _together(cpus[:1])[0]
    each = _together(cpus)
    return {"one_process_gb_s": round(alone, 1), "each_of_all_gb_s": round(float(np.mean(each)), 1),
            "all_gb_s": round(float(np.sum(each)), 1), "cpus": len(cpus)}
