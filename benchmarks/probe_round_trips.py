"""Where a Dask working-set iteration's time goes beyond the workers' own work.

    python benchmarks/probe_round_trips.py --workers 2 --n 60000

One fit of the distributed working-set solver (60,000 x 50 generated rows, rbf gamma 0.02,
C = 1, as ``bench_scaling.py --cases dask``) on a LocalCluster of single-threaded worker
processes. Each worker records the wall and thread-CPU seconds of every
``PartitionColumn.solve_and_step`` call (the method is wrapped in the worker processes,
through ``client.run``); the client records every round trip. Printed per fit:

- the wall time, the round trips' sum and the sum over calls of the slowest worker's time;
- each worker's wall and CPU seconds in the calls (CPU below wall: the worker waited for a
  core);
- the gap per call, the round trip less its slowest worker (serialisation, transfer, the
  event loops' hand-offs), and the imbalance per call, the slowest worker less the fastest;
- the time outside the calls (the client's selection of the next working set).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _record_calls() -> None:
    """In a worker process: wrap solve_and_step to record (wall, thread CPU) per call."""
    import builtins

    from muflow.dask.working_set import PartitionColumn

    builtins._muflow_calls = []
    solve_and_step = PartitionColumn.solve_and_step

    def recorded(self, *args, **kwargs):
        t, c = time.perf_counter(), time.thread_time()
        out = solve_and_step(self, *args, **kwargs)
        builtins._muflow_calls.append((time.perf_counter() - t, time.thread_time() - c))
        return out

    PartitionColumn.solve_and_step = recorded


def _calls() -> list:
    import builtins

    return builtins._muflow_calls


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
    trips = []
    solve_on = ws.PartitionedState.solve_on

    def timed(self, *args, **kwargs):
        t = time.perf_counter()
        out = solve_on(self, *args, **kwargs)
        trips.append(time.perf_counter() - t)
        return out

    ws.PartitionedState.solve_on = timed
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="6GiB") as cluster, Client(cluster) as client:
        client.run(_record_calls)
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.02), client)
        t = time.perf_counter()
        ws.solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True))
        wall = time.perf_counter() - t
        calls = list(client.run(_calls).values())
        parts.close()
    ws.PartitionedState.solve_on = solve_on
    k = min(len(trips), *(len(c) for c in calls))
    trip = np.array(trips[:k])
    worker_wall = np.array([[c[i][0] for i in range(k)] for c in calls])
    worker_cpu = np.array([[c[i][1] for i in range(k)] for c in calls])
    slowest = worker_wall.max(axis=0)
    gap, imbalance = trip - slowest, slowest - worker_wall.min(axis=0)
    return {"workers": workers, "n": n, "wall": wall, "calls": k, "trips": trip.sum(),
            "slowest_workers": slowest.sum(), "worker_wall": worker_wall.sum(axis=1),
            "worker_cpu": worker_cpu.sum(axis=1), "gap_median_ms": 1e3 * np.median(gap),
            "gap_mean_ms": 1e3 * gap.mean(), "imbalance_mean_ms": 1e3 * imbalance.mean(),
            "outside": wall - trip.sum()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="comma list of worker counts (default: 1,2)")
    p.add_argument("--n", type=int, default=60000, help="training rows (default: 60000)")
    args = p.parse_args(argv)
    for w in [int(v) for v in args.workers.split(",")]:
        r = probe(w, args.n)
        print(f"{r['workers']} worker(s), n={r['n']}: wall {r['wall']:.2f} s, {r['calls']} calls, "
              f"round trips {r['trips']:.2f} s, slowest worker's calls {r['slowest_workers']:.2f} s")
        print(f"  workers in their calls: wall {np.round(r['worker_wall'], 2).tolist()} s, "
              f"CPU {np.round(r['worker_cpu'], 2).tolist()} s")
        print(f"  per call: gap {r['gap_median_ms']:.1f} ms median, {r['gap_mean_ms']:.1f} ms mean; "
              f"imbalance {r['imbalance_mean_ms']:.1f} ms mean; outside the calls {r['outside']:.2f} s",
              flush=True)


if __name__ == "__main__":
    main()
