"""SVC(device="cuda") against device="cpu" on the same machine: a8a, the 100,000 rows and
the a8a sweep, each with its accuracy and objective (issue 41).

Cases (the issue's, as ThunderSVM was timed on an H100):

- a8a: 22,696 x 123, RBF gamma=0.05, C=1; test accuracy on a8a.t;
- 100k: ``make_classification(100000, 50, n_informative=20, flip_y=0.05, random_state=0)``,
  RBF gamma=0.02, C=1; training accuracy (the set has no test split);
- sweep: a8a, C in {0.01, 0.1, 1, 10, 100} x gamma in {0.01, 0.05} x 5 stratified folds,
  refit included; the best setting and its CV accuracy, the refit's objective.

Each path is timed after one warm-up run of the same call on the first
:data:`WARM_UP_ROWS` rows (the GPU's context, CuPy's compiled kernels, numba's loops). The GPU side runs only where CuPy sees a GPU; the
agreement printed (objective, predictions) is what tests/device/test_gpu.py asserts.

    python benchmarks/device/bench_gpu.py                 # both sides (needs a GPU)
    python benchmarks/device/bench_gpu.py --cpu-only      # the CPU side alone
    python benchmarks/device/bench_gpu.py --cpu-only --numpy-device --rows 3000
        # and the device code under NumPy (a check of this script, not a timing)
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
C_VALUES = [0.01, 0.1, 1.0, 10.0, 100.0]
GAMMAS = [0.01, 0.05]


def load_a8a(rows):
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(DATA / "a8a"), n_features=123)
    Xt, yt = load_svmlight_file(str(DATA / "a8a.t"), n_features=123)
    return (X[:rows], y[:rows], Xt, yt) if rows else (X, y, Xt, yt)


def load_100k(rows):
    from sklearn.datasets import make_classification

    X, y = make_classification(100000, 50, n_informative=20, flip_y=0.05, random_state=0)
    return (X[:rows], y[:rows]) if rows else (X, y)


#: The warm-up runs on this many rows: above 4,096 samples, so that it takes the dtype (and
#: the compiled kernels) of the timed run, without costing a second full run.
WARM_UP_ROWS = 5000


def timed(call, warm_up=None):
    """``(seconds, result)`` of ``call()``, after one untimed ``warm_up()``."""
    if warm_up is not None:
        warm_up()
    t = time.perf_counter()
    result = call()
    return time.perf_counter() - t, result


def fit_case(name, X, y, Xt, yt, params, devices, accuracy_on):
    from muflow import SVC

    out = {}
    for device in devices:
        seconds, model = timed(lambda: SVC(device=device, **params).fit(X, y),
                               lambda: SVC(device=device, **params).fit(X[:WARM_UP_ROWS],
                                                                         y[:WARM_UP_ROWS]))
        pred = model.predict(Xt)
        out[device] = {"seconds": seconds, "objective": float(np.sum(model.objective_)),
                       "accuracy": float(np.mean(pred == yt)), "n_iter": int(np.max(model.n_iter_)),
                       "pred": pred, "solver": model.solver_}
        print(f"{name:6s} {device:5s} {seconds:9.3f} s  objective {out[device]['objective']:.6f}  "
              f"{accuracy_on} accuracy {out[device]['accuracy']:.4f}  "
              f"iterations {out[device]['n_iter']}  solver {model.solver_}", flush=True)
    _compare(name, out, lambda r: r["objective"], lambda r: r["pred"])
    return out


def sweep_case(X, y, devices, folds):
    from muflow.selection import SweepGrid, run_sweep

    grid = SweepGrid([{"kernel": "rbf", "gamma": GAMMAS}], C=C_VALUES)
    out = {}
    for device in devices:
        def call(rows=None):
            with tempfile.TemporaryDirectory() as d:
                return run_sweep(X[:rows], y[:rows], grid, folds=folds, seed=0, out_dir=d,
                                 progress=False, device=device)
        seconds, r = timed(call, lambda: call(WARM_UP_ROWS))
        cv = {(row.gamma, row.C): row.mean_cv_accuracy for row in r.table}
        objective = float(np.sum(r.best_model.objective_))
        out[device] = {"seconds": seconds, "best": r.best, "cv": cv, "objective": objective}
        print(f"sweep  {device:5s} {seconds:9.3f} s  best gamma={r.best['gamma']} C={r.best['C']}  "
              f"CV accuracy {r.best['cv_accuracy']:.4f}  refit objective {objective:.6f}", flush=True)
    if len(out) == 2:
        a, b = out.values()
        worst = max(abs(a["cv"][k] - b["cv"][k]) for k in a["cv"])
        print(f"sweep  agreement: same best {a['best']['C'] == b['best']['C'] and a['best']['gamma'] == b['best']['gamma']}, "
              f"largest CV accuracy difference {worst:.4f}, refit objective relative difference "
              f"{abs(a['objective'] - b['objective']) / abs(b['objective']):.2e}", flush=True)
    return out


def _compare(name, out, objective, pred):
    if len(out) == 2:
        a, b = out.values()
        rel = abs(objective(a) - objective(b)) / abs(objective(b))
        same = float(np.mean(pred(a) == pred(b)))
        print(f"{name:6s} agreement: objective relative difference {rel:.2e}, same predictions "
              f"{100 * same:.2f} %, GPU/CPU time {a['seconds'] / b['seconds']:.3f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-only", action="store_true", help="the CPU side alone")
    parser.add_argument("--numpy-device", action="store_true",
                        help="with --cpu-only: also run the device code under NumPy")
    parser.add_argument("--rows", type=int, default=0, help="first rows of each set (0: all)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--cases", default="a8a,100k,sweep")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()

    from muflow.device.arrays import _cupy_or_reason

    devices = ["cuda", "cpu"]
    if args.cpu_only:
        devices = ["cpu"]
        if args.numpy_device:
            import muflow.device.arrays as arrays

            arrays._cupy_or_reason = lambda: (np, None)  # "cuda" runs the device code here
            devices = ["cuda", "cpu"]
    else:
        xp, why = _cupy_or_reason()
        if xp is None:
            raise SystemExit(f"no usable GPU ({why}); run with --cpu-only for the CPU side")
        print(f"GPU: {xp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, CuPy {xp.__version__}")
    import os

    print(f"CPU cores: {len(os.sched_getaffinity(0))}; devices {devices}; rows {args.rows or 'all'}",
          flush=True)
    cases = args.cases.split(",")
    figures = {}
    if "a8a" in cases:
        X, y, Xt, yt = load_a8a(args.rows)
        figures["a8a"] = fit_case("a8a", X, y, Xt, yt, dict(gamma=0.05, C=1.0), devices, "test")
    if "100k" in cases:
        X, y = load_100k(args.rows)
        figures["100k"] = fit_case("100k", X, y, X, y, dict(gamma=0.02, C=1.0), devices, "train")
    if "sweep" in cases:
        X, y, _, _ = load_a8a(args.rows)
        figures["sweep"] = sweep_case(X, y, devices, args.folds)
    if args.json:
        for case in figures.values():
            for r in case.values():
                r.pop("pred", None)
                if "cv" in r:
                    r["cv"] = {f"{g}/{c}": v for (g, c), v in r["cv"].items()}
        Path(args.json).write_text(json.dumps(figures, indent=1, default=float))


if __name__ == "__main__":
    main()
