"""What a person watches and looks at: the progress bar and the sweep's plots.

- heatmaps of mean CV accuracy, C x kernel parameters, one per kernel;
- the convergence of the best five configurations (fold 1's objective curves).

Both are written atomically (:func:`muflow.atomic.atomic_path`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from muflow.atomic import atomic_path
from muflow.selection.grid import setting_label


def write_plots(out_dir: Path, records, Cs) -> dict:
    """Heatmaps of CV accuracy (C x kernel parameters, one per kernel) and convergence
    curves; returns ``{"heatmap_<kernel>": path, ..., "convergence": path}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muflow.report import plot_objective_curves

    paths = {}
    by_kernel = {}
    for rec in records:
        by_kernel.setdefault(rec.setting["kernel"], []).append(rec)
    for name, recs in by_kernel.items():
        acc = np.array([[row.mean_cv_accuracy for row in rec.rows] for rec in recs])
        labels = [setting_label(rec.setting) for rec in recs]
        fig, ax = plt.subplots(figsize=(1.2 * len(Cs) + 3, 0.5 * len(recs) + 2))
        im = ax.imshow(acc, aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(Cs)), [f"{c:g}" for c in Cs])
        ax.set_yticks(range(len(recs)), labels)
        ax.set_xlabel("C")
        ax.set_title(f"{name}: mean CV accuracy")
        for r in range(acc.shape[0]):
            for c in range(acc.shape[1]):
                ax.text(c, r, f"{acc[r, c]:.3f}", ha="center", va="center", color="w", fontsize=8)
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        target = out_dir / f"heatmap_{name}.png"
        with atomic_path(target, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
        plt.close(fig)
        paths[f"heatmap_{name}"] = target
    ranked = sorted(((-row.mean_cv_accuracy, k, c) for k, rec in enumerate(records)
                     for c, row in enumerate(rec.rows)))[:5]
    curves = {}
    for _, k, c in ranked:
        rec = records[k]
        curve = np.asarray(rec.curves[c], dtype=float)
        curve = curve[:, 0] if curve.ndim == 2 else curve
        curves[f"{setting_label(rec.setting)}, C={rec.rows[c].C:g}"] = curve - curve.min()
    # the last figure: its drawing's reference cycles and the heatmaps' are freed after it
    # (:func:`muflow.report.collect_drawing_cycles`)
    paths["convergence"] = plot_objective_curves(
        curves, out_dir / "convergence.png", title="convergence of the best configurations (fold 1)")
    return paths


class Progress:
    """A rich progress bar of configurations done and solver iterations (or nothing)."""

    def __init__(self, enabled: bool, total: int):
        self._bar = None
        if not enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[iters]}"), TimeElapsedColumn(), transient=False)
        self._bar.start()
        self._task = self._bar.add_task("configurations", total=total, iters="")
        self._iters = 0

    def describe(self, text):
        if self._bar is not None:
            self._bar.update(self._task, description=f"configurations [{text}]")

    def advance_configs(self, k):
        if self._bar is not None:
            self._bar.update(self._task, advance=k)

    def iteration_callback(self):
        """A solver callback that counts iterations on the bar (None without a bar)."""
        if self._bar is None:
            return None

        def callback(iteration, alpha, objective):
            self._iters += 1
            if self._iters % 10 == 0:
                self._bar.update(self._task, iters=f"solver iterations {self._iters}")
            return False

        return callback

    def close(self):
        if self._bar is not None:
            self._bar.stop()
