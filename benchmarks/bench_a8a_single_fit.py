"""One kernel SVM fit on a8a / a8a.t, muflow's solvers against scikit-learn's SVC (libsvm).

RBF gamma = 0.05, C = 1, exact intercept. The first muflow row is the estimator as a user
calls it, ``muflow.SVC(kernel="rbf", gamma=0.05, C=1).fit(X, y)``, timed end to end (Gram
build in float32 by :func:`muflow.inmemory.numpy_gram`, solver "auto", support vectors
stored). The per-solver rows build that Gram once, time it, and add it to every solver's
time. Every solver runs in this process, one after the other; the table gives time, ratio to
SVC, test accuracy, relative difference of the dual objective to libsvm's and peak memory
(resident-set growth during the fit, sampled). Multiplicative solvers, far slower on
n = 22696, run under a time cap and are reported as capped.

``cd`` and ``adatron`` have no sum constraint: they solve the "regularized" problem
(kernel + 1), a different dual, so their objective is not compared with libsvm's.

Run: python benchmarks/bench_a8a_single_fit.py [--cap SECONDS] [--only smo,hybrid]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import PeakMemory  # noqa: E402

from muflow.kernels import Kernel  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
GAMMA, C = 0.05, 1.0


def load():
    from sklearn.datasets import load_svmlight_file

    Xtr, ytr = load_svmlight_file(str(DATA / "a8a"), n_features=123)
    Xte, yte = load_svmlight_file(str(DATA / "a8a.t"), n_features=123)
    for X in (Xtr, Xte):  # libsvm's wrapper takes 32-bit sparse indices only
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int32)
    return Xtr, ytr, Xte, yte


def gram(A, B=None):
    """K(A, B) in float32 by muflow's own in-memory build (:mod:`muflow.inmemory`)."""
    from muflow.inmemory import block_input, numpy_gram

    kernel = Kernel("rbf", gamma=GAMMA)
    if B is None:
        return numpy_gram(A, kernel, dtype="float32")
    out = np.empty((A.shape[0], B.shape[0]), dtype=np.float32)
    return kernel.block_into(block_input(A), block_input(B), out)


def _libsvm_objective(svc, X, y):
    """libsvm's dual objective 1/2 a'Qa - sum a from its support vectors alone."""
    sv = svc.support_
    coef = np.asarray(svc.dual_coef_.todense() if hasattr(svc.dual_coef_, "todense") else svc.dual_coef_).ravel()
    Ks = Kernel("rbf", gamma=GAMMA).block(X[sv])
    return 0.5 * coef @ Ks @ coef - np.abs(coef).sum()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=float, default=60.0, help="time cap (s) for multiplicative solvers")
    ap.add_argument("--only", default="", help="comma-separated muflow solvers to run")
    ap.add_argument("--cache-mb", type=float, default=1024.0)
    ap.add_argument("--skip-svc", action="store_true")
    ap.add_argument("--n", type=int, default=0, help="train on the first n rows only (smoke run)")
    args = ap.parse_args(argv)

    from sklearn.svm import SVC

    from muflow.operators import DenseGram
    from muflow.solvers.problem import DualProblem
    from muflow.solvers.registry import SOLVERS

    # load every compiled loop once (numba's on-disk cache) so that no fit pays for it
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(60, 3)).astype(np.float32)
    Kz = gram(Z)
    yz = np.where(Z[:, 0] > 0, 1.0, -1.0)
    for name in ("smo", "hybrid", "m3", "m3_flipped", "munk"):
        SOLVERS[name].solve(DualProblem(DenseGram(Kz), yz, upper=C, equality=True), tol=1e-2,
                            max_iter=3, callback=None)
    for name in ("cd", "adatron"):
        SOLVERS[name].solve(DualProblem(DenseGram(Kz), yz, upper=C), tol=1e-2, max_iter=3,
                            callback=None)

    Xtr_s, ytr, Xte_s, yte = load()
    if args.n:
        Xtr_s, ytr = Xtr_s[: args.n], ytr[: args.n]
    n = len(ytr)
    print(f"a8a: n_train={n}, n_test={len(yte)}, d=123, RBF gamma={GAMMA}, C={C}, exact intercept")
    rows = []

    # -- libsvm ---------------------------------------------------------------------------
    svc = None
    if not args.skip_svc:
        with PeakMemory() as pm:
            t = time.perf_counter()
            svc = SVC(kernel="rbf", gamma=GAMMA, C=C).fit(Xtr_s, ytr)
            t_svc = time.perf_counter() - t
        acc_svc = svc.score(Xte_s, yte)
        print(f"sklearn SVC: {t_svc:.2f} s, test accuracy {100 * acc_svc:.2f}%", flush=True)
        rows.append(("sklearn SVC (libsvm)", t_svc, acc_svc, 0.0, pm.peak_mb, ""))
        try:
            from sklearnex.svm import SVC as XSVC

            with PeakMemory() as pmx:
                t = time.perf_counter()
                xsvc = XSVC(kernel="rbf", gamma=GAMMA, C=C).fit(Xtr_s, ytr)
                t_x = time.perf_counter() - t
            rows.append(("sklearnex SVC", t_x, xsvc.score(Xte_s, yte), np.nan, pmx.peak_mb, ""))
        except ImportError:
            print("sklearnex not installed: sklearnex.svm.SVC not timed")

    def predict(alpha, bias, y, kern_offset=0.0):
        sv = np.flatnonzero(alpha > 0)
        Kt = gram(Xte_s, Xtr_s[sv])
        f = Kt.astype(np.float64) @ (y[sv] * alpha[sv]) + kern_offset * (y[sv] * alpha[sv]).sum() + bias
        return np.mean(np.where(f > 0, 1.0, -1.0) == yte)

    # -- muflow.SVC end to end, as a user calls it --------------------------------------
    import muflow

    if not args.only or "SVC" in args.only.split(","):
        with PeakMemory() as pm:
            t = time.perf_counter()
            est = muflow.SVC(kernel="rbf", gamma=GAMMA, C=C).fit(Xtr_s, ytr)
            t_est = time.perf_counter() - t
        rel = np.nan
        if svc is not None:
            ref = _libsvm_objective(svc, Xtr_s, ytr)
            rel = abs(est.objective_[0] - ref) / abs(ref)
        rows.append((f"muflow.SVC() [{est.solver_}]", t_est, est.score(Xte_s, yte), rel, pm.peak_mb,
                     "end to end: Gram + solve + support vectors"))
        print(rows[-1], flush=True)
        del est

    # -- muflow: Gram build once, timed, added to every solver's time ----------------------
    with PeakMemory() as pm_gram:
        t = time.perf_counter()
        K = gram(Xtr_s)
        t_gram = time.perf_counter() - t
    print(f"Gram build (float32, {K.nbytes / 2**30:.2f} GiB): {t_gram:.2f} s", flush=True)
    op = DenseGram(K)
    y = np.where(ytr > 0, 1.0, -1.0)
    f_ref = None
    if svc is not None:
        a_ref = np.zeros(n)
        dual = svc.dual_coef_
        dual = np.asarray(dual.todense() if hasattr(dual, "todense") else dual).ravel()
        a_ref[svc.support_] = np.abs(dual)
        f_ref = DualProblem(op, y, upper=C, equality=True).objective(a_ref[:, None])[0]

    only = [s for s in args.only.split(",") if s]
    exact = ["smo", "hybrid", "m3", "m3_flipped", "munk"]
    boxed = ["cd", "adatron"]
    capped = {"m3", "m3_flipped", "munk", "musik", "seminmf"}
    for name in exact:
        if only and name not in only:
            continue
        problem = DualProblem(op, y, upper=C, equality=True)
        kw = {"cache_mb": args.cache_mb} if name in ("smo", "hybrid") else {}
        t0 = [None]

        def cap(it, alpha, obj):
            return time.perf_counter() - t0[0] > args.cap

        with PeakMemory() as pm:
            t0[0] = time.perf_counter()
            sol = SOLVERS[name].solve(problem, tol=1e-3, max_iter=100_000, callback=cap, **kw)
            t_fit = time.perf_counter() - t0[0]
        note = "" if sol.converged.all() else f"capped at {args.cap:.0f}s, kkt={sol.kkt_violation[0]:.2g}"
        rel = abs(sol.objective[0] - f_ref) / abs(f_ref) if f_ref is not None else np.nan
        rows.append((f"muflow {name}", t_gram + t_fit, predict(sol.alpha[:, 0], sol.bias[0], y), rel,
                     max(pm.peak_mb, 0) + pm_gram.peak_mb, note or f"fit {t_fit:.2f}s + gram {t_gram:.2f}s"))
        print(rows[-1], sol.timings, flush=True)
    # "regularized" solvers on K + 1 (in place: no second Gram in memory)
    if not only or any(b in only for b in boxed):
        t = time.perf_counter()
        K += 1.0
        t_off = time.perf_counter() - t
        op = DenseGram(K)
        for name in boxed:
            if only and name not in only:
                continue
            problem = DualProblem(op, y, upper=C)
            t0 = [0.0]

            def cap(it, alpha, obj):
                return time.perf_counter() - t0[0] > args.cap

            with PeakMemory() as pm:
                t0[0] = t = time.perf_counter()
                sol = SOLVERS[name].solve(problem, tol=1e-3, max_iter=100_000, callback=cap,
                                          cache_mb=args.cache_mb)
                t_fit = time.perf_counter() - t
            note = f"regularized intercept; fit {t_fit:.2f}s" + (
                "" if sol.converged.all() else f", capped at {args.cap:.0f}s, kkt={sol.kkt_violation[0]:.2g}")
            rows.append((f"muflow {name}", t_gram + t_off + t_fit, predict(sol.alpha[:, 0], 0.0, y, 1.0),
                         np.nan, pm.peak_mb + pm_gram.peak_mb, note))
            print(rows[-1], sol.timings, flush=True)

    t_svc = rows[0][1] if svc is not None else np.nan
    print()
    print(f"{'solver':26s} {'time (s)':>9s} {'SVC/this':>9s} {'test acc':>9s} {'obj rel diff':>13s} {'peak MB':>9s}  note")
    for name, tt, acc, rel, mem, note in rows:
        print(f"{name:26s} {tt:9.2f} {t_svc / tt:9.2f} {100 * acc:8.2f}% {rel:13.2e} {mem:9.0f}  {note}")


if __name__ == "__main__":
    main()
