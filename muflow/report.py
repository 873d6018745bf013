"""Tables and plots for people who would rather look than read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from muflow.atomic import atomic_path


def plot_objective_curves(curves, path, *, labels=None, title="dual objective", log_x=True):
    """Plot F(alpha) - min F per column against iterations (log-log) into a PNG file.

    Parameters
    ----------
    curves : ndarray of shape (n_iter + 1, m) or dict of label -> 1-D array
    path : str or Path
        The PNG file, written atomically (:func:`muflow.atomic.atomic_path`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if isinstance(curves, dict):
        labels, series = list(curves), [np.asarray(v, dtype=float) for v in curves.values()]
    else:
        arr = np.asarray(curves, dtype=float)
        arr = arr[:, None] if arr.ndim == 1 else arr
        series = [arr[:, j] for j in range(arr.shape[1])]
        labels = labels or [f"problem {j}" for j in range(len(series))]
    best = min(float(np.min(s)) for s in series)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, s in zip(labels, series):
        gap = np.maximum(s - best, 1e-16)
        at = _plotted_points(len(s), log_x)
        ax.plot(at + 1, gap[at], label=label)
    ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("F(alpha) - min F")
    ax.set_title(title)
    if len(series) <= 10:
        ax.legend()
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path, suffix=path.suffix) as tmp:  # a crashed run leaves no half PNG
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    collect_drawing_cycles()
    return path


def collect_drawing_cycles() -> None:
    """Free the reference cycles that drawing leaves (one full pass of the cyclic collector,
    a fraction of a second). Matplotlib's mathtext parser (pyparsing, for the log axes' tick
    labels) raises and catches exceptions whose tracebacks hold their frames; a frame holds
    its caller's, so every frame of the stack that drew stays alive with its locals (a
    sweep's labels, folds and model, the run stage's data) until the collector's next full
    pass, which in a process of many long-lived objects comes rarely (issue 39: megabytes of
    a sweep still held in the stages after it)."""
    import gc

    gc.collect()


def _plotted_points(n, log_x, most=4000):
    """Indices of a curve worth drawing: all of a short one; of a long one (SMO records
    F after each of 10^5 steps) ``most`` points spread evenly on the plot's x axis, the
    first and last included. Drawing every point costs time in proportion to the points
    and shows nothing more at 600 pixels wide."""
    if n <= most:
        return np.arange(n)
    spread = np.geomspace(1, n, most) if log_x else np.linspace(1, n, most)
    return np.unique(np.concatenate([np.rint(spread).astype(np.int64) - 1, [0, n - 1]]))
