"""Linear SVM on a8a: muflow.LinearSVC (dual CD) against liblinear at the same objective.

liblinear (``sklearn.svm.LinearSVC(dual=True, loss="hinge")``) runs with its defaults
(tol=1e-4, max_iter=1000) and sets the target: its primal objective P_ref. muflow's
LinearSVC then runs for increasing epoch budgets (fixed seed, tol too small to stop early);
the first budget whose primal objective is at most P_ref (1 + 1e-6) is timed. Both
intercept modes: "none" ~ fit_intercept=False, "regularized" ~ fit_intercept=True with
intercept_scaling=1. C = 1.

Run: python benchmarks/bench_linear_cd.py
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
C = 1.0


def primal(coef, b, X, y, reg_b):
    hinge = np.maximum(0.0, 1.0 - y * (X @ coef + b))
    return 0.5 * coef @ coef + (0.5 * b * b if reg_b else 0.0) + C * hinge.sum()


def best_of(fn, repeats=3):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    from sklearn.datasets import load_svmlight_file
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC as Liblinear

    from muflow.linear import LinearSVC

    X, y = load_svmlight_file(str(DATA / "a8a"), n_features=123)
    Xt, yt = load_svmlight_file(str(DATA / "a8a.t"), n_features=123)
    X = sp.csr_matrix(X)
    X.indices = X.indices.astype(np.int32)
    X.indptr = X.indptr.astype(np.int32)
    Xt = sp.csr_matrix(Xt)
    Xt.indices = Xt.indices.astype(np.int32)
    Xt.indptr = Xt.indptr.astype(np.int32)
    yy = np.where(y > 0, 1.0, -1.0)
    LinearSVC(max_iter=2).fit(X[:50], y[:50])  # load the compiled loop once
    print(f"a8a: n={X.shape[0]}, d=123, C={C}; best of 3 runs each")
    rows = []
    for intercept, fit_intercept in (("none", False), ("regularized", True)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            t_ref, ref = best_of(lambda: Liblinear(C=C, loss="hinge", dual=True,
                                                   fit_intercept=fit_intercept,
                                                   intercept_scaling=1.0).fit(X, y))
        b_ref = float(np.ravel(ref.intercept_)[0]) if fit_intercept else 0.0
        p_ref = primal(ref.coef_[0], b_ref, X, yy, fit_intercept)
        acc_ref = ref.score(Xt, yt)
        def run(epochs):
            model = LinearSVC(C=C, intercept=intercept, tol=1e-9, max_iter=epochs, random_state=0)
            t_ours, model = best_of(lambda: model.fit(X, y))
            p_ours = primal(model.coef_[0], model.intercept_[0], X, yy, fit_intercept)
            return (epochs, t_ours, p_ours, model.score(Xt, yt)), p_ours <= p_ref * (1 + 1e-6)

        found, lo = None, 0
        for epochs in (25, 50, 100, 200, 400, 800, 1600, 3200):
            result, ok = run(epochs)
            if ok:
                found = result
                break
            lo = epochs
        note = "target objective NOT reached" if found is None else ""
        if found is None:
            found = result
        else:
            hi = found[0]
            while hi - lo > max(2, hi // 20):  # bisect the epoch budget to within 5%
                mid = (lo + hi) // 2
                result, ok = run(mid)
                if ok:
                    found, hi = result, mid
                else:
                    lo = mid
        rows.append((intercept, t_ref, p_ref, acc_ref, *found, note))
    print()
    print(f"{'intercept':12s} {'liblinear s':>11s} {'P liblinear':>12s} {'muflow s':>9s} {'epochs':>6s} "
          f"{'P muflow':>12s} {'rel diff':>9s} {'muflow/liblinear':>16s} {'acc lib':>8s} {'acc mu':>8s}")
    for intercept, t_ref, p_ref, acc_ref, ep, t, p, acc, note in rows:
        print(f"{intercept:12s} {t_ref:11.3f} {p_ref:12.4f} {t:9.3f} {ep:6d} {p:12.4f} "
              f"{(p - p_ref) / p_ref:9.1e} {t / t_ref:16.2f} {100 * acc_ref:7.2f}% {100 * acc:7.2f}% {note}")


if __name__ == "__main__":
    main()
