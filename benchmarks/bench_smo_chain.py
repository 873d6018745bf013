"""One fold of the a8a sweep, C by C: muflow's SMO continuation chain against libsvm.

The sweep's costliest chain (``bench_sweep_a8a.py``: gamma = 0.05, C in {0.01, ..., 100}),
fold 0 of the same 5 stratified folds. muflow solves it as the sweep does: one in-memory
float32 Gram of all 22,696 rows, the fold's training samples given bounds C (the others 0),
each C warm-started from the previous one scaled by C / C_prev, BLAS on one thread. libsvm
(scikit-learn's SVC, ``cache_size=1000``) fits the fold's training rows for each C from
scratch, as GridSearchCV does. Per C: seconds, pair steps (libsvm's ``n_iter_``), the dual
objective of each solution on muflow's K and its relative difference, and the ratio.

Run: python benchmarks/bench_smo_chain.py [--gamma 0.05] [--fold 0] [--skip-libsvm]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_sweep_a8a import C_VALUES, FOLDS, SEED, load  # noqa: E402


def dual_objective(operator, y, alpha):
    """0.5 a' Q a - sum(a), Q = diag(y) K diag(y), on muflow's K."""
    v = (y * alpha)[:, None]
    return float(0.5 * v[:, 0] @ operator.matmul(v)[:, 0] - alpha.sum())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gamma", type=float, default=0.05)
    p.add_argument("--fold", type=int, default=0)
    p.add_argument("--tol", type=float, default=1e-3)
    p.add_argument("--skip-libsvm", action="store_true")
    args = p.parse_args()

    from sklearn.model_selection import StratifiedKFold

    from muflow.backends import gram_operator
    from muflow.threads import blas_single_threaded
    from muflow.kernels import kernel_from_setting
    from muflow.solvers import DualProblem
    from muflow.solvers.registry import choose_solver

    X, y_raw = load(0)
    y = np.where(y_raw > 0, 1.0, -1.0)
    n = len(y)
    splits = list(StratifiedKFold(FOLDS, shuffle=True, random_state=SEED).split(np.zeros(n), y))
    train = np.zeros(n, dtype=bool)
    train[splits[args.fold][0]] = True
    kernel = kernel_from_setting({"kernel": "rbf", "gamma": args.gamma}, X, intercept="exact")
    t = time.perf_counter()
    operator = gram_operator(X, kernel)
    print(f"a8a fold {args.fold}: {train.sum()} training rows of {n}; rbf gamma={args.gamma}; "
          f"tol={args.tol}; muflow's float32 Gram of all rows {time.perf_counter() - t:.2f} s "
          f"(not counted below)")
    smo = choose_solver("smo", intercept="exact", kernel_nonnegative=True)
    # compiled once before timing (a fresh environment's first call compiles for seconds)
    smo.solve(DualProblem(operator, y[:, None], np.where(train, 1e-3, 0.0)[:, None],
                          equality=True), tol=args.tol, max_iter=1)

    print(f"{'C':>6} | {'muflow s':>8} {'steps':>8} | {'libsvm s':>8} {'steps':>8} | "
          f"{'ratio':>6} | objective rel. diff")
    init = None
    total_mu = total_lib = 0.0
    for k, C in enumerate(C_VALUES):
        problem = DualProblem(operator, y[:, None], np.where(train, C, 0.0)[:, None], equality=True)
        with blas_single_threaded():
            t = time.perf_counter()
            sol = smo.solve(problem, init=init, tol=args.tol, max_iter=10_000)
            t_mu = time.perf_counter() - t
        total_mu += t_mu
        alpha = sol.alpha[:, 0]
        if k + 1 < len(C_VALUES):
            init = (sol.alpha * (C_VALUES[k + 1] / C), sol.bias)
        line = f"{C:>6g} | {t_mu:8.2f} {sol.timings['pair_steps']:8d} |"
        if args.skip_libsvm:
            print(line)
            continue
        from sklearn.svm import SVC

        t = time.perf_counter()
        ref = SVC(kernel="rbf", gamma=args.gamma, C=C, tol=args.tol, cache_size=1000).fit(
            X[train], y[train])
        t_lib = time.perf_counter() - t
        total_lib += t_lib
        a_ref = np.zeros(n)
        coef = ref.dual_coef_.toarray() if hasattr(ref.dual_coef_, "toarray") else ref.dual_coef_
        a_ref[np.flatnonzero(train)[ref.support_]] = np.abs(coef[0])  # sparse X: sparse coef
        f_mu, f_ref = dual_objective(operator, y, alpha), dual_objective(operator, y, a_ref)
        print(f"{line} {t_lib:8.2f} {int(ref.n_iter_[0]):8d} | {t_lib / t_mu:5.1f}x | "
              f"{(f_mu - f_ref) / abs(f_ref):+.1e}")
    if args.skip_libsvm:
        print(f"chain total: muflow {total_mu:.2f} s")
    else:
        print(f"chain total: muflow {total_mu:.2f} s, libsvm {total_lib:.2f} s, "
              f"ratio {total_lib / total_mu:.1f}x")


if __name__ == "__main__":
    main()
