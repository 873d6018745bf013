"""Data read where it lives: ``python -m muflow run`` on a Parquet directory against the same
run from one CSV file, and the data stage alone on a large Parquet directory.

1. ``run``: ``--rows`` x ``--features`` (default 200,000 x 20, make_classification with
   n_informative=10, flip_y=0.02, seed 0) written as ``--files`` Parquet files (default 8)
   and as one CSV file; each run with ``sweep.on_cluster = true`` on a LocalCluster of
   ``--workers`` processes (default 2) and a short grid (rbf, gamma 0.05, C 1, 2 folds),
   started as ``python -m muflow run CONFIG --out DIR`` in a subprocess. Each source is run
   twice: on the ``--base-rows`` first rows (default 10,000, written the same way: above
   4,096 training rows, so the client takes the same float32 paths and loads the same
   compiled kernels as the large run) and on all rows. Reported per source: wall time, the
   run process's peak RSS (VmHWM: the client, the Prefect flow and its imports; the Dask
   workers and the temporary Prefect server are other processes) on both data sets, their
   difference, the run directory's size, test accuracy; and X's size.

   The figure the acceptance compares with X's size is the **client's data-dependent
   peak**: the run's peak RSS minus the same run's peak on the base rows, for the Parquet
   source (the workers read it; the client holds y, the split's indices, the solver's
   O(n) vectors and q x q subproblem, the model's support vectors). The absolute peak is
   mostly the imports (Prefect, Dask, pandas, pyarrow, numba, scikit-learn, matplotlib),
   the same on any data. The CSV file is read by the workers too (``dask.dataframe.read_csv``
   in blocks, :mod:`muflow.data.workers`): its run differs from the Parquet run in the
   parsing time, not in what the client holds.
2. The data stage alone (read, split, persist on the workers: ``muflow.pipeline.prepare_data``
   with a client) on ``--stage-rows`` x ``--features`` (default 10,000,000 x 20), whose
   Parquet files the workers themselves generate (so this process never holds X). Reported:
   the stage's seconds and this process's peak RSS (absolute, and above its start);
   the acceptance: the absolute peak under 500 MB.

Usage::

    python benchmarks/bench_data_sources.py                       # the issue's sizes
    python benchmarks/bench_data_sources.py --rows 50000 --stage-rows 2000000
    python benchmarks/bench_data_sources.py --sources parquet --skip-stage   # the acceptance's run

The figures and the machine they were measured on go in docs/data-sources.md, with this
command.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import functools

import numpy as np

print = functools.partial(print, flush=True)  # progress shows in a log file as it comes

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

GRID = """
[grid]
C = [1.0]
kernels = [{ kernel = "rbf", gamma = [0.05] }]
[sweep]
folds = 2
on_cluster = true
[cluster]
workers = %d
"""


def vm_hwm_mb(pid: int) -> float:
    """Peak resident set of a process (VmHWM), MB; NaN once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def run_command(config: Path, out: Path) -> dict:
    """``python -m muflow run CONFIG --out OUT``: seconds, peak RSS of its process."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "muflow", "run", str(config), "--out", str(out)],
                            cwd=config.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak = [0.0]

    def watch():
        while proc.poll() is None:
            value = vm_hwm_mb(proc.pid)
            if value == value:
                peak[0] = max(peak[0], value)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - t0
    watcher.join()
    if proc.returncode:
        raise SystemExit(f"run failed ({proc.returncode}):\n{stderr[-3000:]}")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    metrics = json.loads((out / "metrics.json").read_text())
    return {"seconds": seconds, "peak_rss_mb": peak[0], "run_dir_mb": size / 2**20,
            "accuracy": metrics["accuracy"]}


def _write_source(X, y, folder: Path, csv: Path, files: int) -> None:
    import pandas as pd

    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    df["label"] = y.astype(np.int8)
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(df)), files)):
        df.iloc[part].to_parquet(folder / f"part-{i:02d}.parquet", index=False)
    df.to_csv(csv, index=False, float_format="%.17g")


def bench_run(args, root: Path) -> dict:
    from sklearn.datasets import make_classification

    X, y = make_classification(args.rows, args.features, n_informative=10, flip_y=0.02,
                               random_state=0)
    base = min(args.base_rows, args.rows)
    _write_source(X, y, root / "pq", root / "one.csv", args.files)
    _write_source(X[:base], y[:base], root / "pq-base", root / "base.csv", args.files)
    x_mb, base_mb = X.nbytes / 2**20, X[:base].nbytes / 2**20
    del X
    print(f"run: {args.rows} x {args.features} (X {x_mb:.1f} MB float64), {args.workers} workers, "
          f"sweep on the cluster, grid rbf gamma 0.05 x C 1, 2 folds; base run on the first "
          f"{base} rows (X {base_mb:.1f} MB)")
    warm = root / "warm.toml"  # numba compiles into its on-disk cache here: not measured
    warm.write_text('[data]\npath = "pq-base"\nlabel_column = "label"\n' + GRID % args.workers)
    run_command(warm, root / "run-warm")
    results = {}
    sources = [s for s in (("parquet", "pq", "pq-base"), ("csv", "one.csv", "base.csv"))
               if s[0] in args.sources]
    for name, path, base_path in sources:
        r = {}
        for which, where in (("base", base_path), ("full", path)):
            config = root / f"{name}-{which}.toml"
            config.write_text(f'[data]\npath = "{where}"\nlabel_column = "label"\n' + GRID % args.workers)
            r[which] = run_command(config, root / f"run-{name}-{which}")
        results[name] = r
        full, b = r["full"], r["base"]
        extra = full["peak_rss_mb"] - b["peak_rss_mb"]
        print(f"  {name:8s} {full['seconds']:7.1f} s  peak RSS {full['peak_rss_mb']:6.1f} MB "
              f"(base run {b['peak_rss_mb']:6.1f} MB, {b['seconds']:.1f} s): data-dependent peak "
              f"{extra:6.1f} MB = {extra / x_mb:.2f} x X; run dir {full['run_dir_mb']:6.2f} MB; "
              f"test accuracy {full['accuracy']:.4f}")
    if "parquet" not in results:
        return results
    pq = results["parquet"]["full"]
    extra = pq["peak_rss_mb"] - results["parquet"]["base"]["peak_rss_mb"]
    if "csv" in results:
        print(f"  parquet / csv time: {pq['seconds'] / results['csv']['full']['seconds']:.2f}")
    print(f"  acceptance (Parquet): the client's data-dependent peak {extra:.1f} MB < X "
          f"{x_mb:.1f} MB: {'yes' if extra < x_mb else 'NO'}; run directory {pq['run_dir_mb']:.2f} "
          f"MB < 50 MB: {'yes' if pq['run_dir_mb'] < 50 else 'NO'} (the absolute peak, "
          f"{pq['peak_rss_mb']:.0f} MB, is the imports' on any data: compare the base run's)")
    return results


def _write_part(path, rows, features, seed):
    """On a worker: one Parquet file of generated rows."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, features))
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(features)])
    df["label"] = (X[:, 0] + 0.5 * rng.normal(size=rows) > 0).astype(np.int8)
    df.to_parquet(path, index=False)
    return rows


def bench_stage(args, root: Path) -> None:
    from distributed import Client, LocalCluster

    from _memory import PeakMemory
    from muflow import pipeline as stages
    from muflow.config import from_dict

    n, d = args.stage_rows, args.features
    files = max(args.files, -(-n * d * 8 // (64 << 20)))
    folder = root / "big"
    folder.mkdir()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      memory_limit=args.memory_limit, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        bounds = np.linspace(0, n, files + 1).astype(int)
        client.gather(client.map(_write_part, [str(folder / f"part-{i:03d}.parquet") for i in range(files)],
                                 list(np.diff(bounds)), [d] * files, list(range(files))))
        cfg = from_dict({"data": {"path": str(folder), "label_column": "label"},
                         "sweep": {"on_cluster": True}})
        run = root / "stage-run"
        stages.start_run(cfg, run)
        start_rss = vm_hwm_mb(os.getpid())
        t0 = time.perf_counter()
        with PeakMemory() as pm:
            info = stages.prepare_data(cfg, run, client)
        seconds = time.perf_counter() - t0
        peak = vm_hwm_mb(os.getpid())
        stages.release_data(run, client)
    print(f"data stage: {n} x {d} (X {n * d * 8 / 2**20:.0f} MB) in {files} Parquet files, "
          f"{args.workers} workers: {seconds:.1f} s; this process's peak RSS {peak:.0f} MB "
          f"(VmHWM, {start_rss:.0f} MB before the stage; {pm.peak_mb:.0f} MB above its start); "
          f"{info['n_train']} train / {info['n_test']} test rows")
    print(f"  acceptance: this process's peak RSS {peak:.0f} MB < 500 MB: "
          f"{'yes' if peak < 500 else 'NO'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--base-rows", type=int, default=10_000,
                   help="rows of the base run, whose peak RSS the run's is compared with")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stage-rows", type=int, default=10_000_000)
    p.add_argument("--memory-limit", default="6GiB", help="per worker, data stage")
    p.add_argument("--sources", nargs="+", choices=("parquet", "csv"), default=["parquet", "csv"],
                   help="the sources of the run benchmark (default both)")
    p.add_argument("--skip-run", action="store_true")
    p.add_argument("--skip-stage", action="store_true")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="muflow-bench-data-"))
    try:
        if not args.skip_run:
            bench_run(args, root)
        if not args.skip_stage:
            bench_stage(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
