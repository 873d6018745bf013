"""One-vs-one against one-vs-rest on USPS digits: the cost of the batch of binary problems.

USPS zip.test (2007 x 256, 10 digits), RBF kernel (gamma="scale") and linear, C = 1 and 10,
solver smo (what SVC(solver="auto") takes with the exact intercept). One Gram is built and
shared; then, on it,

- the one-vs-one batch: the 45 pair columns, samples outside a pair pinned at alpha = 0
  (:func:`muflow.multiclass.binary_problems`, libsvm's layout);
- the one-vs-rest batch: the 10 class-against-the-rest columns,

are solved with the same solver and tol, each ``--repeat`` times, and the median seconds of
each and their ratio printed (issue 18: the one-vs-one batch costs at most 1.3x the
one-vs-rest batch). Whole fits, ``SVC(multiclass="ovo")`` against ``"ovr"`` (Gram
included), and scikit-learn's SVC (libsvm, one-vs-one) are timed alongside, with the test
accuracy of each on a stratified 30 % split.

Usage: python benchmarks/bench_ovo_usps.py [--repeat 5]; the log goes to
benchmarks/out/bench_ovo_usps.log.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
OUT = Path(__file__).resolve().parent / "out"


def load_usps():
    # one line carries an extra trailing field: keep the label and the 256 pixels
    rows = [line.split()[:257] for line in (DATA / "zip.test").read_text().splitlines() if line.strip()]
    M = np.array(rows, dtype=np.float64)
    return M[:, 1:], M[:, 0].astype(int)


def median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), times, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from sklearn.model_selection import train_test_split
    from sklearn.svm import SVC as LibsvmSVC

    import muflow
    from muflow.backends import gram_operator
    from muflow.multiclass import binary_problems
    from muflow.solvers import DualProblem
    from muflow.solvers.registry import SOLVERS

    X, y = load_usps()
    classes, y_enc = np.unique(y, return_inverse=True)
    k = len(classes)
    lines = [f"USPS zip.test: n={len(y)}, d={X.shape[1]}, {k} classes; solver smo, tol 1e-3, "
             f"median of {args.repeat} runs; numpy {np.__version__}"]
    smo = SOLVERS["smo"]
    ratios = []
    for kernel in ("rbf", "linear"):
        for C in (1.0, 10.0):
            kern = muflow.SVC(kernel=kernel)._kernel_for(X)
            operator = gram_operator(X, kern, gram="stored")
            row = []
            for layout in ("ovo", "ovr"):
                Y, member = binary_problems(y_enc, k, layout)

                def solve():
                    problem = DualProblem(operator, Y, upper=C * member, equality=True)
                    return smo.solve(problem, tol=1e-3, max_iter=10**9)

                solve()  # compiled loops loaded, row cache warm: time the solve alone
                med, times, sol = median_seconds(solve, args.repeat)
                row.append(med)
                lines.append(f"  {kernel:6s} C={C:<4g} {layout}: {Y.shape[1]:2d} columns, "
                             f"{med:.3f} s (runs {', '.join(f'{t:.3f}' for t in times)}), pair steps "
                             f"{sol.timings['pair_steps']} (most of one column), converged "
                             f"{bool(sol.converged.all())}")
            ratios.append(row[0] / row[1])
            lines.append(f"  {kernel:6s} C={C:<4g} one-vs-one / one-vs-rest batch: {row[0] / row[1]:.2f}x")
            operator.close()

    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    lines.append(f"whole fits on {len(y_train)} training samples (Gram included), test accuracy "
                 f"on {len(y_test)}:")
    for kernel in ("rbf", "linear"):
        fits = {"muflow ovo": lambda: muflow.SVC(kernel=kernel).fit(X_train, y_train),
                "muflow ovr": lambda: muflow.SVC(kernel=kernel, multiclass="ovr").fit(X_train, y_train),
                "scikit-learn (libsvm, ovo)": lambda: LibsvmSVC(kernel=kernel).fit(X_train, y_train)}
        for name, fit in fits.items():
            fit()
            med, _, model = median_seconds(fit, args.repeat)
            lines.append(f"  {kernel:6s} {name:27s} {med:.3f} s, test accuracy "
                         f"{model.score(X_test, y_test):.4f}")
    lines.append(f"largest one-vs-one / one-vs-rest batch ratio: {max(ratios):.2f}x "
                 f"({'within' if max(ratios) <= 1.3 else 'ABOVE'} 1.3x)")
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_ovo_usps.log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
