"""muflow sweep above its stored-K size (rows on demand) against GridSearchCV over
scikit-learn-intelex's SVC, side by side (issue 30, item 2).

``make_classification(n_samples=80000, n_features=50, n_informative=20, flip_y=0.05,
random_state=11)``, RBF gamma=0.02, C in {0.1, 1, 10}, 3 stratified folds (seeded, the same
folds on both sides). Both refit the best configuration on all rows. muflow runs in a fresh
Python process timed from outside (process start and ``import muflow`` included); its time
is split into operator setup, solves by C, the refit and the rest. Above
:data:`muflow.routing.SWEEP_ROWS_MIN_SAMPLES` samples the sweep computes kernel rows on
demand and runs the working-set solver (each fold on its own training samples, warm-started
along C on one operator and row cache for its whole C path); ``--force-rows`` lowers that
threshold to 0 so that a smaller ``--n`` takes the same path. ``--share-rows`` solves every fold on rows over all n samples instead (the
alternative measured against restricting each fold to its own samples).

Usage::

    python benchmarks/bench_sweep_rows.py                      # 80,000 rows (the peer: ~10 min)
    python benchmarks/bench_sweep_rows.py --n 20000 --force-rows
    python benchmarks/bench_sweep_rows.py --n 20000 --force-rows --skip-peer --share-rows

Run it from the peers' environment (``bash benchmarks/peers_env.sh``) for the
scikit-learn-intelex side; without it only muflow is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sweep_a8a import run_worker  # noqa: E402  (a sweep worker process, its JSON)

C_VALUES = [0.1, 1.0, 10.0]
GAMMA = 0.02
FOLDS, SEED = 3, 0


def data(n):
    from sklearn.datasets import make_classification

    return make_classification(n_samples=n, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=11)


def muflow_worker(args):
    """Runs in the child process: the muflow sweep, timings as JSON on the last line."""
    from muflow import routing
    from muflow.selection import SweepGrid, run_sweep

    if args.force_rows:
        routing.SWEEP_ROWS_MIN_SAMPLES = 0
    if args.share_rows:  # every fold's columns on rows over all n samples
        from muflow.selection import continuation

        continuation.solves_on_own_samples = lambda *a, **k: False
    X, y = data(args.n)
    grid = SweepGrid([{"kernel": "rbf", "gamma": [GAMMA]}], C=C_VALUES)
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        r = run_sweep(X, y, grid, folds=FOLDS, seed=SEED, out_dir=out, n_jobs=args.jobs,
                      tol=args.tol, cache_size=args.muflow_cache, progress=False)
        seconds = time.perf_counter() - t
    print(json.dumps({"best": r.best, "timings": r.timings, "sweep_seconds": seconds,
                      "path_report": r.path_report,
                      "table": [(row.C, row.mean_cv_accuracy) for row in r.table]}))


def run_muflow(args):
    cmd = [sys.executable, __file__, "--worker", "--n", str(args.n), "--jobs", str(args.jobs),
           "--tol", str(args.tol), "--muflow-cache", str(args.muflow_cache)]
    cmd += ["--force-rows"] if args.force_rows else []
    cmd += ["--share-rows"] if args.share_rows else []
    return run_worker(cmd, dict(os.environ))


def run_gridsearch(X, y, cache_size):
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearnex.svm import SVC

    cv = StratifiedKFold(FOLDS, shuffle=True, random_state=SEED)
    t = time.perf_counter()
    # n_jobs=1: oneDAL threads each fit over the cores itself
    search = GridSearchCV(SVC(kernel="rbf", gamma=GAMMA, cache_size=cache_size), {"C": C_VALUES},
                          cv=cv, n_jobs=1, refit=True).fit(X, y)
    wall = time.perf_counter() - t
    return {"wall": wall, "best": dict(search.best_params_, cv_accuracy=float(search.best_score_)),
            "scores": dict(zip(C_VALUES, search.cv_results_["mean_test_score"])),
            "refit": float(search.refit_time_)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=80000, help="generated rows (default: 80000)")
    p.add_argument("--jobs", type=int, default=2, help="muflow n_jobs (default: 2)")
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--muflow-cache", type=float, default=None,
                   help="muflow's cache_size in MB, per process (default: the peer's --cache-size; "
                        "the sweep's own default is 256)")
    p.add_argument("--cache-size", type=float, default=2000.0,
                   help="the peer's cache_size in MB (default: 2000)")
    p.add_argument("--force-rows", action="store_true",
                   help="rows on demand whatever --n (routing.SWEEP_ROWS_MIN_SAMPLES = 0)")
    p.add_argument("--share-rows", action="store_true",
                   help="folds on rows over all samples instead of each on its own samples")
    p.add_argument("--skip-peer", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.muflow_cache is None:
        args.muflow_cache = args.cache_size
    if args.worker:
        return muflow_worker(args)
    print(f"make_classification: {args.n} rows x 50 features (20 informative, flip_y=0.05, "
          f"random_state=11); {FOLDS} folds; C in {C_VALUES}; RBF gamma={GAMMA}")
    m = run_muflow(args)
    t = m["timings"]
    s = m["path_report"]["settings"][0]
    overhead = m["wall"] - t["gram"] - t["solve"] - t["refit"]
    by_c = ", ".join(f"{k[len('solve '):]} {v:.1f} s" for k, v in t.items() if k.startswith("solve C="))
    print(f"muflow [{s['path']}, solver {s['solver']}, n_jobs {args.jobs}, cache {args.muflow_cache:g} MB"
          f"{', folds share rows over all samples' if args.share_rows else ''}]: {m['wall']:.2f} s wall")
    print(f"    operator {t['gram']:.2f} s | solves {t['solve']:.2f} s ({by_c}) | refit {t['refit']:.2f} s"
          f" | overhead {overhead:.2f} s (scoring, outputs, process start, imports, data)")
    print("    CV accuracy by C: " + ", ".join(f"C={c:g} {a:.4f}" for c, a in m["table"]))
    print(f"    best {m['best']}")
    if args.skip_peer:
        return 0
    try:
        import sklearnex  # noqa: F401
    except ImportError:
        print("scikit-learn-intelex not installed: the peer is not timed "
              "(bash benchmarks/peers_env.sh, then run from benchmarks/.venv-peers)")
        return 0
    X, y = data(args.n)
    g = run_gridsearch(X, y, args.cache_size)
    print(f"GridSearchCV(sklearnex SVC(cache_size={args.cache_size:g}), n_jobs=1, refit=True): "
          f"{g['wall']:.2f} s (refit {g['refit']:.2f} s)")
    print("    CV accuracy by C: " + ", ".join(f"C={c:g} {a:.4f}" for c, a in g["scores"].items()))
    print(f"    best {g['best']}")
    same = m["best"]["C"] == g["best"]["C"]
    worst = max(abs(a - g["scores"][c]) for c, a in m["table"])
    print(f"ratio GridSearchCV(sklearnex) / muflow = {g['wall'] / m['wall']:.2f}x (target >= 2x); "
          f"best configuration {'same' if same else 'different'}; largest CV accuracy difference "
          f"{100 * worst:.2f} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
