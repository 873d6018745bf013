"""Measure the distributed working-set solver's outer iteration, for docs/scaling.md.

For each n in ``--sizes`` and each worker count in ``--workers``: one fit of
``make_classification(n, 50 features, 20 informative, flip_y=0.05, random_state=0)``, RBF
gamma=0.02, C=1, through :func:`muflow.dask_working_set.solve_working_set_dask` on a
LocalCluster of single-threaded worker processes. Printed per run, as one JSON line: outer
iterations, wall time, the client's seconds (subproblems, selection, waiting), each
worker's rows computed and seconds (rows, gradient, candidates), bytes sent and received.

Usage::

    python benchmarks/bench_scaling.py --sizes 20000,50000,100000 --workers 2,4
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def run(n, workers):
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification

    from muflow.dask_partitions import DaskRowPartitions
    from muflow.dask_working_set import solve_working_set_dask
    from muflow.kernels import Kernel
    from muflow.solvers import DualProblem

    X, y = make_classification(n_samples=n, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=0)
    y = np.where(y > 0, 1.0, -1.0)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="6GiB") as cluster, Client(cluster) as client:
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.02), client)
        t = time.perf_counter()
        sol = solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True))
        wall = time.perf_counter() - t
        info = parts.call("info")
        parts.close()
    tm = sol.timings
    return {"n": n, "workers": workers, "d": X.shape[1], "q": tm["q"], "iterations": int(sol.n_iter),
            "round_trips": tm["round_trips"], "wall": wall, "subproblem": tm["subproblem"],
            "select": tm["select"], "calls": tm["calls"], "kkt": tm["kkt"],
            "bytes_sent": tm["bytes_sent"], "bytes_received": tm["bytes_received"],
            "worker_rows": [w["rows_computed"] for w in info],
            "worker_seconds": [w["seconds"] for w in info], "objective": float(sol.objective[0])}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="20000,50000,100000")
    p.add_argument("--workers", default="2,4")
    args = p.parse_args()
    for w in [int(v) for v in args.workers.split(",")]:
        for n in [int(v) for v in args.sizes.split(",")]:
            print(json.dumps(run(n, w)), flush=True)


if __name__ == "__main__":
    main()
