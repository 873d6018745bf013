"""Distributed against in-process, side by side on a8a (n = 22696, RBF gamma = 0.05).

Two measurements, in one run:

1. Gram build: :func:`muflow.gram.ensure_gram` on a 2-worker LocalCluster (tiles as Dask
   tasks, written to a zarr store on local disk, each off-diagonal tile computed once)
   against a single-process NumPy build of the same float32 matrix
   (:func:`muflow.gram.numpy_gram`, row panels of :meth:`Kernel.block` into one array).
   Target: cluster / NumPy <= 1.3.
2. Per-iteration time of the batched multiplicative update (``solve_multiplicative``,
   rule "munk", exact intercept) for m = 1 and m = 40 problems (one column per C value),
   on :class:`muflow.dask.store_operator.DaskGram` (panels resident on the 2 workers) against
   :class:`muflow.operators.DenseGram` in this process. An iteration is the time between
   consecutive solver callbacks (one full pass: products, objective, KKT, update); the
   median after one warm-up pass is reported. Targets: distributed / in-process <= 2 for
   m = 1, <= 1.3 for m = 40.

The in-process operator uses every core through BLAS; the cluster has one single-threaded
worker per core, so both sides use the same cores.

Run ``python benchmarks/bench_distributed_a8a.py --help`` for the options (``--rows`` for
a quick run on the first rows).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time

import numpy as np


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                  "data", "a8a"), help="a8a in svmlight format")
    p.add_argument("--rows", type=int, default=None, help="use only the first ROWS samples")
    p.add_argument("--gamma", type=float, default=0.05)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--iterations", type=int, nargs=2, default=(8, 4), metavar=("M1", "M40"),
                   help="timed passes for m=1 and m=40 (default: 8 4)")
    p.add_argument("--store-dir", default=None, help="where to put the zarr store (default: a temp dir)")
    p.add_argument("--keep-store", action="store_true")
    return p.parse_args()


def per_iteration(op, y, m, iterations):
    """Median seconds between consecutive callbacks of solve_multiplicative (munk)."""
    from muflow.solvers.multiplicative import solve_multiplicative
    from muflow.solvers.problem import DualProblem

    seconds0, products0 = op.seconds, op.products
    C = np.logspace(-1, 2, m)
    problem = DualProblem(op, np.repeat(y[:, None], m, axis=1), upper=np.broadcast_to(C, (len(y), m)), equality=True)
    stamps = []
    solve_multiplicative(problem, rule="munk", tol=0.0, max_iter=iterations + 1,
                         callback=lambda it, a, f: stamps.append(time.perf_counter()))
    gaps = np.diff(stamps)[1:]  # drop the first (warm-up) pass
    product = (op.seconds - seconds0) / max(op.products - products0, 1)
    return float(np.median(gaps)), product


def main():
    args = parse_args()
    from distributed import Client
    from sklearn.datasets import load_svmlight_file

    from muflow.dask.cluster import local_cluster
    from muflow.dask.store_operator import DaskGram
    from muflow.gram import ensure_gram, numpy_gram
    from muflow.kernels import Kernel
    from muflow.operators import DenseGram

    X, y = load_svmlight_file(args.data, n_features=123)
    if args.rows:
        X, y = X[: args.rows], y[: args.rows]
    y = np.where(y > 0, 1.0, -1.0)
    n = X.shape[0]
    kernel = Kernel("rbf", gamma=args.gamma)
    print(f"a8a: n={n}, features=123, RBF gamma={args.gamma}, K float32 = {n * n * 4 / 2**30:.2f} GiB")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")

    store_dir = args.store_dir or tempfile.mkdtemp(prefix="muflow-bench-")
    rows = []
    with local_cluster(args.workers, memory_limit="8GiB") as cluster, Client(cluster) as client:
        # warm the workers (imports) so that the build timing is the build
        client.run(lambda: __import__("muflow.gram.build") and None)

        t = time.perf_counter()
        gram, report = ensure_gram(X, kernel, client=client, store=os.path.join(store_dir, "K.zarr"))
        t_cluster = time.perf_counter() - t
        print(f"cluster build: {len(report.computed)} tiles of {gram.tile} in {t_cluster:.1f} s")

        t = time.perf_counter()
        K = numpy_gram(X, kernel, dtype="float32")
        t_numpy = time.perf_counter() - t
        print(f"numpy build: {t_numpy:.1f} s")
        rows.append(("Gram build (s)", t_numpy, t_cluster, 1.3))

        dense = DenseGram(K)
        t = time.perf_counter()
        remote = DaskGram(gram, client)
        print(f"panels loaded on the workers in {time.perf_counter() - t:.1f} s: {remote}")
        for m, iterations, target in ((1, args.iterations[0], 2.0), (40, args.iterations[1], 1.3)):
            t_local, p_local = per_iteration(dense, y, m, iterations)
            t_remote, p_remote = per_iteration(remote, y, m, iterations)
            print(f"m={m}: iteration {t_local:.3f} s in process, {t_remote:.3f} s on the cluster; "
                  f"of which K @ V (2m columns, mean) {p_local:.3f} s / {p_remote:.3f} s; "
                  f"load average {os.getloadavg()[0]:.1f}")
            rows.append((f"munk iteration, m={m} (s)", t_local, t_remote, target))
            rows.append((f"  K @ V alone, m={m} (s)", p_local, p_remote, None))
        remote.close()

    print()
    print(f"{'measure':<28}{'in-process':>12}{'cluster':>12}{'ratio':>8}{'target':>8}  ok")
    for name, local, dist, target in rows:
        ratio = dist / local
        verdict = "" if target is None else f"{target:8.1f}  {'yes' if ratio <= target else 'NO'}"
        print(f"{name:<28}{local:12.3f}{dist:12.3f}{ratio:8.2f}{verdict}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (other jobs share this machine)")
    if not args.keep_store and args.store_dir is None:
        shutil.rmtree(store_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
