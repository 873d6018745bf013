"""muflow sweep against GridSearchCV(sklearn.svm.SVC()) on a8a, side by side.

5 stratified folds (seeded), C in {0.01, 0.1, 1, 10, 100}, gamma in {0.01, 0.05}, RBF.
Both refit the best configuration on all rows. muflow runs in a fresh Python process
timed from outside, so its time includes process start and ``import muflow``; it is split
into Gram builds, solver iterations and overhead (everything else).

Usage::

    python benchmarks/bench_sweep_a8a.py --rows 8000
    python benchmarks/bench_sweep_a8a.py            # all 22696 rows (GridSearchCV: ~7 min)
    python benchmarks/bench_sweep_a8a.py --rows 8000 --paths continuation,batched --solver smo
    python benchmarks/bench_sweep_a8a.py --repeat 3 --fresh-jit   # muflow's median of 3 runs

``--paths`` runs the muflow sweep once per path (each in its own process) and reports which
was faster. Where scikit-learn-intelex is installed, GridSearchCV over ``sklearnex.svm.SVC``
is timed too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "a8a"
C_VALUES = [0.01, 0.1, 1.0, 10.0, 100.0]
GAMMAS = [0.01, 0.05]
FOLDS, SEED = 5, 0


def load(rows, path=DATA):
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), n_features=123)
    if rows:
        X, y = X[:rows], y[:rows]
    # libsvm's wrapper takes 32-bit sparse indices only (GridSearchCV's final refit on all rows)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    return X, y


def muflow_worker(args):
    """Runs in the child process: the muflow sweep, timings as JSON on the last line."""
    t_imports = time.perf_counter()
    from muflow.selection import SweepGrid, run_sweep

    t_imports = time.perf_counter() - t_imports
    t_load = time.perf_counter()
    X, y = load(args.rows, args.data)
    t_load = time.perf_counter() - t_load
    grid = SweepGrid([{"kernel": "rbf", "gamma": GAMMAS}], C=C_VALUES)
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        r = run_sweep(X, y, grid, folds=FOLDS, seed=SEED, out_dir=out, solver=args.solver,
                      path=args.path, tol=args.tol, n_jobs=args.jobs, progress=False)
        seconds = time.perf_counter() - t
    print(json.dumps({"best": r.best, "timings": r.timings, "imports": t_imports, "load": t_load,
                      "sweep_seconds": seconds, "path_report": r.path_report,
                      "n_iter": {f"{row.gamma}/{row.C}": row.n_iter for row in r.table},
                      "table": [(row.gamma, row.C, row.mean_cv_accuracy) for row in r.table]}))


def run_muflow(args, path, fresh_jit=False):
    """The sweep in a fresh process; with ``fresh_jit``, numba's on-disk cache pointed at an
    empty directory, so that every compiled function is compiled (a first run in a fresh
    environment)."""
    import os

    cmd = [sys.executable, __file__, "--worker", "--rows", str(args.rows or 0), "--path", path,
           "--solver", args.solver, "--tol", str(args.tol), "--data", str(args.data),
           "--jobs", str(args.jobs)]
    env = dict(os.environ)
    jit_dir = tempfile.TemporaryDirectory() if fresh_jit else None
    if jit_dir is not None:
        env["NUMBA_CACHE_DIR"] = jit_dir.name
    try:
        return run_worker(cmd, env)
    finally:
        if jit_dir is not None:
            jit_dir.cleanup()


def run_worker(cmd, env=None) -> dict:
    """Run a sweep worker process; the JSON its last line prints, with "wall" (seconds)."""
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"muflow worker failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def run_gridsearch(X, y, estimator, n_jobs):
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    cv = StratifiedKFold(FOLDS, shuffle=True, random_state=SEED)
    t = time.perf_counter()
    search = GridSearchCV(estimator, {"C": C_VALUES, "gamma": GAMMAS}, cv=cv, n_jobs=n_jobs).fit(X, y)
    wall = time.perf_counter() - t
    scores = {(p["gamma"], p["C"]): s for p, s in zip(search.cv_results_["params"],
                                                     search.cv_results_["mean_test_score"])}
    fit_times = search.cv_results_["mean_fit_time"]
    return {"wall": wall, "best": dict(search.best_params_, cv_accuracy=float(search.best_score_)),
            "scores": scores, "fit_time_range": (float(fit_times.min()), float(fit_times.max()))}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=0, help="first N rows of a8a (default: all 22696)")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--solver", default="auto")
    p.add_argument("--path", default="auto")
    p.add_argument("--paths", default="auto",
                   help="comma-separated muflow paths to time, each in its own process (default: auto)")
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--n-jobs", type=int, default=2, help="GridSearchCV n_jobs (default: 2)")
    p.add_argument("--jobs", type=int, default=2,
                   help="muflow n_jobs: forked processes for the folds' columns (default: 2, as GridSearchCV)")
    p.add_argument("--skip-sklearn", action="store_true")
    p.add_argument("--cache-size", type=float, default=1000.0,
                   help="the peers' cache_size in MB (default: 1000, as a libsvm user with memory to spare)")
    p.add_argument("--repeat", type=int, default=1,
                   help="muflow's sweep this many times, each in a fresh process; the median run is "
                        "reported and compared (default: 1)")
    p.add_argument("--fresh-jit", action="store_true",
                   help="also time a muflow run whose numba cache starts empty (a fresh environment)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.rows = args.rows or None
        return muflow_worker(args)
    if not args.data.exists():
        raise SystemExit(f"{args.data} not found")
    X, y = load(args.rows, args.data)
    print(f"a8a: {X.shape[0]} rows x {X.shape[1]} features; {FOLDS} folds; C in {C_VALUES}; "
          f"gamma in {GAMMAS}; RBF")
    results = {}
    for path in args.paths.split(","):
        runs = [run_muflow(args, path) for _ in range(args.repeat)]
        runs.sort(key=lambda r: r["wall"] - r["load"])
        results[path] = m = runs[len(runs) // 2]  # the median run (fresh processes, run-to-run noise ~10 %)
        if args.repeat > 1:
            print(f"muflow [{path}]: {args.repeat} fresh processes, sweep seconds without the read of a8a: "
                  + ", ".join(f"{r['wall'] - r['load']:.2f}" for r in runs) + " (the median is reported)")
        t = m["timings"]
        settings = m["path_report"]["settings"]
        print(f"muflow [{path} -> {settings[0]['path']}, solver {settings[0]['solver']}, n_jobs {args.jobs}]: "
              f"{m['wall']:.2f} s wall (process start + imports {m['wall'] - m['sweep_seconds']:.2f} s, "
              f"of which import muflow.selection {m['imports']:.2f} s)")
        m["wall_no_load"] = m["wall"] - m["load"]
        overhead = m["wall_no_load"] - t["gram"] - t["solve"] - t.get("refit", 0.0)
        print(f"    reading a8a in the child {m['load']:.2f} s (not counted: GridSearchCV gets X in memory)")
        by_c = ", ".join(f"{k[len('solve '):]} {v:.1f} s" for k, v in t.items() if k.startswith("solve C="))
        print(f"    solves by C: {by_c}; refit {t.get('refit', 0.0):.2f} s")
        print(f"    Gram builds {t['gram']:.2f} s | solver iterations {t['solve']:.2f} s | "
              f"overhead {overhead:.2f} s (validation, outputs, plots, process start, imports) | "
              f"total {m['wall_no_load']:.2f} s")
        print(f"    best {m['best']}")
    first = None
    if args.fresh_jit:
        first = run_muflow(args, args.paths.split(",")[0], fresh_jit=True)
        first["wall_no_load"] = first["wall"] - first["load"]
        print(f"muflow, first run in a fresh environment (numba compiles everything): "
              f"{first['wall_no_load']:.2f} s (Gram {first['timings']['gram']:.2f} s, solver "
              f"{first['timings']['solve']:.2f} s)")
    fastest = min(results, key=lambda k: results[k]["wall_no_load"])
    if len(results) > 1:
        print("    faster path: " + fastest + " (" + ", ".join(
            f"{k} {v['wall_no_load']:.2f} s" for k, v in results.items()) + ")")
    if args.skip_sklearn:
        return 0
    from sklearn.svm import SVC

    g = run_gridsearch(X, y, SVC(cache_size=args.cache_size), args.n_jobs)
    print(f"GridSearchCV(SVC(cache_size={args.cache_size:g}), n_jobs={args.n_jobs}): {g['wall']:.2f} s "
          f"(mean fit per configuration {g['fit_time_range'][0]:.2f} to {g['fit_time_range'][1]:.2f} s)")
    print(f"    best {g['best']}")
    m = results[fastest]
    try:
        from sklearnex.svm import SVC as SVCX
    except ImportError:
        print("scikit-learn-intelex not installed: sklearnex.svm.SVC not timed "
              "(bash benchmarks/peers_env.sh, then run from benchmarks/.venv-peers)")
    else:
        # n_jobs=1: oneDAL threads each fit over the cores itself
        gx = run_gridsearch(X, y, SVCX(cache_size=args.cache_size), 1)
        same_x = (m["best"]["gamma"], m["best"]["C"]) == (gx["best"]["gamma"], gx["best"]["C"])
        print(f"GridSearchCV(sklearnex SVC(cache_size={args.cache_size:g}), n_jobs=1): {gx['wall']:.2f} s; "
              f"best {gx['best']}")
        print(f"ratio GridSearchCV(sklearnex) / muflow = {gx['wall'] / m['wall_no_load']:.1f}x "
              f"(target >= 2.5x); best configuration {'same' if same_x else 'different'}")
    ours = {(g_, c): a for g_, c, a in m["table"]}
    best = m["best"]
    theirs_of_ours = g["scores"][(best["gamma"], best["C"])]
    same = (best["gamma"], best["C"]) == (g["best"]["gamma"], g["best"]["C"])
    print(f"ratio GridSearchCV / muflow = {g['wall'] / m['wall_no_load']:.1f}x "
          f"({g['wall'] / m['wall']:.1f}x counting muflow's own read of a8a; target >= 10x on all rows)")
    print(f"best configuration: {'same' if same else 'different'}; muflow CV {best['cv_accuracy']:.4f} "
          f"vs GridSearchCV best {g['best']['cv_accuracy']:.4f} (difference "
          f"{100 * (best['cv_accuracy'] - g['best']['cv_accuracy']):+.2f} points; libsvm's CV of "
          f"muflow's pick {theirs_of_ours:.4f})")
    if first is not None:
        print(f"ratio GridSearchCV / muflow's first run in a fresh environment = "
              f"{g['wall'] / first['wall_no_load']:.1f}x (target >= 8x)")
    worst = max(abs(ours[k] - g["scores"][k]) for k in ours)
    print(f"largest per-configuration CV accuracy difference muflow vs libsvm: {100 * worst:.2f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
