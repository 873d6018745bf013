"""The simulation of input-space-margin.txt, section 4, with muflow.InputMarginSVC.

Per run: 20 training and 1000 test points; each class is a mixture of 3 Gaussians with
centres uniform on [0, 1)^2 and variance 0.2^2 (10 / 500 points per class); Gaussian kernel
with sigma^2 = 1; Euclidean metric; hard margin; 5 steps, the best kept by estimated margin.
Both the full Algorithm 1 and the simplified algorithm of section 6 are run on every data set.

Prints, per method: the margin ratios (new / original SVM), the runs with no improvement,
the test-error ratios; saves a figure like the paper's Fig. 2-5 to benchmarks/out/.

The paper reports, for Algorithm 1 over 100 runs: no improvement in 4 runs, margin ratios
from 1.00 to 27.9, test-error ratios in [0.40, 1.37].

    python benchmarks/bench_input_margin_simulation.py            # 100 runs
    python benchmarks/bench_input_margin_simulation.py --runs 10  # quick
"""

from __future__ import annotations

import argparse
import time
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


def one_run(seed):
    (X, y), (Xt, yt) = make_run(seed)
    out = {}
    for method in METHODS:
        model = InputMarginSVC("rbf", gamma=gamma_from_sigma(SIGMA_KERNEL), C=float("inf"),
                               method=method, n_steps=N_STEPS).fit(X, y)
        err_new = float(np.mean(model.predict(Xt) != yt))
        err_old = float(np.mean(model.svm_.predict(Xt) != yt))
        out[method] = dict(margin_old=model.initial_margin_, margin_new=model.input_margin_,
                           err_old=err_old, err_new=err_new, best_step=model.best_step_, model=model)
    return (X, y), out


def summarise(results, method):
    m_old = np.array([r[method]["margin_old"] for r in results])
    m_new = np.array([r[method]["margin_new"] for r in results])
    e_old = np.array([r[method]["err_old"] for r in results])
    e_new = np.array([r[method]["err_new"] for r in results])
    ratio = m_new / m_old
    improved = ratio > 1.0 + 1e-9
    defined = e_old > 0
    err_ratio = e_new[defined] / e_old[defined]
    q = lambda v: np.percentile(v, [0, 25, 50, 75, 100])  # noqa: E731
    lines = [
        f"{method}:",
        f"  runs with no margin improvement : {int((~improved).sum())} of {len(results)}",
        "  margin ratio new/original       : min {:.2f}  q25 {:.2f}  median {:.2f}  q75 {:.2f}  max {:.2f}".format(*q(ratio)),
        "  test-error ratio new/original   : min {:.2f}  q25 {:.2f}  median {:.2f}  q75 {:.2f}  max {:.2f}"
        "  ({} runs; {} with original error 0 left out)".format(*q(err_ratio), defined.sum(), (~defined).sum()),
        f"  mean test error original {e_old.mean():.4f}  new {e_new.mean():.4f};"
        f"  runs better {int((e_new < e_old).sum())}, equal {int((e_new == e_old).sum())}, worse {int((e_new > e_old).sum())}",
        f"  best step chosen: {np.bincount([r[method]['best_step'] for r in results], minlength=N_STEPS + 1).tolist()} (steps 0..{N_STEPS})",
    ]
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
    print("paper (Algorithm 1): no improvement in 4 of 100; margin ratios 1.00 to 27.9; "
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
    ratios = np.array([r["full"]["margin_new"] / r["full"]["margin_old"] for r in results])
    pick = int(np.argmax(np.where(ratios < 5, ratios, 0)))
    X, y = data[pick]
    model = results[pick]["full"]["model"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 10))
    boundary_panel(axes[0, 0], model, X, y, f"run {pick}: original SVM", svm=True)
    boundary_panel(axes[0, 1], model, X, y, f"run {pick}: Algorithm 1, {N_STEPS} steps")
    for method, marker in zip(METHODS, ("o", "^")):
        m_old, m_new, e_old, e_new = summaries[method]
        axes[1, 0].loglog(m_old, m_new, marker, mfc="none", label=method)
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
    axes[1, 0].set_title("margins over runs (Fig. 4)")
    axes[1, 1].set_title("test errors over runs (Fig. 5)")
    axes[0, 0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "input_margin_simulation.png"
    fig.savefig(path, dpi=110)
    print(f"figure: {path.resolve()}")


if __name__ == "__main__":
    main()
