"""Prediction side by side: muflow.SVC against scikit-learn-intelex and libsvm, in one run.

Cases (``--cases``, comma-separated):

- ``a8a``: the a8a model (RBF gamma=0.05, C=1, about 8,260 support vectors) predicting a8a.t
  stacked ten times (98,650 sparse rows), one ``predict`` call;
- ``100k``: the model of ``make_classification(100000, 50, n_informative=20, flip_y=0.05,
  random_state=0)`` (RBF gamma=0.02, C=1) predicting those 100,000 rows, one call;
- ``one-row``: the a8a model predicting one dense row of a8a.t per call, the median of 200
  calls (rows taken in turn), after 20 calls of warm-up: the latency a service sees;
- ``load``: reading the a8a model back from disk, the median of 20 loads in a process that
  has loaded one model before (imports are a once-per-process cost, not the load's):
  ``muflow.load`` of the model directory (integrity checks included) against
  ``pickle.load`` of the peers' fitted estimators (what they offer; it runs code).

Contenders, each in a fresh process of its own: ``muflow`` (``muflow.SVC``), ``sklearnex``
(scikit-learn-intelex's SVC, oneDAL) and ``libsvm`` (scikit-learn's SVC). Every contender
fits its own model once, with its own solver, and keeps it in ``--cache`` (muflow.save for
muflow, pickle for the peers: this benchmark's own files), so that a rerun predicts at once
(fitting the 100k models takes about 40 s with muflow, 100 s with sklearnex and far longer
with libsvm). Printed: seconds per case, peer time / muflow time, and the agreement of the
labels with muflow's. scikit-learn-intelex is not a muflow dependency: run in the
benchmarks' environment (``bash benchmarks/peers_env.sh``); a missing package is reported
as skipped.

    python benchmarks/bench_predict.py                                  # a8a, one-row, load
    python benchmarks/bench_predict.py --cases a8a,100k,one-row,load --repeat 3   # libsvm: no 100k
    python benchmarks/bench_predict.py --cases 100k --libsvm-100k                 # its fit: hours
    python benchmarks/bench_predict.py --cases one-row --skip libsvm
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_a8a_single_fit import load as load_a8a  # noqa: E402  (a8a / a8a.t, 32-bit indices)

CASES = ("a8a", "100k", "one-row", "load")
CONTENDERS = ("muflow", "sklearnex", "libsvm")
SETTINGS = {"a8a": {"gamma": 0.05, "C": 1.0}, "100k": {"gamma": 0.02, "C": 1.0}}
ONE_ROW_CALLS, ONE_ROW_WARMUP, LOADS = 200, 20, 20


def data(model):
    """(X_train, y_train, X_predict) of a model's data set."""
    if model == "a8a":
        import scipy.sparse as sp

        X, y, X_test, _ = load_a8a()
        return X, y, sp.vstack([X_test] * 10, format="csr")
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=100000, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=0)
    return X, y, X


def estimator(contender, gamma, C):
    if contender == "muflow":
        import muflow

        return muflow.SVC(kernel="rbf", gamma=gamma, C=C, cache_size=2000)
    if contender == "sklearnex":
        from sklearnex.svm import SVC
    else:
        from sklearn.svm import SVC
    return SVC(kernel="rbf", gamma=gamma, C=C, cache_size=2000)


def fitted(contender, model, cache: Path):
    """The contender's fitted model of ``model`` ("a8a" or "100k"), from the cache or fitted
    and cached now; its path and the seconds the fit took (None when cached)."""
    path = cache / f"{contender}-{model}"
    path = path if contender == "muflow" else path / "model.pkl"
    if not path.exists():
        X, y, _ = data(model)
        est = estimator(contender, **SETTINGS[model])
        t0 = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - t0
        if contender == "muflow":
            import muflow

            muflow.save(est, path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(est))
        return path, fit_s
    return path, None


def read_model(contender, path):
    if contender == "muflow":
        import muflow

        return muflow.load(path)
    return pickle.loads(Path(path).read_bytes())


def child(contender, cases, cache, repeat, out, libsvm_100k=False):
    """One contender's measurements of ``cases``; a JSON record in ``out``."""
    try:
        estimator(contender, 1.0, 1.0)
    except ImportError as exc:
        Path(out).write_text(json.dumps({"skipped": f"{type(exc).__name__}: {exc}"}))
        return
    record = {"fit_s": {}}
    for case in cases:
        model_name = "100k" if case == "100k" else "a8a"
        if contender == "libsvm" and case == "100k" and not libsvm_100k:
            record[f"{case}_skipped"] = "fitting libsvm on 100,000 rows takes hours (--libsvm-100k)"
            continue
        path, fit_s = fitted(contender, model_name, cache)
        if fit_s is not None:
            record["fit_s"][model_name] = fit_s
        if case == "load":
            read_model(contender, path)  # the imports of a first load
            times = []
            for _ in range(LOADS):
                t0 = time.perf_counter()
                read_model(contender, path)
                times.append(time.perf_counter() - t0)
            record[case] = float(np.median(times))
            continue
        est = read_model(contender, path)
        _, _, X = data(model_name)
        if case == "one-row":
            rows = X[:ONE_ROW_CALLS + ONE_ROW_WARMUP].toarray()
            times = []
            for i, row in enumerate(rows):
                t0 = time.perf_counter()
                est.predict(row[None, :])
                if i >= ONE_ROW_WARMUP:
                    times.append(time.perf_counter() - t0)
            record[case] = float(np.median(times))
            continue
        est.predict(X[:100])  # warm-up: one-off preparation, compiled code, thread pools
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            labels = est.predict(X)
            times.append(time.perf_counter() - t0)
        record[case] = float(np.median(times))
        record[f"{case}_runs"] = times
        np.save(Path(out).with_suffix(f".{case}.npy"), np.asarray(labels))
    Path(out).write_text(json.dumps(record))


def run_child(contender, cases, cache, repeat, out, libsvm_100k=False):
    proc = subprocess.run([sys.executable, __file__, "--child", contender, "--cases", ",".join(cases),
                           "--cache", str(cache), "--repeat", str(repeat), "--out", str(out)]
                          + (["--libsvm-100k"] if libsvm_100k else []), capture_output=True, text=True)
    if proc.returncode != 0 or not out.exists():
        return {"skipped": f"failed: {proc.stderr.strip()[-600:]}"}
    return json.loads(out.read_text())


def describe(case):
    return {"a8a": "a8a.t x 10 (98,650 rows), predict", "100k": "100,000 rows (d=50), predict",
            "one-row": f"one row, median of {ONE_ROW_CALLS} calls",
            "load": f"load the a8a model, median of {LOADS}"}[case]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="a8a,one-row,load",
                        help=f"comma-separated, from {', '.join(CASES)} (default: a8a,one-row,load)")
    parser.add_argument("--skip", default="", help="comma-separated contenders to leave out")
    parser.add_argument("--repeat", type=int, default=1,
                        help="timed batch predictions per case; the median is reported (default: 1)")
    parser.add_argument("--cache", default=str(Path(__file__).resolve().parent / "out" / "predict-models"),
                        help="directory of the fitted models, reused by later runs")
    parser.add_argument("--libsvm-100k", action="store_true",
                        help="fit and run libsvm on the 100k case too (its fit takes hours)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    cache = Path(args.cache)
    if args.child:
        return child(args.child, cases, cache, max(1, args.repeat), args.out, args.libsvm_100k)
    cache.mkdir(parents=True, exist_ok=True)
    contenders = [c for c in CONTENDERS if c not in set(args.skip.split(","))]
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; python {platform.python_version()}; models cached in {cache}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for contender in contenders:
            out = Path(tmp) / f"{contender}.json"
            results[contender] = run_child(contender, cases, cache, max(1, args.repeat), out,
                                           args.libsvm_100k)
            rec = results[contender]
            fits = ", ".join(f"{m} {s:.1f} s" for m, s in rec.get("fit_s", {}).items())
            print(f"  {contender}: " + (rec["skipped"] if "skipped" in rec else "done")
                  + (f" (fitted now: {fits})" if fits else ""), flush=True)
            for case in ("a8a", "100k"):
                labels = out.with_suffix(f".{case}.npy")
                if labels.exists():
                    rec[f"{case}_labels"] = np.load(labels)
    base = results.get("muflow", {})
    print(f"\n{'case':<42} {'contender':<10} {'time':>11} {'x muflow':>9} {'labels = muflow':>16}")
    for case in cases:
        for contender in contenders:
            rec = results[contender]
            if "skipped" in rec or case not in rec:
                why = rec.get("skipped", rec.get(f"{case}_skipped", ""))
                print(f"{describe(case):<42} {contender:<10} skipped {why}")
                continue
            seconds = rec[case]
            shown = f"{seconds * 1e3:8.3f} ms" if seconds < 1 else f"{seconds:9.3f} s "
            ratio = seconds / base[case] if case in base else float("nan")
            agree = ""
            if f"{case}_labels" in rec and f"{case}_labels" in base:
                agree = f"{np.mean(rec[f'{case}_labels'] == base[f'{case}_labels']):.5f}"
            print(f"{describe(case):<42} {contender:<10} {shown:>11} {ratio:9.2f} {agree:>16}")


if __name__ == "__main__":
    main()
