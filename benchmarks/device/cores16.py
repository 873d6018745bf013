"""muflow against scikit-learn-intelex on a many-core machine: issue 37's table.

Every measurement runs in a fresh process pinned with ``taskset`` to the first k cores,
its data loaded and its compiled loops (muflow's numba loops, oneDAL's first call) warmed
on a small fit of the same path before the timed fit. Both sides run with their defaults:
muflow's ``n_jobs=None`` (every core the process may use, muflow.threads.thread_budget) and
scikit-learn-intelex's oneDAL on TBB (every core). Rows:

- a8a fit (RBF gamma 0.05, C 1), at each of ``--cores`` (default 2, 8, 16);
- 100,000 x 50 generated (make_classification, 20 informative, flip_y 0.05; gamma 0.02,
  C 1), at ``--big-cores``;
- the a8a sweep, 5 C x 2 gamma x 5 folds, muflow's ``run_sweep`` against
  ``GridSearchCV(sklearnex SVC(), n_jobs=1)`` (oneDAL threads each fit), at ``--big-cores``;
- 120,000 generated: muflow in process against ``SVC(client=...)`` on a LocalCluster of
  8 workers x 2 threads, and 1 worker x 2 threads (the workers' speed-up), at
  ``--big-cores``;
- the working-set size at many cores (case ``q``, muflow alone): the a8a fit at
  ``--big-cores`` with q of :func:`muflow.solvers.working_set_loop.default_q` (512 for
  a8a), twice and four times it. muflow chooses q by n alone, so that a fit's result does
  not depend on its threads; these rows say what a q chosen by the threads would gain.

Cases that would not end within ``--budget`` seconds (by the issue's own figures, scaled)
are skipped and say so. The accuracy (held-out for fits, best mean CV for the sweep) is
printed beside each time: the comparison holds only where both agree.

Usage (``benchmarks/device/cores16.sh`` sets up the environment)::

    python benchmarks/device/cores16.py                      # the table, 16-core machine
    python benchmarks/device/cores16.py --cores 2 --cases a8a --rows 4000   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
C_VALUES = [0.01, 0.1, 1.0, 10.0, 100.0]
GAMMAS = [0.01, 0.05]
FOLDS, SEED = 5, 0
#: Seconds each case took on the issue's 16-core Xeon (both sides, process starts
#: included, roughly): the budget check skips a case that would not fit.
EXPECTED_S = {"a8a": 15, "gen": 60, "sweep": 230, "dask8": 100, "dask1": 90, "q": 30}


def data_dir() -> Path:
    """a8a's folder: a carried copy beside this script, else the project's shared data."""
    carried = HERE / "data"
    return carried if (carried / "a8a").exists() else REPO.parent / "shared" / "data"


# -- the measured side (a fresh, pinned process) ------------------------------------------------
def load_a8a(rows):
    from sklearn.datasets import load_svmlight_file

    out = []
    for name in ("a8a", "a8a.t"):
        X, y = load_svmlight_file(str(data_dir() / name), n_features=123)
        X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)
        out += [X, y]
    Xtr, ytr, Xte, yte = out
    if rows:
        Xtr, ytr = Xtr[:rows], ytr[:rows]
    return Xtr, ytr, Xte, yte


def generated(n, n_test=10_000):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=n + n_test, n_features=50, n_informative=20,
                               flip_y=0.05, random_state=0)
    return X[:n], y[:n], X[n:], y[n:]


def estimator(side, **params):
    if side == "muflow":
        import muflow

        return muflow.SVC(**params)
    from sklearnex.svm import SVC

    return SVC(**params)


def warm_fit(side, X, y, n, params):
    """A small fit on the path the full fit of n rows takes (muflow: the same Gram mode)."""
    extra = {}
    if side == "muflow":
        from muflow.routing import gram_mode

        extra["gram"] = gram_mode("auto", n, "auto")
    m = min(2000, X.shape[0])
    estimator(side, **params, **extra).fit(X[:m], y[:m])


def one_fit(side, data, params, q=None):
    Xtr, ytr, Xte, yte = data
    if q:  # the in-process working set's size, in place of default_q(n)
        import muflow.solvers.working_set as working_set

        working_set.default_q = lambda n: q
    warm_fit(side, Xtr, ytr, Xtr.shape[0], params)
    t = time.perf_counter()
    model = estimator(side, **params).fit(Xtr, ytr)
    seconds = time.perf_counter() - t
    out = {"seconds": seconds, "accuracy": float(model.score(Xte, yte))}
    if side == "muflow":
        out["threads"] = int(model.n_threads_)
    return out


def sweep(side, rows):
    Xtr, ytr, _, _ = load_a8a(rows)
    if side == "muflow":
        from muflow.selection import SweepGrid, run_sweep

        grid = SweepGrid([{"kernel": "rbf", "gamma": GAMMAS}], C=C_VALUES)
        warm_fit("muflow", Xtr, ytr, 2000, {"gamma": 0.05})
        with tempfile.TemporaryDirectory() as out:
            t = time.perf_counter()
            result = run_sweep(Xtr, ytr, grid, folds=FOLDS, seed=SEED, out_dir=out, progress=False)
            seconds = time.perf_counter() - t
        return {"seconds": seconds, "accuracy": float(result.best["cv_accuracy"])}
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    warm_fit(side, Xtr, ytr, 2000, {"gamma": 0.05})
    cv = StratifiedKFold(FOLDS, shuffle=True, random_state=SEED)
    t = time.perf_counter()
    search = GridSearchCV(estimator(side), {"C": C_VALUES, "gamma": GAMMAS}, cv=cv, n_jobs=1).fit(Xtr, ytr)
    return {"seconds": time.perf_counter() - t, "accuracy": float(search.best_score_)}


def dask_fit(n, workers, threads):
    """muflow on n generated rows: in process (workers == 0) or given a LocalCluster."""
    data = generated(n)
    params = {"gamma": 0.02, "C": 1.0}
    if workers == 0:
        return one_fit("muflow", data, params)
    import muflow
    from distributed import Client

    from muflow.dask.cluster import local_cluster

    Xtr, ytr, Xte, yte = data
    # the LocalCluster `python -m muflow run` starts, as benchmarks/bench_scaling.py's dask case
    with local_cluster(workers, threads_per_worker=threads, dashboard_address=None,
                       memory_limit=0) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers)
        muflow.SVC(client=client, **params).fit(Xtr[:5000], ytr[:5000])  # workers' imports, loops
        t = time.perf_counter()
        model = muflow.SVC(client=client, **params).fit(Xtr, ytr)
        seconds = time.perf_counter() - t
        return {"seconds": seconds, "accuracy": float(model.score(Xte, yte))}


def measure(args) -> dict:
    case, side = args.case, args.side
    if case == "a8a":
        return one_fit(side, load_a8a(args.rows), {"gamma": 0.05, "C": 1.0}, q=args.q)
    if case == "gen":
        return one_fit(side, generated(args.n), {"gamma": 0.02, "C": 1.0})
    if case == "sweep":
        return sweep(side, args.rows)
    if case == "dask":
        return dask_fit(args.n, args.workers, args.threads)
    raise SystemExit(f"unknown case {case!r}")


# -- the driver ---------------------------------------------------------------------------------
def pinned(cores, argv, timeout):
    """Run this script's measured side on the first ``cores`` cores; its JSON result."""
    cmd = ["taskset", "-c", f"0-{cores - 1}", sys.executable, __file__, *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def cell(r):
    if "error" in r:
        return "failed"
    return f"{r['seconds']:.2f} s ({r['accuracy']:.4f})"


def ratio(mu, peer):
    if "error" in mu or "error" in peer:
        return "-"
    return f"{peer['seconds'] / mu['seconds']:.2f}x"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cores", default="2,8,16", help="a8a fit at each of these core counts")
    p.add_argument("--big-cores", type=int, default=16, help="cores of the other rows")
    p.add_argument("--cases", default="a8a,gen,sweep,dask,q")
    p.add_argument("--rows", type=int, default=0, help="a8a training rows (0: all 22,696)")
    p.add_argument("--n-gen", type=int, default=100_000)
    p.add_argument("--n-dask", type=int, default=120_000)
    p.add_argument("--budget", type=float, default=450.0, help="seconds for the whole table")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds for one measurement")
    # the measured side
    p.add_argument("--case"), p.add_argument("--side"), p.add_argument("--n", type=int)
    p.add_argument("--workers", type=int, default=0), p.add_argument("--threads", type=int, default=1)
    p.add_argument("--q", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        print(json.dumps(measure(args)))
        return

    t0 = time.perf_counter()
    have = len(os.sched_getaffinity(0))
    big = min(args.big_cores, have)
    cases = args.cases.split(",")
    scale = (args.rows or 22_696) / 22_696
    print(f"machine: {have} cores usable ({_cpu_model()}); python {sys.version.split()[0]}; "
          f"{_versions()}", flush=True)
    print("| work | muflow | scikit-learn-intelex | ratio |\n|---|---|---|---|", flush=True)

    def fits(case, cost):
        left = args.budget - (time.perf_counter() - t0)
        if cost > left:
            print(f"| {case} | skipped: about {cost:.0f} s, {left:.0f} s of the budget left | | |",
                  flush=True)
            return False
        return True

    timeout = args.timeout
    if "a8a" in cases:
        for k in (int(c) for c in args.cores.split(",")):
            if k > have or not fits(f"a8a fit, {k} cores", EXPECTED_S["a8a"] * scale):
                continue
            argv = ["--case", "a8a", "--rows", str(args.rows)]
            mu = pinned(k, argv + ["--side", "muflow"], timeout)
            peer = pinned(k, argv + ["--side", "sklearnex"], timeout)
            print(f"| a8a fit, {k} cores | {cell(mu)} | {cell(peer)} | {ratio(mu, peer)} |", flush=True)
    if "gen" in cases and fits("generated", EXPECTED_S["gen"] * (args.n_gen / 1e5) ** 2):
        argv = ["--case", "gen", "--n", str(args.n_gen)]
        mu = pinned(big, argv + ["--side", "muflow"], timeout)
        peer = pinned(big, argv + ["--side", "sklearnex"], timeout)
        print(f"| {args.n_gen:,} x 50 generated, {big} cores | {cell(mu)} | {cell(peer)} | "
              f"{ratio(mu, peer)} |", flush=True)
    if "sweep" in cases and fits("a8a sweep", EXPECTED_S["sweep"] * scale ** 2):
        argv = ["--case", "sweep", "--rows", str(args.rows)]
        mu = pinned(big, argv + ["--side", "muflow"], timeout)
        peer = pinned(big, argv + ["--side", "sklearnex"], timeout)
        print(f"| a8a sweep 5 C x 2 gamma x 5 folds, {big} cores | {cell(mu)} | GridSearchCV "
              f"{cell(peer)} | {ratio(mu, peer)} |", flush=True)
    if "dask" in cases and fits("dask", EXPECTED_S["dask8"] * (args.n_dask / 1.2e5) ** 2):
        base = ["--case", "dask", "--n", str(args.n_dask)]
        here = pinned(big, base, timeout)
        workers = max(1, big // 2)
        spread = pinned(big, base + ["--workers", str(workers), "--threads", "2"], timeout)
        print(f"| {args.n_dask:,} generated, in process vs SVC(client) on {workers} workers x 2 "
              f"threads | {cell(here)} | {cell(spread)} on the cluster | {ratio(spread, here)} "
              f"(in process / cluster) |", flush=True)
        if fits("dask, 1 worker", EXPECTED_S["dask1"] * (args.n_dask / 1.2e5) ** 2):
            one = pinned(big, base + ["--workers", "1", "--threads", "2"], timeout)
            print(f"| {args.n_dask:,} generated, 1 worker x 2 threads vs {workers} workers x 2 "
                  f"threads | {cell(one)} | {cell(spread)} | {ratio(spread, one)} (speed-up) |",
                  flush=True)
    if "q" in cases and fits("q", EXPECTED_S["q"] * scale):
        from muflow.solvers.working_set_loop import default_q

        q0 = default_q(args.rows or 22_696)
        argv = ["--case", "a8a", "--rows", str(args.rows), "--side", "muflow"]
        base = pinned(big, argv, timeout)
        for q in (2 * q0, 4 * q0):
            other = pinned(big, argv + ["--q", str(q)], timeout)
            print(f"| a8a fit, {big} cores, working set q = {q0} (default) vs {q} | {cell(base)} | "
                  f"{cell(other)} | {ratio(other, base)} (q {q0} / q {q}) |", flush=True)
    print(f"total {time.perf_counter() - t0:.0f} s; ratio = scikit-learn-intelex's time / "
          "muflow's (above 1: muflow faster); (accuracy) held-out, or best mean CV for sweeps")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu model unknown"


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("numpy", "scikit-learn", "scikit-learn-intelex", "daal", "numba", "distributed"):
        try:
            out.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            out.append(f"{name} missing")
    return ", ".join(out)


if __name__ == "__main__":
    main()
