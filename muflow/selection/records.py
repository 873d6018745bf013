"""What the sweep passes between its stages, as typed records.

- :class:`KernelSolve`: every (C, fold, class) column of one Gram solved (a solve path's
  output, :mod:`muflow.selection.kernel_solve`), with the decision values of every column;
- :class:`Refit`: the best C of a kernel setting solved on all samples;
- :class:`ConfigurationRow`: one configuration's cross-validation scores (a row of
  ``results.csv``);
- :class:`KernelRecord`: what a finished kernel setting leaves in the run directory
  (:mod:`muflow.selection.rundir`) and what a resumed sweep reads back;
- :class:`SweepResult`: what the whole sweep returns.

``to_dict`` / ``from_dict`` give the plain-JSON form the run directory stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from muflow.kernels import Kernel
from muflow.selection.grid import PARAM_ORDER


@dataclass
class KernelSolve:
    """All columns of one Gram: column ``(c * folds + f) * P + p`` is C index c, fold f,
    binary problem p (:func:`muflow.selection.kernel_solve.columns`).

    Attributes
    ----------
    path, solver : str
        The solve path taken and the registered solver.
    solve_seconds : float
        Wall time of all solves.
    decision : ndarray of shape (n_samples, n_columns)
        ``K @ (y * alpha) + b``: every column's decision values, at least at the held-out
        samples of its fold (:func:`muflow.subproblems.decision_values`).
    alpha : ndarray of shape (n_samples, n_columns)
    bias : ndarray of shape (n_columns,)
    n_problems : int
        P: binary problems per (C, fold): 1 for two classes, else k(k-1)/2 one-vs-one pairs.
    per_c : int
        Columns per C value: folds * P.
    n_iter, seconds, stopped : ndarray of shape (n_C,)
        Per C: solver iterations (the most over its solve calls) in the unit of
        :class:`muflow.SVC`'s ``n_iter_`` (:func:`muflow.solvers.registry.svc_iterations`:
        SMO's pair steps), seconds, and whether successive halving stopped it.
    curves : list of ndarray
        Per C: the objective curve of fold 0's columns.
    kkt_violation, converged : ndarray of shape (n_C,)
        Per C: the worst KKT violation over its columns, and whether it is at most ``tol``
        (every fold solve reached tol: :mod:`muflow.selection.convergence`).
    products : ndarray of shape (n_samples, n_columns), optional
        ``K @ (y * alpha)`` of every column where known without a product (NaN elsewhere;
        :func:`muflow.selection.kernel_solve.known_products`), None where the solver kept
        no gradient.
    """

    path: str
    solver: str
    solve_seconds: float
    decision: np.ndarray | None
    alpha: np.ndarray
    bias: np.ndarray
    n_problems: int
    per_c: int
    n_iter: np.ndarray
    seconds: np.ndarray
    stopped: np.ndarray
    curves: list
    kkt_violation: np.ndarray | None = None
    converged: np.ndarray | None = None
    products: np.ndarray | None = None

    def block(self, c: int) -> slice:
        """The columns of C index ``c``."""
        return slice(c * self.per_c, (c + 1) * self.per_c)

    def fold_columns(self, c: int, f: int) -> slice:
        """The P columns of (C index ``c``, fold ``f``)."""
        start = c * self.per_c + f * self.n_problems
        return slice(start, start + self.n_problems)


@dataclass
class Refit:
    """One configuration solved on all samples (:func:`muflow.selection.kernel_solve.refit`)."""

    c_index: int = -1
    alpha: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    bias: np.ndarray = field(default_factory=lambda: np.zeros(0))
    kkt_violation: np.ndarray = field(default_factory=lambda: np.zeros(0))
    n_iter: int = 0
    curve: np.ndarray = field(default_factory=lambda: np.zeros((1, 0)))
    seconds: float = 0.0
    #: SMO's single pair steps (``timings["pair_steps"]``), which the refitted model's
    #: ``n_iter_`` counts as SVC's does; None for the other solvers.
    pair_steps: int | None = None

    @property
    def done(self) -> bool:
        """False for a setting that was not refitted (an earlier one is better)."""
        return self.c_index >= 0


@dataclass
class ConfigurationRow:
    """One configuration's cross-validation result: a row of ``results.csv``.

    ``gamma``, ``degree`` and ``coef0`` are None where the kernel does not read them (an
    empty cell in the CSV). Accuracies are over the held-out samples of each fold; the
    std is the population standard deviation, as scikit-learn's ``std_test_score``.
    ``converged``: every fold solve reached ``tol``; ``kkt_violation``: the worst of them
    (:mod:`muflow.selection.convergence`).
    """

    kernel: str
    gamma: float | str | None
    degree: int | None
    coef0: float | None
    C: float
    mean_cv_accuracy: float
    std_cv_accuracy: float
    n_iter: int
    n_support: float
    time_s: float
    stopped_early: bool
    solver: str
    path: str
    split_accuracies: tuple = ()
    finished: bool = True  # False: cut or never started at the sweep's time_limit
    converged: bool = True
    kkt_violation: float = 0.0

    @property
    def params(self) -> dict:
        """The configuration as :class:`muflow.SVC` keyword arguments."""
        out = {"kernel": self.kernel}
        out.update({k: getattr(self, k) for k in PARAM_ORDER if getattr(self, k) is not None})
        out["C"] = self.C
        return out

    def to_dict(self) -> dict:
        """The row as ``results.csv`` and the run directory hold it (``""`` for None,
        ``split<f>_accuracy`` per fold)."""
        out = {"kernel": self.kernel}
        out.update({k: "" if getattr(self, k) is None else getattr(self, k) for k in PARAM_ORDER})
        out.update(C=self.C, mean_cv_accuracy=self.mean_cv_accuracy,
                   std_cv_accuracy=self.std_cv_accuracy, n_iter=self.n_iter,
                   n_support=self.n_support, time_s=self.time_s,
                   stopped_early=self.stopped_early, solver=self.solver, path=self.path,
                   finished=self.finished, converged=self.converged,
                   kkt_violation=self.kkt_violation)
        out.update({f"split{f}_accuracy": a for f, a in enumerate(self.split_accuracies)})
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "ConfigurationRow":
        splits = []
        while f"split{len(splits)}_accuracy" in d:
            splits.append(float(d[f"split{len(splits)}_accuracy"]))
        params = {k: None if d.get(k, "") == "" else d[k] for k in PARAM_ORDER}
        return cls(kernel=d["kernel"], **params, C=float(d["C"]),
                   mean_cv_accuracy=float(d["mean_cv_accuracy"]),
                   std_cv_accuracy=float(d["std_cv_accuracy"]), n_iter=int(d["n_iter"]),
                   n_support=float(d["n_support"]), time_s=float(d["time_s"]),
                   stopped_early=bool(d["stopped_early"]), solver=d["solver"], path=d["path"],
                   split_accuracies=tuple(splits),
                   finished=_flag(d.get("finished", True)), converged=_flag(d.get("converged", True)),
                   kkt_violation=float(d.get("kkt_violation", 0.0)))


def _flag(value) -> bool:
    """A boolean as JSON or the CSV holds it."""
    return str(value) not in ("False", "false", "0")


@dataclass
class KernelRecord:
    """A finished kernel setting: its rows, its refit (when it was the best so far) and
    the curves the convergence plot draws."""

    setting: dict
    rows: list
    kernel: Kernel
    solver: str
    path: str
    solve_seconds: float
    refit: Refit
    curves: list
    #: where its kernel values came from, a path of :func:`muflow.routing.plan_kernel`:
    #: "stored" (K in this process), "rows" (computed on demand in this process),
    #: "partitioned" (X on the workers) or "cluster-store" (the Dask Gram operator);
    #: records written before the plan say "cluster" for either of the last two
    gram: str = "stored"
    #: why, in one sentence (the plan's reason; "" in records written before it)
    reason: str = ""

    def info(self) -> dict:
        """The JSON part (``kernel.json``); the arrays go to ``arrays.npz``."""
        return {"setting": self.setting, "rows": [r.to_dict() for r in self.rows],
                "kernel": self.kernel.to_dict(), "solver": self.solver, "path": self.path,
                "solve_seconds": self.solve_seconds, "refit_C_index": self.refit.c_index,
                "refit_n_iter": self.refit.n_iter, "refit_seconds": self.refit.seconds,
                "refit_pair_steps": self.refit.pair_steps, "gram": self.gram,
                "reason": self.reason}

    def arrays(self) -> dict:
        """The arrays part (``arrays.npz``); curves padded to one length with their
        final value, shape (n_C, length, P)."""
        curves = [np.asarray(c) for c in self.curves]
        length = max(len(c) for c in curves)
        padded = np.stack([np.vstack([c, np.repeat(c[-1:], length - len(c), axis=0)]) for c in curves])
        return {"alpha_full": self.refit.alpha, "bias_full": self.refit.bias,
                "viol_full": self.refit.kkt_violation, "refit_curve": self.refit.curve,
                "curves": padded, "curve_lengths": np.array([len(c) for c in curves])}

    @classmethod
    def from_saved(cls, info: dict, arrays: dict) -> "KernelRecord":
        """The inverse of :meth:`info` and :meth:`arrays`."""
        lengths, padded = arrays["curve_lengths"], arrays["curves"]
        refit = Refit(c_index=int(info["refit_C_index"]), alpha=arrays["alpha_full"],
                      bias=arrays["bias_full"], kkt_violation=arrays["viol_full"],
                      n_iter=int(info["refit_n_iter"]), curve=arrays["refit_curve"],
                      seconds=float(info["refit_seconds"]),
                      pair_steps=info.get("refit_pair_steps"))
        return cls(setting=info["setting"], rows=[ConfigurationRow.from_dict(r) for r in info["rows"]],
                   kernel=Kernel.from_dict(info["kernel"]), solver=info["solver"], path=info["path"],
                   solve_seconds=float(info["solve_seconds"]), refit=refit,
                   curves=[padded[c, :lengths[c]] for c in range(len(lengths))],
                   gram=info.get("gram", "stored"), reason=info.get("reason", ""))


@dataclass
class SweepResult:
    """What :func:`muflow.selection.run_sweep` returns.

    Attributes
    ----------
    table : list of ConfigurationRow
        One row per configuration (the rows of ``results.csv``), in sweep order.
    best : dict
        The best configuration (the content of ``best.json``).
    best_model : muflow.SVC
        Fitted on all training data (the refit of the best configuration).
    paths : dict of str -> Path
        ``results``, ``best``, ``best_model``, ``test_metrics`` (with a test set), one
        ``heatmap_<kernel>`` per kernel and ``convergence``.
    timings : dict
        Seconds: ``gram`` (Gram builds), ``solve`` (solver iterations of the folds),
        ``"solve C=<C>"`` (the same, by C value: :func:`muflow.selection.sweep.solve_key`),
        ``refit`` (the best configurations refitted on all rows), ``overhead`` (everything
        else: validation, scoring, outputs, plots), ``total``.
    test_metrics : dict or None
    path_report : dict
        Per kernel setting where K came from (``gram``: a path of
        :func:`muflow.routing.plan_kernel`, "stored", "rows", "partitioned" or
        "cluster-store") and why (``reason``), the path and solver used and its solve
        seconds; with
        ``path="compare"`` also both paths' times on the first setting.
    counts : dict
        ``grams_built``, ``kernels_solved``, ``kernels_resumed``.
    """

    table: list
    best: dict
    best_model: object
    paths: dict
    timings: dict
    test_metrics: dict | None = None
    path_report: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
