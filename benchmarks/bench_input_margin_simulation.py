"""The simulation of input-space-margin.txt, section 4, with muflow.InputMarginSVC.

Per run: 20 training and 1000 test points; each class is a mixture of 3 Gaussians with
centres uniform on [0, 1)^2 and variance 0.2^2 (10 / 500 points per class); Gaussian kernel
with sigma^2 = 1; Euclidean metric; hard margin; 5 steps. Both the full Algorithm 1 and the
simplified algorithm of section 6 are run on every data set.

Two margins per classifier (see muflow/input_margin/_algorithm.py for why they differ):
- estimated: the algorithm's own figure, eq. (3) at the 10 iterations of eq. (12) that step 1
  of Algorithm 1 runs (``estimated_margin_history_``); the paper reports and chooses by it;
- measured: ``muflow.input_space_margin`` on the ordinary SVM (``model.svm_``) and on the
  fitted model, each projection run to convergence from the sample itself. InputMarginSVC
  keeps the step with the largest measured margin; step 0 is the SVM.

Prints, per method: the estimated margin ratios (best estimate / step 0's estimate, as the
paper), what the estimate's pick measures, the measured margin ratios (model / SVM),
improvement counts, the test-error ratios, the warnings seen; saves a figure like the
paper's Fig. 2-5 to benchmarks/out/. Run with RuntimeWarnings as errors:

    python -W error::RuntimeWarning benchmarks/bench_input_margin_simulation.py            # 100 runs
    python -W error::RuntimeWarning benchmarks/bench_input_margin_simulation.py --runs 10  # quick

The paper reports, for Algorithm 1 over 100 runs (by the estimate): no improvement in 4 runs,
margin ratios from 1.00 to 27.9, test-error ratios in [0.40, 1.37].
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from muflow.input_margin import InputMarginSVC, input_space_margin
from muflow.kernels import gamma_from_sigma

N_TRAIN_PER_CLASS = 10
N_TEST_PER_CLASS = 500
SIGMA_DATA = 0.2
SIGMA_KERNEL = 1.0
N_STEPS = 5
METHODS = ("full", "simplified")
#: Relative tolerance of "improved" and "below": margins equal to round-off are equal.
REL = 1e-9


def draw_class(rng, centres, n):
    """n points of an equal-weight mixture of spherical Gaussians at ``centres``."""
    return centres[rng.integers(0, len(centres), n)] + SIGMA_DATA * rng.standard_normal((n, 2))


def make_run(seed):
    """Training and test sets of one run (section 4)."""
    rng = np.random.default_rng(seed)
    centres = {+1: rng.random((3, 2)), -1: rng.random((3, 2))}

    def sample(n):
        X = np.vstack([draw_class(rng, centres[+1], n), draw_class(rng, centres[-1], n)])
        y = np.r_[np.ones(n), -np.ones(n)]
        return X, y

    return sample(N_TRAIN_PER_CLASS), sample(N_TEST_PER_CLASS)


def _warning_kind(w):
    text = str(w.message)
    if "QP step" in text:
        return "QP step stopped at max_iter"
    if "diverged" in text or "within reach" in text:
        return "projection found no boundary within reach"
    if "did not converge" in text:
        return "margin sample's projection did not converge"
    return f"{w.category.__name__}: {text[:60]}"


def one_run(seed):
    (X, y), (Xt, yt) = make_run(seed)
    out = {}
    for method in METHODS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)  # ConvergenceWarning; -W still rules the rest
            t0 = time.perf_counter()
            model = InputMarginSVC("rbf", gamma=gamma_from_sigma(SIGMA_KERNEL), C=float("inf"),
                                   method=method, n_steps=N_STEPS).fit(X, y)
            fit_s = time.perf_counter() - t0
            # independent measurements of both classifiers
            svm_measure = input_space_margin(model.svm_, X, y)
            model_measure = input_space_margin(model, X, y)
        est = model.estimated_margin_history_
        est_pick = int(np.argmax(est))
        out[method] = dict(
            est_old=est[0], est_new=est[est_pick], est_pick=est_pick,
            est_pick_measured=model.margin_history_[est_pick],
            meas_old=svm_measure.margin, meas_new=model_measure.margin,
            attr_gap=max(abs(model.initial_margin_ - svm_measure.margin),
                         abs(model.input_margin_ - model_measure.margin)),
            best_step=model.best_step_, fit_s=fit_s,
            err_old=float(np.mean(model.svm_.predict(Xt) != yt)),
            err_new=float(np.mean(model.predict(Xt) != yt)),
            warnings=Counter(_warning_kind(w) for w in caught), model=model)
    return (X, y), out


def _quantiles(v):
    if len(v) == 0:
        return "(none)"
    return "min {:.3f}  q25 {:.3f}  median {:.3f}  q75 {:.3f}  max {:.3f}".format(
        *np.percentile(v, [0, 25, 50, 75, 100]))


def _compare(old, new):
    """Counts of new > old, new < old (beyond round-off), and the ratios where old > 0."""
    tol = REL * np.abs(old)
    improved = new > old + tol
    below = new < old - tol
    positive = old > 0
    return improved, below, new[positive] / old[positive], positive


def summarise(results, method):
    def col(key):
        return np.array([r[method][key] for r in results])

    n = len(results)
    e_imp, _, e_ratio, e_pos = _compare(col("est_old"), col("est_new"))
    p_imp, p_below, _, _ = _compare(col("meas_old"), col("est_pick_measured"))
    m_old, m_new = col("meas_old"), col("meas_new")
    m_imp, m_below, m_ratio, m_pos = _compare(m_old, m_new)
    e_old, e_new = col("err_old"), col("err_new")
    defined = e_old > 0
    warn = sum((r[method]["warnings"] for r in results), Counter())
    lines = [
        f"{method}:",
        f"  estimated (the paper's figure)  : improved in {int(e_imp.sum())} of {n};"
        f" ratio best/step 0 {_quantiles(e_ratio)}",
        f"  estimate's pick, measured       : improved in {int(p_imp.sum())} of {n},"
        f" below the SVM in {int(p_below.sum())}",
        f"  measured (model / SVM)          : improved in {int(m_imp.sum())} of {n},"
        f" below the SVM in {int(m_below.sum())}; ratio {_quantiles(m_ratio)}",
        f"                                    ({int((~m_pos).sum())} runs with the SVM's measured"
        " margin <= 0 left out of the ratios: the hard-margin QP did not separate the classes)",
        f"  attributes vs input_space_margin: largest gap {col('attr_gap').max():.2e}"
        " (initial_margin_, input_margin_)",
        "  test-error ratio new/original   : {}  ({} runs; {} with original error 0 left out)".format(
            _quantiles(e_new[defined] / e_old[defined]), int(defined.sum()), int((~defined).sum())),
        f"  mean test error original {e_old.mean():.4f}  new {e_new.mean():.4f};"
        f"  runs better {int((e_new < e_old).sum())}, equal {int((e_new == e_old).sum())},"
        f" worse {int((e_new > e_old).sum())}",
        f"  step kept (measured): {np.bincount(col('best_step'), minlength=N_STEPS + 1).tolist()};"
        f" by the estimate: {np.bincount(col('est_pick'), minlength=N_STEPS + 1).tolist()}"
        f" (steps 0..{N_STEPS})",
        f"  fit time: mean {col('fit_s').mean():.2f} s, max {col('fit_s').max():.2f} s per fit",
        "  warnings: " + ("; ".join(f"{k}: {v}" for k, v in sorted(warn.items())) or "none"),
        "  runs where the measured margin did not improve, or the estimate would keep another step:",
    ]
    for r, res in enumerate(results):
        o = res[method]
        if o["best_step"] != o["est_pick"] or not o["meas_new"] > o["meas_old"] + REL * abs(o["meas_old"]):
            lines.append(
                f"    run {r:3d}: measured SVM {o['meas_old']:.5f}, model {o['meas_new']:.5f} (step"
                f" {o['best_step']}); the estimate keeps step {o['est_pick']}: estimated"
                f" {o['est_new']:.5f}, measured {o['est_pick_measured']:.5f}")
    return "\n".join(lines), m_old, m_new, e_old, e_new


def boundary_panel(ax, model, X, y, title, svm=False):
    xs = np.linspace(X[:, 0].min() - 0.4, X[:, 0].max() + 0.4, 200)
    ys = np.linspace(X[:, 1].min() - 0.4, X[:, 1].max() + 0.4, 200)
    gx, gy = np.meshgrid(xs, ys)
    grid = np.c_[gx.ravel(), gy.ravel()]
    if svm:
        f = model.svm_.decision_function(grid)
        res = input_space_margin(model.svm_, X, y)
        proj, margin = res.projections, res.margin
    else:
        f = model.decision_function(grid)
        proj, margin = model.projections_, model.input_margin_
    ax.contour(gx, gy, f.reshape(gx.shape), levels=[0.0], colors="k")
    ax.scatter(*X[y > 0].T, marker="o", facecolors="none", edgecolors="b", label="positive")
    ax.scatter(*X[y < 0].T, marker="x", c="r", label="negative")
    ax.scatter(*proj.T, marker="s", facecolors="none", edgecolors="g", s=25, label="projection")
    for a, b in zip(X, proj):
        ax.plot([a[0], b[0]], [a[1], b[1]], "g:", lw=0.6)
    ax.set_title(f"{title} (margin {margin:.3f})")
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    ax.set_aspect("equal")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="first seed; run r uses seed + r")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    results, data = [], []
    for r in range(args.runs):
        (X, y), out = one_run(args.seed + r)
        results.append(out)
        data.append((X, y))
    elapsed = time.perf_counter() - t0
    print(f"section 4 simulation: {args.runs} runs, {2 * N_TRAIN_PER_CLASS} training / "
          f"{2 * N_TEST_PER_CLASS} test points, sigma^2 = {SIGMA_KERNEL ** 2}, hard margin, "
          f"{N_STEPS} steps; {elapsed:.1f} s")
    print("paper (Algorithm 1, estimated): no improvement in 4 of 100; margin ratios 1.00 to 27.9; "
          "test-error ratios 0.40 to 1.37")
    summaries = {}
    for method in METHODS:
        text, *arrays = summarise(results, method)
        summaries[method] = arrays
        print(text)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # the example run: the first where Algorithm 1 improves the margin most (like Fig. 2-3)
    ratios = np.array([r["full"]["meas_new"] / r["full"]["meas_old"] if r["full"]["meas_old"] > 0 else 0.0
                       for r in results])
    pick = int(np.argmax(np.where(ratios < 5, ratios, 0)))
    X, y = data[pick]
    model = results[pick]["full"]["model"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 10))
    boundary_panel(axes[0, 0], model, X, y, f"run {pick}: original SVM", svm=True)
    boundary_panel(axes[0, 1], model, X, y, f"run {pick}: Algorithm 1, {N_STEPS} steps")
    for method, marker in zip(METHODS, ("o", "^")):
        m_old, m_new, e_old, e_new = summaries[method]
        positive = m_old > 0
        axes[1, 0].loglog(m_old[positive], m_new[positive], marker, mfc="none", label=method)
        axes[1, 1].plot(e_old, e_new, marker, mfc="none", label=method)
    for ax, name in ((axes[1, 0], "margin"), (axes[1, 1], "test error")):
        lo, hi = ax.get_xlim()
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set_xlabel(f"{name}, original SVM")
        ax.set_ylabel(f"{name}, input-space margin")
        ax.legend()
    from matplotlib.ticker import NullFormatter

    axes[1, 0].xaxis.set_minor_formatter(NullFormatter())
    axes[1, 0].yaxis.set_minor_formatter(NullFormatter())
    axes[1, 0].set_title("measured margins over runs (Fig. 4; SVM margin > 0)")
    axes[1, 1].set_title("test errors over runs (Fig. 5)")
    axes[0, 0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "input_margin_simulation.png"
    fig.savefig(path, dpi=110)
    print(f"figure: {path.resolve()}")


if __name__ == "__main__":
    main()
