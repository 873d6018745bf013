"""The working-set solver on 2 Dask worker processes against the same fit in process.

Side by side in one run, on this machine's cores (the in-process fit uses every core; the
cluster has one single-threaded worker process per core):

1. ``n`` in ``--sizes`` (default 20,000 and 50,000) samples of
   ``make_classification(n, 50 features, 20 informative, flip_y=0.05, random_state=0)``,
   RBF gamma=0.02, C=1: ``SVC(solver="working_set", gram="rows")`` in process against
   ``SVC(client=...)`` (X scattered once, :mod:`muflow.dask.working_set`), each side warmed
   up once on 5,000 rows (the workers' imports and compiled loops loaded). Printed: both
   times and their ratio (target <= 1.5), the objectives, the transfer per outer
   iteration against q d 8 bytes (target O(q d)), and, in a second distributed fit under
   ``tracemalloc``, the client's peak traced memory against the 8 n bytes of one vector
   (target O(n)).
2. 537 rows of breast cancer (the bundled copy) with a client, ``smo`` and ``m3``: the fit
   runs whole on one worker as one task (``muflow.routing.ONE_TASK_MAX_SAMPLES``) against the
   same fit in process; median of 5 after a warm-up fit (target <= 3x).
3. The same 537 rows with ``m3``, every pass a round trip to the workers (the one-task path
   switched off): on the row partitions with their kernel panels resident
   (:mod:`muflow.dask.panels`) and on the Gram store (:class:`muflow.dask.store_operator.DaskGram`,
   the panels switched off; a float32 store, where m3 stalls above tol, so it runs the
   in-process fit's passes), one fit each, side by side with the in-process fit; ratios
   to in process (target <= 3x) and per pass.

Usage::

    python benchmarks/bench_distributed.py
    python benchmarks/bench_distributed.py --sizes 20000
    python benchmarks/bench_distributed.py --cases per-pass
"""

from __future__ import annotations

import argparse
import contextlib
import time
import tracemalloc
import warnings

import numpy as np


def generated(n):
    from sklearn.datasets import make_classification

    return make_classification(n_samples=n, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=0)


def large(client, n):
    import muflow

    X, y = generated(n)
    params = dict(kernel="rbf", gamma=0.02, C=1.0)
    # both sides warmed up once on 5,000 rows (above the one-task size, so on the
    # partitions): the workers' imports and compiled loops loaded, as a long-lived
    # cluster's are, and this process's likewise
    muflow.SVC(solver="working_set", gram="rows", **params).fit(X[:5000], y[:5000])
    muflow.SVC(client=client, **params).fit(X[:5000], y[:5000])
    t = time.perf_counter()
    local = muflow.SVC(solver="working_set", gram="rows", **params).fit(X, y)
    t_local = time.perf_counter() - t
    t = time.perf_counter()
    remote = muflow.SVC(client=client, **params).fit(X, y)
    t_remote = time.perf_counter() - t
    tm = remote.timings_
    trips, q, d = tm["round_trips"], tm["q"], X.shape[1]
    tracemalloc.start()
    muflow.SVC(client=client, **params).fit(X, y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rel = abs(remote.objective_[0] - local.objective_[0]) / abs(local.objective_[0])
    print(f"n={n}: in process {t_local:.2f} s ({local.n_iter_[0]} outer iterations), on 2 workers "
          f"{t_remote:.2f} s ({remote.n_iter_[0]}; {trips} round trips): ratio {t_remote / t_local:.2f}x "
          f"(target <= 1.5x)")
    print(f"    objective {remote.objective_[0]:.6f} vs {local.objective_[0]:.6f} (relative difference "
          f"{rel:.1e}); client's seconds: the iterations' round trips (the subproblem solved on "
          f"the workers) {tm['subproblem']:.2f}, selection {tm['select']:.2f}, calls without "
          f"a step {tm['calls']:.2f}")
    iters = int(remote.n_iter_[0])
    print(f"    per outer iteration: sent {tm['bytes_sent'] / iters / 1e3:.0f} kB, received "
          f"{tm['bytes_received'] / iters / 1e3:.0f} kB, all workers; q d 8 = {q * d * 8 / 1e3:.0f} kB "
          f"(q={q}, d={d})")
    print(f"    client's peak traced memory during a distributed fit: {peak / 1e6:.1f} MB = "
          f"{peak / (8 * n):.1f} x 8n bytes (X itself: {X.nbytes / 1e6:.0f} MB, scattered once)")
    return t_remote / t_local


def small(client, repeats=5):
    import muflow
    import muflow.datasets

    X, y = muflow.datasets.load_breast_cancer()
    X, y = X[:537] / 10.0, y[:537]
    worst = 0.0
    for solver in ("smo", "m3"):
        params = dict(kernel="rbf", gamma=0.5, C=1.0, solver=solver)
        muflow.SVC(client=client, **params).fit(X, y)  # warm-up: the workers import muflow
        local, remote = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            a = muflow.SVC(**params).fit(X, y)
            local.append(time.perf_counter() - t)
            t = time.perf_counter()
            b = muflow.SVC(client=client, **params).fit(X, y)
            remote.append(time.perf_counter() - t)
        ratio = np.median(remote) / np.median(local)
        worst = max(worst, ratio)
        print(f"537 rows, {solver}: in process {np.median(local) * 1e3:.1f} ms, given a client "
              f"{np.median(remote) * 1e3:.1f} ms (one task on a worker): ratio {ratio:.2f}x "
              f"(target <= 3x); objectives {a.objective_[0]:.6f} / {b.objective_[0]:.6f}")
    return worst


@contextlib.contextmanager
def _setting(module, name, value):
    """``module.name = value`` for the duration (the benchmark's switches of a path)."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def small_per_pass(client, repeats=5):
    """537 rows, m3, a round trip per pass: row partitions with kernel panels and the Gram
    store against in process."""
    import os
    import tempfile

    import muflow
    import muflow.dask.panels
    import muflow.datasets
    import muflow.routing
    from sklearn.exceptions import ConvergenceWarning

    X, y = muflow.datasets.load_breast_cancer()
    X, y = X[:537] / 10.0, y[:537]
    params = dict(kernel="rbf", gamma=0.5, C=1.0, solver="m3")
    local = []
    for _ in range(repeats):
        t = time.perf_counter()
        a = muflow.SVC(**params).fit(X, y)
        local.append(time.perf_counter() - t)
    t_local = float(np.median(local))
    passes = int(a.n_iter_[0])
    times, fits = {}, {}
    with _setting(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0), tempfile.TemporaryDirectory() as cache:
        os.environ["MUFLOW_CACHE_DIR"] = cache
        t = time.perf_counter()
        fits["panels"] = muflow.SVC(client=client, **params).fit(X, y)
        times["panels"] = time.perf_counter() - t
        with _setting(muflow.routing, "PANEL_FRACTION", 0.0), warnings.catch_warnings():
            # the store is float32 (the in-process K and the panels are float64 up to 4096
            # samples): there m3 stalls above tol (KKT 0.014 after 200,000 passes in
            # process), so it runs the in-process fit's passes
            warnings.simplefilter("ignore", ConvergenceWarning)
            t = time.perf_counter()
            fits["store"] = muflow.SVC(client=client, max_iter=passes, **params).fit(X, y)
            times["store"] = time.perf_counter() - t
        del os.environ["MUFLOW_CACHE_DIR"]
    print(f"537 rows, m3, a round trip a pass ({passes} passes): in process {t_local * 1e3:.0f} ms "
          f"({t_local / passes * 1e6:.0f} us a pass), objective {a.objective_[0]:.6f}")
    for name, label in (("panels", "row partitions, kernel panels (float64)"),
                        ("store", "Gram store (DaskGram, float32, the same passes)")):
        b = fits[name]
        rel = abs(b.objective_[0] - a.objective_[0]) / abs(a.objective_[0])
        print(f"    {label}: {times[name]:.2f} s ({times[name] / int(b.n_iter_[0]) * 1e3:.2f} ms a pass, "
              f"{int(b.n_iter_[0])} passes, KKT {b.kkt_violation_[0]:.1e}): ratio "
              f"{times[name] / t_local:.1f}x in process (target <= 3x); objective relative "
              f"difference {rel:.1e}")
    print(f"    row partitions against the Gram store: {times['panels'] / times['store']:.2f}x")
    return times["panels"] / t_local


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="20000,50000", help="comma-separated n (default: 20000,50000)")
    p.add_argument("--cases", default="large,small,per-pass",
                   help="comma-separated parts of the docstring's list to run: large (1), small "
                        "(2), per-pass (3); default: all")
    args = p.parse_args()
    cases = set(args.cases.split(","))
    from distributed import Client, LocalCluster

    import os

    print(f"machine: {len(os.sched_getaffinity(0))} CPUs; cluster: 2 worker processes x 1 thread")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      memory_limit="8GiB") as cluster, Client(cluster) as client:
        print(f"dashboard: {client.dashboard_link}")
        ratios = [large(client, int(n)) for n in args.sizes.split(",")] if "large" in cases else []
        worst_small = small(client) if "small" in cases else None
        per_pass = small_per_pass(client) if "per-pass" in cases else None
    if ratios:
        print(f"largest ratio for n >= 20,000: {max(ratios):.2f}x (target <= 1.5x)")
    if worst_small is not None:
        print(f"537 rows given a client: {worst_small:.2f}x (target <= 3x)")
    if per_pass is not None:
        print(f"537 rows, m3 a round trip a pass on the row partitions: {per_pass:.1f}x")


if __name__ == "__main__":
    main()
