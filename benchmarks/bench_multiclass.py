"""One-vs-one at scale: a multiclass kernel SVM fit, muflow.SVC against its CPU peers, side
by side in one run (issue 30).

Data: ``make_classification(n_samples=40000, n_features=40, n_informative=20, n_classes=4,
flip_y=0.05, random_state=3)``, the first 34,000 rows to train, the other 6,000 to test;
RBF gamma=0.025, C=1 (``--rows`` scales the set down, the same 85/15 split).

Contenders, each in a fresh process of its own (so that peak resident memory is its own):

- ``muflow``: ``muflow.SVC(kernel="rbf", gamma, C, cache_size=2000)`` as a user calls it
  (above 8,192 samples: kernel rows on demand, the working-set solver, each one-vs-one
  pair on rows over its own samples, :func:`muflow.routing.solves_on_own_samples`, the
  pairs side by side in forked processes of one thread each,
  :func:`muflow.routing.subproblem_processes`; its note gives the children's peak RSS,
  which the table's column, this process's, leaves out);
- ``muflow_shared``: the same with the six pairs as columns of one batch on rows over all
  n samples (the path before issue 30: rows shared by every pair through one cache), to
  show what restricting each pair to its samples buys;
- ``sklearnex``: scikit-learn-intelex's SVC (oneDAL), ``cache_size=2000`` (MB);
- ``libsvm``: scikit-learn's SVC, ``cache_size=2000``.

Printed per contender: fit time, ratio to muflow (peer time / muflow time), peak RSS of its
process, test accuracy, support vectors, the kernel rows muflow computed, and the sum over
pairs of the dual objective ``1/2 c'Kc - sum |c|`` per pair (c: the pair's y_i alpha_i, read
from ``dual_coef_`` in libsvm's layout), computed here for every contender by the same
float64 evaluation, so that the figures compare.

scikit-learn-intelex is not a muflow dependency: run in the benchmarks' own environment
(``bash benchmarks/peers_env.sh``; ``. benchmarks/.venv-peers/bin/activate``); with muflow
installed from another checkout, put this one first: ``PYTHONPATH=. python ...``. A
contender whose package is missing is reported as skipped.

    python benchmarks/bench_multiclass.py                         # every contender
    python benchmarks/bench_multiclass.py --skip libsvm,muflow_shared
    python benchmarks/bench_multiclass.py --rows 8000 --repeat 3  # smaller, median of 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rounds import (add_round_options, rotated_rounds, run_child, table_rows,  # noqa: E402
                     timed_fit)

CACHE_MB = 2000
GAMMA, C = 0.025, 1.0
TRAIN_SHARE = 0.85
CONTENDERS = ("muflow", "muflow_shared", "sklearnex", "libsvm")


def load(rows):
    """(X_train, y_train, X_test, y_test): the first 85 % of the rows to train."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=rows, n_features=40, n_informative=20, n_classes=4,
                               flip_y=0.05, random_state=3)
    cut = int(round(TRAIN_SHARE * rows))
    return X[:cut], y[:cut], X[cut:], y[cut:]


def make_estimator(contender):
    if contender in ("muflow", "muflow_shared"):
        import muflow

        if contender == "muflow_shared":
            import muflow.model

            # the pairs as columns of one batch on rows over all n samples
            muflow.model.solves_on_own_samples = lambda *args: False
        return muflow.SVC(kernel="rbf", gamma=GAMMA, C=C, cache_size=CACHE_MB)
    if contender == "sklearnex":
        from sklearnex.svm import SVC
    else:
        from sklearn.svm import SVC
    return SVC(kernel="rbf", gamma=GAMMA, C=C, cache_size=CACHE_MB)


def child(contender, rows, out):
    """Fit one contender; write what the parent reports to ``out``."""
    est, record = timed_fit(lambda: make_estimator(contender), *load(rows), out)
    if est is None:
        return
    record.update(support=np.asarray(est.support_).tolist(),
                  n_support=np.asarray(est.n_support_).tolist(),
                  dual_coef=np.asarray(est.dual_coef_, dtype=np.float64).tolist())
    if contender.startswith("muflow"):
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        record["note"] = (f"solver {est.solver_}, {est.rows_computed_:,} kernel rows computed, "
                          f"max n_iter {int(np.max(est.n_iter_))}, "
                          f"{est.timings_.get('processes', 1)} process(es)"
                          + (f", each child's peak RSS up to {children:.0f}MB" if children else ""))
    Path(out).write_text(json.dumps(record))


def pair_objectives(X, record, block=4096):
    """``1/2 c'Kc - sum |c|`` per one-vs-one pair from libsvm's ``dual_coef_`` layout, K in
    float64 over the pair's support vectors, a block of rows at a time."""
    from muflow.kernels import Kernel
    from muflow.multiclass import ovo_pairs, pair_coefficients

    support = np.asarray(record["support"], dtype=np.int64)
    W = pair_coefficients(np.asarray(record["dual_coef"]), record["n_support"])
    kernel = Kernel("rbf", gamma=GAMMA)
    out = []
    for p, _ in enumerate(ovo_pairs(len(record["n_support"]))):
        nz = np.flatnonzero(W[:, p])
        S, c = X[support[nz]], W[nz, p]
        quad = sum(float(c[s:s + block] @ (kernel.block(S[s:s + block], S) @ c))
                   for s in range(0, len(c), block))
        out.append(0.5 * quad - float(np.abs(c).sum()))
    return np.array(out)


def run(rows, contenders, repeat=1):
    """Each contender ``repeat`` times in fresh processes, the order rotated each round; the
    median fit time is reported with every run's time."""
    Xtr = load(rows)[0]
    print(f"\nmake_classification 4 classes, {rows:,} rows ({len(Xtr):,} to train) x 40; RBF "
          f"gamma={GAMMA} C={C}; peers with cache_size={CACHE_MB} MB; {repeat} run(s) each, "
          "median reported")
    results, times = rotated_rounds(contenders, repeat,
                                    lambda contender, out: run_child(
                                        __file__, ["--child", contender, "--rows", str(rows)], out))
    print(f"\n{'contender':<14} {'fit (s)':>8} {'/ muflow':>9} {'peak RSS':>10} {'accuracy':>9} "
          f"{'n_SV':>7} {'sum pair objectives':>20}  runs (s); note")
    for contender, rec, ratio in table_rows(results, contenders, 14):
        objective = float(pair_objectives(Xtr, rec).sum())
        runs = " ".join(f"{t:.2f}" for t in times[contender])
        print(f"{contender:<14} {rec['fit_s']:8.2f} {ratio:9.2f} {rec['peak_rss_mb']:8.0f}MB "
              f"{rec['accuracy']:9.4f} {len(rec['support']):7d} {objective:20.6f}  {runs}; "
              f"{rec.get('note', '')}")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=40000, help="rows generated (default 40000)")
    parser.add_argument("--only", default="", help="comma-separated contenders to run alone")
    add_round_options(parser)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.rows, args.out)
    skip = {s for s in args.skip.split(",") if s}
    only = [s for s in args.only.split(",") if s]
    contenders = [c for c in (only or CONTENDERS) if c not in skip]
    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; python {platform.python_version()}")
    run(args.rows, contenders, repeat=max(1, args.repeat))


if __name__ == "__main__":
    main()
