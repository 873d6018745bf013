"""One kernel SVM fit, muflow.SVC against its CPU peers, side by side in one run.

Contenders, each in a fresh process of its own (so that peak resident memory is its own):

- ``muflow``: ``muflow.SVC(kernel="rbf", gamma, C)`` as a user calls it, end to end (kernel
  values, solver "auto", support vectors stored);
- ``muflow_rows``: the same with ``gram="rows"`` (kernel rows on demand, the working-set
  solver), which "auto" takes when a stored K would not fit in half the free memory;
- ``sklearnex``: scikit-learn-intelex's SVC (oneDAL), the fastest CPU SVC, with
  ``cache_size=2000`` (MB);
- ``libsvm``: scikit-learn's SVC with ``cache_size=2000``;
- ``muflow_before`` (with ``--before DIR``): ``muflow`` as the checkout DIR has it, for a
  before-and-after comparison in the same run.

Data sets:

- ``a8a``: a8a / a8a.t from ../shared/data (22,696 x 123, sparse binary), RBF gamma=0.05, C=1;
- ``make100k``: ``make_classification(n_samples=100000, n_features=50, n_informative=20,
  flip_y=0.05, random_state=0)``, RBF gamma=0.02, C=1. There is no separate test set:
  its accuracy column is training accuracy on the first 10,000 rows.

Printed per contender: fit time, peak RSS of its process, test accuracy and the dual
objective ``1/2 c'Kc - sum |c|`` (c = dual_coef_, y_i alpha_i), computed here for every
contender by the same blocked float64 evaluation over its support vectors, so that the
figures compare. Ratios are peer time / muflow time.

scikit-learn-intelex is not a muflow dependency: run in the benchmarks' own environment
(``bash benchmarks/peers_env.sh``; ``. benchmarks/.venv-peers/bin/activate``). A contender
whose package is missing is reported as skipped.

    python benchmarks/bench_single_fit.py                      # both data sets, all contenders
    python benchmarks/bench_single_fit.py --data a8a --skip libsvm
    python benchmarks/bench_single_fit.py --data a8a --repeat 3    # median of 3, order rotated
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rounds import add_round_options, rotated_rounds, table_rows, timed_fit  # noqa: E402
from _rounds import run_child as run_rounds_child  # noqa: E402
from bench_a8a_single_fit import load as load_a8a  # noqa: E402  (a8a / a8a.t, 32-bit indices)

CACHE_MB = 2000
SETTINGS = {"a8a": {"gamma": 0.05, "C": 1.0}, "make100k": {"gamma": 0.02, "C": 1.0}}
CONTENDERS = ("muflow", "muflow_rows", "sklearnex", "libsvm")


def load(name):
    """(X_train, y_train, X_test, y_test) of a data set."""
    if name == "a8a":
        return load_a8a()
    if name == "make100k":
        from sklearn.datasets import make_classification

        X, y = make_classification(n_samples=100000, n_features=50, n_informative=20,
                                   flip_y=0.05, random_state=0)
        return X, y, X[:10000], y[:10000]
    raise SystemExit(f"unknown data set {name!r}; choose from {', '.join(SETTINGS)}")


def make_estimator(contender, gamma, C):
    if contender in ("muflow", "muflow_rows", "muflow_before"):
        import muflow

        params = {"kernel": "rbf", "gamma": gamma, "C": C}
        if contender == "muflow_rows":
            params["gram"] = "rows"
        if "cache_size" in muflow.SVC().get_params():
            params["cache_size"] = CACHE_MB
        return muflow.SVC(**params)
    if contender == "sklearnex":
        from sklearnex.svm import SVC
    else:
        from sklearn.svm import SVC
    return SVC(kernel="rbf", gamma=gamma, C=C, cache_size=CACHE_MB)


def child(contender, data, out):
    """Fit one contender on one data set; write what the parent reports to ``out``."""
    est, record = timed_fit(lambda: make_estimator(contender, **SETTINGS[data]), *load(data), out)
    if est is None:
        return
    coef = est.dual_coef_
    coef = coef.toarray() if hasattr(coef, "toarray") else coef  # sparse after a sparse fit
    record |= {"n_support": int(len(est.support_)),
               "support": np.asarray(est.support_).tolist(),
               "dual_coef": np.asarray(coef, dtype=np.float64).ravel().tolist()}
    if contender.startswith("muflow"):
        record["note"] = f"solver {getattr(est, 'solver_', '?')}"
    Path(out).write_text(json.dumps(record))


def dual_objective(X, support, coef, gamma, block=4096):
    """``1/2 c'K c - sum |c|`` over the support vectors, K in float64, a block of rows at a time."""
    from muflow.inmemory import block_input
    from muflow.kernels import Kernel

    kernel = Kernel("rbf", gamma=gamma)
    S = block_input(X[np.asarray(support, dtype=np.int64)])
    coef = np.asarray(coef)
    quad = 0.0
    for start in range(0, len(coef), block):
        rows = kernel.block(S[start:start + block], S)
        quad += float(coef[start:start + block] @ (rows @ coef))
    return 0.5 * quad - float(np.abs(coef).sum())


#: ``--before DIR``: the checkout whose muflow the ``muflow_before`` contender imports
BEFORE = None


def run_child(contender, data, out):
    """One contender's fit in a fresh process: its record, or ``{"skipped": why}``.
    ``muflow_before`` imports muflow from :data:`BEFORE` (an earlier checkout)."""
    import os

    env = dict(os.environ)
    if contender == "muflow_before":
        env["PYTHONPATH"] = str(BEFORE)
    return run_rounds_child(__file__, ["--child", contender, "--data", data], out, env=env)


def run(data, contenders, repeat=1):
    """Each contender ``repeat`` times, in fresh processes, the order rotated each round (the
    first process after a pause finds its memory pages cold on a virtual machine); the
    median fit time is reported, with every run's time."""
    settings = SETTINGS[data]
    print(f"\n{data}: RBF gamma={settings['gamma']} C={settings['C']}; peers with cache_size={CACHE_MB} MB; "
          f"{repeat} run(s) each, median reported")
    results, _ = rotated_rounds(contenders, repeat,
                                lambda contender, out: run_child(contender, data, out))
    Xtr = load(data)[0]
    print(f"\n{'contender':<11} {'fit (s)':>9} {'x muflow':>9} {'peak RSS':>10} {'accuracy':>9} "
          f"{'n_SV':>7} {'dual objective':>16}  runs (s); note")
    for contender, rec, ratio in table_rows(results, contenders, 11):
        objective = dual_objective(Xtr, rec["support"], rec["dual_coef"], settings["gamma"])
        runs = " ".join(f"{t:.2f}" for t in rec["fit_runs"])
        print(f"{contender:<11} {rec['fit_s']:9.2f} {ratio:9.2f} {rec['peak_rss_mb']:8.0f}MB "
              f"{rec['accuracy']:9.4f} {rec['n_support']:7d} {objective:16.6f}  {runs}; {rec.get('note', '')}")
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="a8a,make100k", help="comma-separated: a8a, make100k")
    parser.add_argument("--before", metavar="DIR",
                        help="also fit muflow as an earlier checkout DIR has it (contender "
                             "muflow_before, e.g. a git worktree of the previous release)")
    add_round_options(parser)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.data, args.out)
    skip = {s for s in args.skip.split(",") if s}
    contenders = [c for c in CONTENDERS if c not in skip]
    if args.before:
        global BEFORE
        BEFORE = Path(args.before).resolve()
        contenders.insert(1, "muflow_before")
    import platform
    import os

    print(f"machine: {platform.machine()}, {len(os.sched_getaffinity(0))} CPUs; python {platform.python_version()}")
    for data in args.data.split(","):
        run(data, contenders, repeat=max(1, args.repeat))


if __name__ == "__main__":
    main()
