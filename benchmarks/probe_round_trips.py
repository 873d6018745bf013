"""Where a Dask working-set iteration's time goes beyond the workers' own work.

    python benchmarks/probe_round_trips.py --workers 1,2 --n 60000
    python benchmarks/probe_round_trips.py --workers 1,2 --transport actors

One fit of the distributed working-set solver (60,000 x 50 generated rows, rbf gamma 0.02,
C = 1, as ``bench_scaling.py --cases dask``) on a LocalCluster of single-threaded worker
processes. Each worker records the wall and thread-CPU seconds of its two calls of every
iteration, ``PartitionColumn.solve`` (the solver's) or ``compute_rows`` (the others'), then
``iterate`` with the step (the methods are wrapped in the worker processes, through
``client.run``); the client records every iteration's calls. Printed per fit:

- the wall time, the round trips' sum and the sum over calls of the slowest worker's time;
- each worker's wall and CPU seconds in the calls (CPU below wall: the worker waited for a
  core);
- the gap per call, the round trip less its slowest worker (serialisation, transfer, the
  event loops' hand-offs), and the imbalance per call, the slowest worker less the fastest;
- the time outside the calls (the client's selection of the next working set);
- the first worker's (the solver's) median times along its ``solve`` call: the client's
  preparation (to its send),
  the send to the method's start (on actor calls split at the worker's ``actor_execute``
  handler: the client's serialisation, the transfer, the worker's reading, then the hand-off
  to the actor's thread), and the method's end to the answer read on the client.

``--transport`` (default ``channels``) sends the calls on muflow's channels
(:mod:`muflow.dask.channels`) or as ``distributed``'s actor calls.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


#: The calls of an iteration whose time a worker records: the first of each pair
FIRST_CALLS = ("solve", "compute_rows")
#: the second of each pair: the solver's step, the others' step
SECOND_CALLS = ("step_solved", "iterate")
#: the call of a lone partition, both at once
SOLVER_CALLS = ("solve", "solve_and_step")


def _record_calls() -> None:
    """In a worker process: wrap an iteration's calls to record, per iteration, (wall and
    thread CPU of both calls, the first's start, the first's wall)."""
    import builtins

    from muflow.dask.working_set import PartitionColumn

    builtins._muflow_calls = []
    first, depth = [], []

    def wrap(name):
        method = getattr(PartitionColumn, name)

        def recorded(self, *args, **kwargs):
            if depth:  # called by another recorded call (solve_and_step's solve, ...)
                return method(self, *args, **kwargs)
            t, c = time.perf_counter(), time.thread_time()
            depth.append(name)
            try:
                out = method(self, *args, **kwargs)
            finally:
                depth.pop()
            wall, cpu = time.perf_counter() - t, time.thread_time() - c
            if name in FIRST_CALLS:
                first[:] = [(wall, cpu, t)]
            elif name == "solve_and_step":
                builtins._muflow_calls.append((wall, cpu, t, wall))
            elif first and (name == "step_solved" or len(args[2])):  # the step that follows
                w, cp, start = first.pop()
                builtins._muflow_calls.append((w + wall, cp + cpu, start, w))
            return out

        setattr(PartitionColumn, name, recorded)

    for name in FIRST_CALLS + SECOND_CALLS + ("solve_and_step",):
        wrap(name)


def _record_arrivals(dask_worker) -> None:
    """In a worker process: record when each solve message reaches the handler."""
    import builtins

    builtins._muflow_arrivals = []
    handler = dask_worker.handlers["actor_execute"]

    async def recorded(*args, **kwargs):
        if kwargs.get("function") in SOLVER_CALLS:
            builtins._muflow_arrivals.append(time.perf_counter())
        return await handler(*args, **kwargs)

    dask_worker.handlers["actor_execute"] = recorded


def _calls() -> list:
    """Each call's (wall, CPU, start) and its arrival at the actor handler (NaN on a
    channel, whose calls no handler of distributed's sees)."""
    import builtins

    arrivals = builtins._muflow_arrivals
    return [(c, arrivals[i] if i < len(arrivals) else float("nan"))
            for i, c in enumerate(builtins._muflow_calls)]


def probe(workers: int, n: int) -> dict:
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification

    from muflow.dask import working_set as ws
    from muflow.dask.partitions import DaskRowPartitions
    from muflow.kernels import Kernel
    from muflow.solvers import DualProblem

    X, y = make_classification(n_samples=n, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=0)
    y = np.where(y > 0, 1.0, -1.0)
    import distributed.core

    trips, sends = [], []
    solve_on, send_recv = ws.PartitionedState.solve_on, distributed.core.send_recv

    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        out = solve_on(self, *args, **kwargs)
        trips.append((t, time.perf_counter() - t))
        return out

    async def sent(comm, **kwargs):  # the client's send and answer, per call and worker
        mark = [time.perf_counter(), np.nan]
        if kwargs.get("function") in SOLVER_CALLS:
            sends.append(mark)  # the solver's call, one an iteration
        out = await send_recv(comm, **kwargs)
        mark[1] = time.perf_counter()
        return out

    from muflow.dask import channels

    channel_send, channel_receive = channels.Channel.send, channels.Channel.receive

    marks = {}  # (channel, request number): [sent, answered]

    def sent_on_channel(self, method, args):  # the same marks for calls on a channel
        mark = [time.perf_counter(), np.nan]
        if method in SOLVER_CALLS:
            sends.append(mark)
        number = channel_send(self, method, args)
        marks[id(self), number] = mark
        return number

    def answered_on_channel(self, number):
        out = channel_receive(self, number)
        marks.pop((id(self), number))[1] = time.perf_counter()
        return out

    channels.Channel.send, channels.Channel.receive = sent_on_channel, answered_on_channel
    ws.PartitionedState.solve_on, distributed.core.send_recv = timed, sent
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="6GiB") as cluster, Client(cluster) as client:
        client.run(_record_calls)
        client.run(_record_arrivals)
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.02), client)
        t = time.perf_counter()
        ws.solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True))
        wall = time.perf_counter() - t
        calls = list(client.run(_calls).values())
        parts.close()
    ws.PartitionedState.solve_on, distributed.core.send_recv = solve_on, send_recv
    channels.Channel.send, channels.Channel.receive = channel_send, channel_receive
    k = min(len(trips), *(len(c) for c in calls))
    start = np.array([t for t, _ in trips[:k]])
    trip = np.array([d for _, d in trips[:k]])
    worker_wall = np.array([[c[i][0][0] for i in range(k)] for c in calls])
    worker_cpu = np.array([[c[i][0][1] for i in range(k)] for c in calls])
    # along one call to the first worker (perf_counter is the machine's monotonic clock)
    first = calls[0][:k]
    began, arrived = np.array([c[0][2] for c in first]), np.array([c[1] for c in first])
    ended = began + np.array([c[0][3] for c in first])  # the end of the solve
    send = np.array(sends[:k])
    slowest = worker_wall.max(axis=0)
    gap, imbalance = trip - slowest, slowest - worker_wall.min(axis=0)
    return {"workers": workers, "n": n, "wall": wall, "calls": k, "trips": trip.sum(),
            "slowest_workers": slowest.sum(), "worker_wall": worker_wall.sum(axis=1),
            "worker_cpu": worker_cpu.sum(axis=1), "gap_median_ms": 1e3 * np.median(gap),
            "gap_mean_ms": 1e3 * gap.mean(), "imbalance_mean_ms": 1e3 * imbalance.mean(),
            "outside": wall - trip.sum(),
            "steps_ms": {"prepare": 1e3 * np.median(send[:, 0] - start),
                         "send_to_handler": 1e3 * np.median(arrived - send[:, 0]),
                         "handler_to_method": 1e3 * np.median(began - arrived),
                         "send_to_method": 1e3 * np.median(began - send[:, 0]),
                         "method_end_to_answer": 1e3 * np.median(send[:, 1] - ended)}}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="comma list of worker counts (default: 1,2)")
    p.add_argument("--n", type=int, default=60000, help="training rows (default: 60000)")
    p.add_argument("--transport", choices=("channels", "actors"), default="channels",
                   help="the partitions' calls on muflow's channels (default) or as distributed's "
                        "actor calls (MUFLOW_DASK_CHANNELS=0)")
    args = p.parse_args(argv)
    import os

    from muflow.dask.channels import ENV_VAR

    os.environ[ENV_VAR] = "1" if args.transport == "channels" else "0"
    for w in [int(v) for v in args.workers.split(",")]:
        r = probe(w, args.n)
        print(f"{r['workers']} worker(s), {args.transport}, n={r['n']}: wall {r['wall']:.2f} s, {r['calls']} calls, "
              f"round trips {r['trips']:.2f} s, slowest worker's calls {r['slowest_workers']:.2f} s")
        print(f"  workers in their calls: wall {np.round(r['worker_wall'], 2).tolist()} s, "
              f"CPU {np.round(r['worker_cpu'], 2).tolist()} s")
        print(f"  per call: gap {r['gap_median_ms']:.1f} ms median, {r['gap_mean_ms']:.1f} ms mean; "
              f"imbalance {r['imbalance_mean_ms']:.1f} ms mean; outside the calls {r['outside']:.2f} s")
        print("  along a call to the first worker (medians): "
              + ", ".join(f"{k} {v:.2f} ms" for k, v in r["steps_ms"].items() if np.isfinite(v)),
              flush=True)


if __name__ == "__main__":
    main()
