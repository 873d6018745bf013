"""Model selection over kernels x kernel parameters x C x folds x classes, sharing K.

For one kernel setting (one Gram matrix K of all n samples) every (C, fold, class)
problem is a column of the dual batch (:class:`muflow.solvers.DualProblem`):

- the labels of column j are those of its binary problem (one-vs-rest for more than two
  classes, as :func:`muflow.model.binary_problems`);
- its upper bounds are ``U_ij = C_j`` for the training samples of its fold and ``0`` for
  the held-out ones, which pins them at alpha = 0: a fold is a mask, not a copy of K;
- after the folds, a kernel setting whose best C beats every earlier setting is refitted
  on all samples while its Gram is still in memory, warm-started from the mean of the fold
  solutions (a feasible point close to the answer); the best model of the sweep is the
  last of these refits, so it needs no Gram build of its own, and settings that cannot be
  the best are not refitted.

Two paths solve the batch:

- ``"batched"``: one ``solve`` call on all columns. A multiplicative solver advances every
  column with one product ``K @ V`` per iteration (m3-multiplicative-updates-large-margin.txt
  eq. (12): the update of alpha_i needs only (A+ alpha)_i and (A- alpha)_i, so m problems
  sharing A need one pass with an n x 2m right-hand side). A subset solver (SMO) works
  column by column anyway: there "batched" means independent cold solves per C.
- ``"continuation"``: C in ascending order, each C's columns warm-started from the
  solution at the previous C (feasible: 0 <= alpha <= C_prev <= C, the sum constraint is
  untouched). Subset solvers (SMO) profit most: the support set changes little between
  neighbouring C.

``path="auto"`` takes continuation for subset solvers (on a8a, 2000 and 8000 rows, it beat
cold solves by 15-20%) and the batched path for multiplicative ones; ``path="compare"`` solves the first kernel setting both ways, keeps the
faster path for the rest and reports both times in :attr:`SweepResult.path_report`.

Validation: the decision values of every column at every sample come from ONE product,
``f = K @ (y * alpha) + b`` (n x m); fold f's accuracy is read on its held-out rows (the
sign for two classes, the argmax over the one-vs-rest columns of that (C, fold)
otherwise). The CV accuracy of a configuration is the mean over folds (std: population
standard deviation, as scikit-learn's ``std_test_score``).

Successive halving (``halving=eta``, off by default): batched path only. The solve runs in
rungs of ``halving_min_iter * eta**r`` iterations (r = 0, 1, ...), each warm-started from
the previous rung. After each rung, the configurations (C values of the kernel setting)
still running are ranked by their current mean validation accuracy; the best
``ceil(k / eta)`` of the k go on, the others stop there and are reported with the accuracy
of that rung (``stopped_early`` in the table). Ties keep the smaller C. The last
configuration standing runs to convergence (or ``max_iter`` iterations in all).

Notes
-----
Memory per kernel setting: K (``8 n^2`` bytes in memory; a Dask operator keeps it on the
workers) plus ``3 * 8 * n * m`` bytes of iterates, with m = folds * classes * len(C)
(batched) or folds * classes (continuation).
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import numbers
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.kernels import KERNEL_PARAMETERS, KERNELS

#: Solvers that read rows of K (subset methods): continuation along C suits them.
SUBSET_SOLVERS = ("smo", "cd", "adatron", "hybrid")
PATHS = ("auto", "batched", "continuation", "compare")
_PARAM_ORDER = ("gamma", "degree", "coef0")
_FORMAT_VERSION = 1


# -- the grid --------------------------------------------------------------------------
@dataclass
class SweepGrid:
    """Kernels with lists of their parameters, and C values.

    Parameters
    ----------
    kernels : list of dict
        One dict per kernel: ``{"kernel": "rbf", "gamma": [0.01, 0.05]}``,
        ``{"kernel": "poly", "degree": [2, 3], "gamma": [...], "coef0": [...]}``. A parameter
        may be a scalar or a list; a parameter left out takes the :class:`muflow.SVC`
        default (gamma "scale", degree 3, coef0 0). ``gamma`` may be "scale" or "auto".
    C : list of float
        Positive penalties, shared by every kernel setting.
    """

    kernels: list
    C: list

    def validate(self) -> "SweepGrid":
        """Check the grid before any work; raise :class:`MuflowInputError` naming the fix."""
        if not isinstance(self.kernels, (list, tuple)) or not self.kernels:
            raise MuflowInputError("the sweep grid has no kernels; give at least one, e.g. "
                                   "[{'kernel': 'rbf', 'gamma': [0.01, 0.1]}]")
        C = _as_list(self.C, "C")
        if not C:
            raise MuflowInputError("the sweep grid has no C values; give at least one, e.g. C=[0.1, 1, 10]")
        for c in C:
            if isinstance(c, bool) or not isinstance(c, numbers.Real) or not (c > 0) or not math.isfinite(c):
                raise MuflowInputError(f"every C must be a positive finite number, got {c!r}")
        for spec in self.kernels:
            if not isinstance(spec, dict) or "kernel" not in spec:
                raise MuflowInputError(f"each kernel entry is a dict with a 'kernel' key, got {spec!r}")
            name = spec["kernel"]
            if name not in KERNELS or name == "precomputed":
                raise MuflowInputError(
                    f"unknown kernel {name!r} in the sweep grid; choose one of "
                    f"{', '.join(k for k in KERNELS if k != 'precomputed')}")
            allowed = KERNEL_PARAMETERS[name]
            for key, values in spec.items():
                if key == "kernel":
                    continue
                if key not in allowed:
                    takes = f"takes {', '.join(allowed)}" if allowed else "takes no parameters"
                    raise MuflowInputError(
                        f"kernel {name!r} has no parameter {key!r} (it {takes}); remove it or "
                        "put it on a kernel that reads it")
                values = _as_list(values, f"{name} {key}")
                if not values:
                    raise MuflowInputError(f"the {name} kernel's {key} list is empty")
                for v in values:
                    _check_param(name, key, v)
        return self

    def kernel_settings(self) -> list[dict]:
        """Every kernel setting as ``{"kernel": name, <param>: value, ...}`` (SVC names)."""
        out = []
        for spec in self.kernels:
            name = spec["kernel"]
            keys = [k for k in _PARAM_ORDER if k in KERNEL_PARAMETERS[name]]
            lists = [_as_list(spec.get(k, _SVC_DEFAULTS[k]), k) for k in keys]
            for combo in itertools.product(*lists):
                setting = {"kernel": name}
                for k, v in zip(keys, combo):
                    setting[k] = int(v) if k == "degree" else (v if isinstance(v, str) else float(v))
                out.append(setting)
        return out

    def configurations(self) -> list[dict]:
        """Every configuration: a kernel setting with one C, in sweep order (C ascending)."""
        return [dict(setting, C=float(c)) for setting in self.kernel_settings()
                for c in sorted(float(c) for c in _as_list(self.C, "C"))]

    def to_dict(self) -> dict:
        return {"kernels": [dict(k) for k in self.kernels], "C": [float(c) for c in _as_list(self.C, "C")]}


_SVC_DEFAULTS = {"gamma": "scale", "degree": 3, "coef0": 0.0}


def _as_list(values, name):
    if isinstance(values, (str, numbers.Number)):
        return [values]
    try:
        return list(values)
    except TypeError:
        raise MuflowInputError(f"{name} must be a number or a list of numbers, got {values!r}") from None


def _check_param(kernel, key, v):
    if key == "gamma":
        if isinstance(v, str):
            if v not in ("scale", "auto"):
                raise MuflowInputError(f"gamma must be a positive number, 'scale' or 'auto', got {v!r}")
            return
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and v > 0 and math.isfinite(v)
        if not ok:
            raise MuflowInputError(f"gamma of the {kernel} kernel must be a positive number, got {v!r}")
    elif key == "degree":
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or int(v) != v or v < 1:
            raise MuflowInputError(f"degree of the poly kernel must be a positive integer, got {v!r}")
    elif key == "coef0":
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v):
            raise MuflowInputError(f"coef0 must be a finite number, got {v!r}")


def load_grid_toml(path) -> tuple[SweepGrid, dict]:
    """Read a sweep grid and its options from a TOML file.

    The file holds a ``[sweep]`` table (or top-level keys) with ``C`` and a list of
    ``[[sweep.kernels]]`` tables; every other key is an option of :func:`run_sweep`
    (``folds``, ``seed``, ``solver``, ``path``, ``intercept``, ``tol``, ``max_iter``,
    ``halving``, ``halving_min_iter``, ``cache_dir``, ``n_jobs``)::

        [sweep]
        C = [0.01, 0.1, 1, 10, 100]
        folds = 5
        seed = 0

        [[sweep.kernels]]
        kernel = "rbf"
        gamma = [0.01, 0.05]

        [[sweep.kernels]]
        kernel = "poly"
        degree = [2, 3]
        gamma = [0.1]
        coef0 = [1.0]

    Returns
    -------
    (SweepGrid, dict of options)
    """
    import tomllib

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise MuflowInputError(f"grid file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise MuflowInputError(f"{path}: not valid TOML ({exc})") from None
    table = dict(data.get("sweep", data))
    if "kernels" not in table or "C" not in table:
        raise MuflowInputError(f"{path}: a sweep grid needs `C = [...]` and at least one "
                               "[[sweep.kernels]] table with `kernel = \"rbf\"`")
    grid = SweepGrid(kernels=list(table.pop("kernels")), C=table.pop("C"))
    known = {"folds", "seed", "solver", "path", "intercept", "tol", "max_iter", "halving",
             "halving_min_iter", "cache_dir", "n_jobs"}
    unknown = set(table) - known
    if unknown:
        raise MuflowInputError(f"{path}: unknown sweep option(s) {', '.join(sorted(unknown))}; "
                               f"known: {', '.join(sorted(known))}")
    return grid.validate(), table


# -- results ---------------------------------------------------------------------------
@dataclass
class SweepResult:
    """What :func:`run_sweep` returns.

    Attributes
    ----------
    table : list of dict
        One row per configuration (the rows of ``results.csv``).
    best : dict
        The best configuration (the content of ``best.json``).
    best_model : muflow.SVC
        Fitted on all training data (the all-samples columns of the sweep).
    paths : dict of str -> Path
        ``results``, ``best``, ``best_model``, ``test_metrics`` (with a test set), one
        ``heatmap_<kernel>`` per kernel and ``convergence``.
    timings : dict
        Seconds: ``gram`` (Gram builds), ``solve`` (solver iterations), ``overhead``
        (everything else: validation, scoring, outputs, plots), ``total``.
    test_metrics : dict or None
    path_report : dict
        Per kernel setting the path and solver used and its solve seconds; with
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


# -- the sweep -------------------------------------------------------------------------
def run_sweep(X, y, grid: SweepGrid, *, folds: int = 5, seed: int = 0, out_dir,
              X_test=None, y_test=None, solver: str = "auto", path: str = "auto",
              intercept: str = "exact", tol: float = 1e-3, max_iter: int = 10_000,
              client=None, cache_dir=None, resume: bool = False, progress: bool = True,
              halving: int | None = None, halving_min_iter: int = 10, n_jobs: int = 1,
              on_kernel_done=None) -> SweepResult:
    """Cross-validate every configuration of ``grid`` and refit the best on all data.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
    grid : SweepGrid
    folds : int, default=5
        Stratified folds: ``StratifiedKFold(folds, shuffle=True, random_state=seed)``.
    seed : int, default=0
    out_dir : str or Path
        Run directory (created). Outputs are written atomically; each kernel setting's
        results land in ``out_dir/kernels/`` as soon as it is done.
    X_test, y_test : optional
        Test set: the best model's accuracy on it goes to ``test_metrics.json``.
    solver : str, default="auto"
        A registered solver; "auto" takes what :func:`muflow.solvers.registry.choose_solver`
        picks with K in memory (SMO for the exact intercept), and a multiplicative solver
        (MUNK on a non-negative kernel, else M3) with a Dask client.
    path : {"auto", "batched", "continuation", "compare"}, default="auto"
        See the module docstring.
    intercept : {"exact", "regularized", "none"}, default="exact"
    tol : float, default=1e-3
        KKT tolerance of every column.
    max_iter : int, default=10000
        Solver budget per solve call (passes for multiplicative, sweeps for SMO).
    client : distributed.Client, optional
        Build each Gram on the cluster into the store cache and solve with the Dask
        operator (multiplicative solvers, batched path).
    cache_dir : str, optional
        Gram store cache (:mod:`muflow.gram`): each kernel's Gram is read from it when
        present and written there otherwise.
    resume : bool, default=False
        Skip the kernel settings whose results are already in ``out_dir`` (same data,
        grid and options); their Grams are not rebuilt.
    progress : bool, default=True
        A rich progress bar of configurations and solver iterations.
    halving : int, optional
        Successive-halving factor eta >= 2 (off by default); see the module docstring.
    halving_min_iter : int, default=10
        Iterations of the first halving rung.
    n_jobs : int, default=1
        Subset solvers with K in memory: solve the folds' columns in this many forked
        processes (they share K copy-on-write). Multiplicative solvers ignore it (their
        batch is one product per iteration).
    on_kernel_done : callable, optional
        ``on_kernel_done(setting, rows)`` after each kernel setting's results are saved.

    Returns
    -------
    SweepResult
    """
    t_start = time.perf_counter()
    from sklearn.utils.validation import check_X_y

    from muflow.data import check_finite
    from muflow.solvers.registry import INTERCEPTS

    grid.validate()
    if isinstance(folds, bool) or not isinstance(folds, numbers.Integral) or folds < 2:
        raise MuflowInputError(f"folds must be an integer >= 2, got {folds!r}")
    if intercept not in INTERCEPTS:
        raise MuflowInputError(f"intercept must be one of {', '.join(INTERCEPTS)}, got {intercept!r}")
    if path not in PATHS:
        raise MuflowInputError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    if not (isinstance(tol, numbers.Real) and tol > 0):
        raise MuflowInputError(f"tol must be positive, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise MuflowInputError(f"max_iter must be a positive integer, got {max_iter!r}")
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs < 1:
        raise MuflowInputError(f"n_jobs must be a positive integer, got {n_jobs!r}")
    if halving is not None:
        if isinstance(halving, bool) or not isinstance(halving, numbers.Integral) or halving < 2:
            raise MuflowInputError(f"halving (eta) must be an integer >= 2, got {halving!r}")
        if path in ("continuation", "compare"):
            raise MuflowInputError("successive halving runs on the batched path; use path='batched' or 'auto'")
    X, y = check_X_y(X, y, accept_sparse="csr", dtype=np.float64, ensure_all_finite=False)
    check_finite(X)
    classes, y_enc, counts = np.unique(y, return_inverse=True, return_counts=True)
    if len(classes) < 2:
        raise MuflowInputError(f"the data hold only one class ({str(classes[0])!r}); a sweep needs at least 2")
    if counts.min() < folds:
        raise MuflowInputError(
            f"folds={folds} but the smallest class ({str(classes[counts.argmin()])!r}) has only "
            f"{counts.min()} samples; use at most {counts.min()} folds")
    if (X_test is None) != (y_test is None):
        raise MuflowInputError("give both X_test and y_test, or neither")
    if X_test is not None:
        X_test, y_test = check_X_y(X_test, y_test, accept_sparse="csr", dtype=np.float64)
        if X_test.shape[1] != X.shape[1]:
            raise MuflowInputError(f"X_test has {X_test.shape[1]} features, X has {X.shape[1]}")
    settings = grid.kernel_settings()
    Cs = sorted(float(c) for c in grid.C)
    solvers = [_pick_solver(solver, path, s, X, intercept, client) for s in settings]

    from sklearn.model_selection import StratifiedKFold

    from muflow.model import binary_problems

    n = X.shape[0]
    splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(n), y_enc))
    masks = np.zeros((n, folds), dtype=bool)
    for f, (train, _) in enumerate(splits):
        masks[train, f] = True
    Y = binary_problems(y_enc, len(classes))

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {"format_version": _FORMAT_VERSION, "data": _data_digest(X, y), "grid": grid.to_dict(),
            "folds": int(folds), "seed": int(seed), "solver": solver, "path": path,
            "intercept": intercept, "tol": float(tol), "max_iter": int(max_iter),
            "halving": halving, "halving_min_iter": int(halving_min_iter)}
    _check_or_write_meta(out_dir, meta, resume)

    timings = {"gram": 0.0, "solve": 0.0}
    counts_out = {"grams_built": 0, "kernels_solved": 0, "kernels_resumed": 0}
    path_report = {"settings": []}
    per_kernel = []
    chosen_path = None
    bar = _Progress(progress, total=len(settings) * len(Cs))
    buffer = None
    try:
        for i, setting in enumerate(settings):
            kdir = out_dir / "kernels" / f"{i:03d}-{setting['kernel']}"
            done = _load_kernel(kdir, setting, meta) if resume else None
            if done is not None:
                counts_out["kernels_resumed"] += 1
                per_kernel.append(done)
                bar.advance_configs(len(Cs))
                continue
            info, kpath = solvers[i]
            if chosen_path is not None:
                kpath = chosen_path
            t = time.perf_counter()
            kernel, operator = _gram(X, setting, intercept, client, cache_dir, buffer)
            buffer = getattr(operator, "K", None)
            timings["gram"] += time.perf_counter() - t
            counts_out["grams_built"] += 1
            bar.describe(_setting_label(setting))
            if kpath == "compare":
                res_b = _solve_kernel(operator, Y, masks, Cs, info, "batched", intercept, tol,
                                      max_iter, None, halving_min_iter, bar, n_jobs)
                res_c = _solve_kernel(operator, Y, masks, Cs, info, "continuation", intercept,
                                      tol, max_iter, None, halving_min_iter, bar, n_jobs)
                tb, tc = res_b["solve_seconds"], res_c["solve_seconds"]
                chosen_path = "batched" if tb <= tc else "continuation"
                path_report["compare"] = {"setting": setting, "solver": info.name,
                                          "batched_seconds": tb, "continuation_seconds": tc,
                                          "faster": chosen_path}
                res = res_b if chosen_path == "batched" else res_c
                timings["solve"] += tb + tc
            else:
                res = _solve_kernel(operator, Y, masks, Cs, info, kpath, intercept, tol, max_iter,
                                    halving, halving_min_iter, bar, n_jobs)
                timings["solve"] += res["solve_seconds"]
            rows = _rows_for(setting, Cs, res, splits, classes, y_enc)
            c_best = _best_index([{"rows": rows}])[1]
            if _beats(rows[c_best], per_kernel):
                refit = _refit(operator, Y, Cs[c_best], res, c_best, info, intercept, tol, max_iter)
                timings["solve"] += refit["seconds"]
            else:  # an earlier setting is better: this one's model would never be used
                c_best, refit = -1, _NO_REFIT
            del operator, res["decision"]
            counts_out["kernels_solved"] += 1
            record = {"setting": setting, "rows": rows, "kernel": kernel.to_dict(),
                      "solver": info.name, "path": res["path"],
                      "solve_seconds": res["solve_seconds"] + refit["seconds"],
                      "refit_C_index": c_best, "refit_n_iter": refit["n_iter"],
                      "refit_seconds": refit["seconds"],
                      "alpha_full": refit["alpha"], "bias_full": refit["bias"],
                      "viol_full": refit["viol"], "refit_curve": refit["curve"],
                      "curves": res["curves"]}
            _save_kernel(kdir, record, meta)
            per_kernel.append(record)
            bar.advance_configs(len(Cs))
            if on_kernel_done is not None:
                on_kernel_done(setting, rows)
    finally:
        bar.close()
    for rec in per_kernel:
        path_report["settings"].append({"setting": rec["setting"], "solver": rec["solver"],
                                        "path": rec["path"], "solve_seconds": rec["solve_seconds"]})

    table = [row for rec in per_kernel for row in rec["rows"]]
    k_best, c_best = _best_index(per_kernel)
    best_row = per_kernel[k_best]["rows"][c_best]
    best = {"kernel": best_row["kernel"]}
    for key in KERNEL_PARAMETERS[best_row["kernel"]]:
        best[key] = best_row[key]
    best.update(C=best_row["C"], cv_accuracy=best_row["mean_cv_accuracy"],
                cv_accuracy_std=best_row["std_cv_accuracy"])
    model = _best_model(X, Y, classes, per_kernel[k_best], intercept, tol, max_iter)

    paths = {}
    paths["results"] = _write_text(out_dir / "results.csv", _csv_text(table, folds))
    paths["best"] = _write_text(out_dir / "best.json", json.dumps(best, indent=2) + "\n")
    from muflow.persistence import save

    paths["best_model"] = save(model, out_dir / "best_model")
    test_metrics = None
    if X_test is not None:
        test_metrics = {"accuracy": float(model.score(X_test, y_test)), "n_samples": int(X_test.shape[0]),
                        "configuration": best}
        paths["test_metrics"] = _write_text(out_dir / "test_metrics.json",
                                            json.dumps(test_metrics, indent=2) + "\n")
    paths.update(_plots(out_dir, per_kernel, Cs))
    timings["total"] = time.perf_counter() - t_start
    timings["overhead"] = timings["total"] - timings["gram"] - timings["solve"]
    return SweepResult(table=table, best=best, best_model=model, paths=paths, timings=timings,
                       test_metrics=test_metrics, path_report=path_report, counts=counts_out)


# -- per kernel setting ----------------------------------------------------------------
def _pick_solver(name, path, setting, X, intercept, client):
    """The solver and path for one kernel setting (refusing impossible combinations)."""
    from muflow.kernels import Kernel, resolve_gamma
    from muflow.solvers.registry import choose_solver

    kernel = Kernel(setting["kernel"], gamma=resolve_gamma(setting.get("gamma", 1.0), X),
                    degree=setting.get("degree", 3), coef0=setting.get("coef0", 0.0),
                    offset=1.0 if intercept == "regularized" else 0.0)
    nonneg = kernel.is_nonnegative(X)
    if name == "auto" and client is not None:
        # the Dask operator serves products only: a multiplicative solver
        name = "munk" if nonneg else "m3"
    info = choose_solver(name, intercept=intercept, kernel_nonnegative=nonneg)
    if client is not None and info.name in SUBSET_SOLVERS:
        raise MuflowInputError(
            f"solver {info.name!r} reads rows of K, which the Dask operator does not serve; "
            "use a multiplicative solver (solver='m3' or 'munk') with a client/scheduler")
    if path == "auto":
        path = "continuation" if info.name in SUBSET_SOLVERS else "batched"
    return info, path


def _gram(X, setting, intercept, client, cache_dir, buffer=None):
    """The kernel and an operator for K(X, X): store cache / Dask when asked, else in memory
    (into ``buffer``, the previous setting's K, when it has the right shape and dtype)."""
    from muflow.kernels import Kernel, resolve_gamma
    from muflow.operators import DenseGram

    kernel = Kernel(setting["kernel"], gamma=resolve_gamma(setting.get("gamma", 1.0), X),
                    degree=setting.get("degree", 3), coef0=setting.get("coef0", 0.0),
                    offset=1.0 if intercept == "regularized" else 0.0)
    if client is not None:
        from muflow.gram import operator_for

        return kernel, operator_for(X, kernel, client=client, cache_dir=cache_dir)
    if cache_dir is not None:
        from muflow.gram.build import ensure_gram

        gram, _ = ensure_gram(X, kernel, cache_dir=cache_dir, dtype="float64")
        return kernel, DenseGram(np.asarray(gram.read(), dtype=np.float64))
    from muflow.inmemory import gram_dtype, numpy_gram

    n = X.shape[0]
    dtype = gram_dtype(n)
    if buffer is None or buffer.shape != (n, n) or buffer.dtype != dtype:
        buffer = None
    return kernel, DenseGram(numpy_gram(X, kernel, dtype=dtype, out=buffer))


def _columns(Y, masks, Cs):
    """Labels and upper bounds of the columns (C, fold, class), class fastest.

    Column ``(c * folds + f) * P + p``: labels of binary problem p, ``U = C_c`` on the
    training samples of fold f and 0 on its held-out samples.
    """
    n, P = Y.shape
    F = masks.shape[1]
    ycols = np.tile(Y, (1, len(Cs) * F))
    upper = np.empty_like(ycols)
    j = 0
    for C in Cs:
        for f in range(F):
            upper[:, j:j + P] = np.where(masks[:, f], C, 0.0)[:, None]
            j += P
    return ycols, upper


def _solve_kernel(operator, Y, masks, Cs, info, path, intercept, tol, max_iter, halving,
                  halving_min_iter, bar, n_jobs=1):
    """Solve every (C, fold, class) column of one Gram; return alpha, bias, curves, timings."""
    from muflow.solvers import DualProblem

    n, P = Y.shape
    F = masks.shape[1]
    per_c = F * P
    equality = intercept == "exact"
    alpha = np.zeros((n, len(Cs) * per_c))
    bias = np.zeros(len(Cs) * per_c)
    viol = np.zeros(len(Cs) * per_c)
    n_iter = np.zeros(len(Cs), dtype=np.int64)
    seconds = np.zeros(len(Cs))
    stopped = np.zeros(len(Cs), dtype=bool)
    curves = [None] * len(Cs)
    callback = bar.iteration_callback()
    ycols, upper = _columns(Y, masks, Cs)
    t0 = time.perf_counter()
    # subset solvers solve column by column anyway: in "batched" their columns are cold,
    # independent solves, one task per (C, fold); "continuation" is one task per fold,
    # ascending C, warm-started. Tasks are shared out to forked processes, costliest first.
    chained = path == "continuation" or (halving is None and info.name in SUBSET_SOLVERS)
    if chained:
        warm = path == "continuation"
        F = per_c // P
        # one process: every fold's columns in one solve call per C; more: a task per fold
        folds_cols = ([list(range(per_c))] if n_jobs == 1 else
                      [[f * P + p for p in range(P)] for f in range(F)])
        if warm:
            tasks = [(local, list(range(len(Cs)))) for local in folds_cols]
        else:  # larger C, more steps: start those first
            tasks = [(local, [c]) for c in reversed(range(len(Cs))) for local in folds_cols]
        if n_jobs == 1:
            chains = [_continuation_chain(operator, ycols, upper, Cs, per_c, P, local, cs, info,
                                          equality, tol, max_iter, warm, callback)
                      for local, cs in tasks]
        else:
            chains = _forked_chains(operator, ycols, upper, Cs, per_c, P, tasks, info, equality,
                                    tol, max_iter, warm, n_jobs)
        for (local, cs), chain in zip(tasks, chains):
            for k, c in enumerate(cs):
                cols = [c * per_c + j for j in local]
                alpha[:, cols], bias[cols], viol[cols] = chain["alpha"][k], chain["bias"][k], chain["viol"][k]
                n_iter[c] = max(n_iter[c], chain["n_iter"][k])
                seconds[c] = max(seconds[c], chain["seconds"][k])
                if local[0] == 0:
                    curves[c] = chain["curves"][k]
    else:
        active = list(range(len(Cs)))
        init = None
        budget = max_iter if halving is None else min(max_iter, halving_min_iter)
        spent = 0
        while True:
            cols = np.concatenate([np.arange(c * per_c, (c + 1) * per_c) for c in active])
            problem = DualProblem(operator, ycols[:, cols], upper[:, cols], equality=equality)
            t = time.perf_counter()
            sol = info.solve(problem, init=init, tol=tol, max_iter=budget, callback=callback)
            dt = time.perf_counter() - t
            alpha[:, cols], bias[cols], viol[cols] = sol.alpha, sol.bias, sol.kkt_violation
            spent += sol.n_iter
            for k, c in enumerate(active):
                n_iter[c] = spent
                seconds[c] += dt / len(active)
                curve = sol.objective_curve[:, k * per_c:k * per_c + P]  # fold 0's columns
                curves[c] = curve if curves[c] is None else np.vstack([curves[c], curve[1:]])
            if halving is None or sol.converged.all() or spent >= max_iter:
                break
            if len(active) > 1:
                acc = _cv_accuracy(operator, ycols[:, cols], alpha[:, cols], bias[cols], masks, P)
                keep_n = math.ceil(len(active) / halving)
                order = sorted(range(len(active)), key=lambda k: (-acc[k], k))
                keep = sorted(order[:keep_n])
                for k in set(range(len(active))) - set(keep):
                    stopped[active[k]] = True
                active = [active[k] for k in keep]
                cols = np.concatenate([np.arange(c * per_c, (c + 1) * per_c) for c in active])
            init = (alpha[:, cols], bias[cols])
            budget = max_iter - spent if len(active) == 1 else min(max_iter - spent, budget * halving)
    solve_seconds = time.perf_counter() - t0
    # decision values of every column at every sample: ONE product with K
    D = operator.matmul(ycols * alpha) + bias[None, :]
    return {
        "path": path, "solver": info.name, "solve_seconds": solve_seconds,
        "decision": D, "alpha": alpha, "ycols": ycols, "per_c": per_c, "P": P,
        "n_iter": n_iter, "seconds": seconds, "stopped": stopped,
        "bias": bias, "curves": curves,
    }


def _continuation_chain(operator, ycols, upper, Cs, per_c, P, local, c_indices, info, equality,
                        tol, max_iter, warm=True, callback=None):
    """Solve the columns ``local`` (indices within one C's block) for the C values
    ``Cs[c_indices]``, in that (ascending) order.

    With ``warm``, each C starts from the previous C's solution scaled by C / C_prev ("alpha seeding",
    DeCoste & Wagstaff, KDD 2000): scaling keeps 0 <= alpha <= C and sum_i y_i alpha_i = 0,
    and the samples at the old bound (the margin errors, which mostly stay errors) land on
    the new bound.
    """
    from muflow.solvers import DualProblem

    out = {"alpha": [], "bias": [], "viol": [], "n_iter": [], "seconds": [], "curves": []}
    init = None
    for k, c in enumerate(c_indices):
        cols = [c * per_c + j for j in local]
        problem = DualProblem(operator, ycols[:, cols], upper[:, cols], equality=equality)
        t = time.perf_counter()
        sol = info.solve(problem, init=init, tol=tol, max_iter=max_iter, callback=callback)
        out["seconds"].append(time.perf_counter() - t)
        out["alpha"].append(sol.alpha)
        out["bias"].append(sol.bias)
        out["viol"].append(sol.kkt_violation)
        out["n_iter"].append(int(sol.n_iter))
        out["curves"].append(sol.objective_curve[:, :P] if local[0] == 0 else None)
        if warm and k + 1 < len(c_indices):
            init = (sol.alpha * (Cs[c_indices[k + 1]] / Cs[c]), sol.bias)
    return out


#: What forked workers read: set just before the fork, so K is shared copy-on-write.
_FORK_STATE = None


def _chain_in_child(k):
    operator, ycols, upper, Cs, per_c, P, tasks, info, equality, tol, max_iter, warm = _FORK_STATE
    local, c_indices = tasks[k]
    return _continuation_chain(operator, ycols, upper, Cs, per_c, P, local, c_indices, info,
                               equality, tol, max_iter, warm)


def _forked_chains(operator, ycols, upper, Cs, per_c, P, tasks, info, equality, tol, max_iter,
                   warm, n_jobs):
    """Run the tasks ``(local columns, C indices)`` in ``n_jobs`` forked processes, in the
    order given (each process takes the next task when it is free).

    The tasks are independent (a column's warm start comes from the same column at the
    previous C, inside one task), and the subset solvers hold the GIL, so processes rather
    than threads; fork shares the in-memory K with the children without a copy.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from muflow.operators import DenseGram, operand_dtype
    from muflow.solvers import DualProblem

    # load (or compile) the solver's loops here once, not in every child: for K's dtype,
    # which selects the compiled version (a float32 Gram compiled apart took 8 s per child)
    warm_up = DenseGram(np.eye(2, dtype=operand_dtype(operator)))
    info.solve(DualProblem(warm_up, [1.0, -1.0], 1.0, equality=equality), tol=tol, max_iter=5)
    global _FORK_STATE
    _FORK_STATE = (operator, ycols, upper, Cs, per_c, P, tasks, info, equality, tol, max_iter, warm)
    try:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(_pool_size(len(tasks), n_jobs), mp_context=ctx) as pool:
            futures = [pool.submit(_chain_in_child, k) for k in range(len(tasks))]
            return [f.result() for f in futures]
    finally:
        _FORK_STATE = None


def _makespan(tasks: int, processes: int, cores: int) -> float:
    """Wall time of ``tasks`` equal tasks (1 each) on ``processes`` processes sharing
    ``cores`` cores evenly: rounds of up to ``processes`` tasks, each round as long as its
    tasks' total work over the cores it can use."""
    full, last = divmod(tasks, processes)
    rounds = [processes] * full + ([last] if last else [])
    return sum(max(1.0, k / cores) for k in rounds)


def _pool_size(tasks: int, n_jobs: int) -> int:
    """Processes for ``tasks`` chains on ``n_jobs`` cores.

    With 5 folds on 2 cores, 2 processes take 3 rounds while the work is 2.5 rounds: the
    last fold runs alone and a core idles. A few more processes than cores (the kernel
    time-shares them) end together instead: the smallest count, at most 2 * n_jobs,
    whose makespan for equal tasks is the least. On full a8a this took the 5-fold
    chains of gamma = 0.05 from 59.6 s (2 processes) to 53.0 s (3).
    """
    if tasks <= n_jobs:
        return max(1, tasks)
    candidates = range(n_jobs, min(tasks, 2 * n_jobs) + 1)
    return min(candidates, key=lambda p: (_makespan(tasks, p, n_jobs), p))


_NO_REFIT = {"alpha": np.zeros((0, 0)), "bias": np.zeros(0), "viol": np.zeros(0), "n_iter": 0,
             "curve": np.zeros((1, 0)), "seconds": 0.0}


def _beats(row, per_kernel) -> bool:
    """Whether ``row`` is better than every configuration of the settings done before it
    (the rule of :func:`_best_index`); only then is its setting refitted on all data."""
    earlier = [r["mean_cv_accuracy"] for rec in per_kernel for r in rec["rows"]]
    return not earlier or row["mean_cv_accuracy"] > max(earlier) + 1e-12


def _refit(operator, Y, C, res, c, info, intercept, tol, max_iter):
    """Solve the configuration (this Gram, C) on all samples while K is in memory.

    Warm start: the mean of the fold solutions at C. Each is feasible for the full problem
    (0 <= alpha <= C, held-out samples at 0, sum_i y_i alpha_i = 0) and the feasible set is
    convex, so their mean is feasible too; it is close to the full solution because each
    sample is a training sample in folds - 1 of the folds.
    """
    from muflow.solvers import DualProblem

    P, per_c = res["P"], res["per_c"]
    F = per_c // P
    block = res["alpha"][:, c * per_c:(c + 1) * per_c].reshape(-1, F, P)
    init = (block.mean(axis=1), res["bias"][c * per_c:(c + 1) * per_c].reshape(F, P).mean(axis=0))
    problem = DualProblem(operator, Y, float(C), equality=intercept == "exact")
    t = time.perf_counter()
    sol = info.solve(problem, init=init, tol=tol, max_iter=max_iter)
    return {"alpha": sol.alpha, "bias": sol.bias, "viol": sol.kkt_violation, "n_iter": int(sol.n_iter),
            "curve": sol.objective_curve, "seconds": time.perf_counter() - t}


def _fold_predictions(D_cf, P):
    """Class index per sample from the decision values of one (C, fold): (n, P) -> (n,)."""
    return (D_cf[:, 0] > 0).astype(int) if P == 1 else np.argmax(D_cf, axis=1)


def _cv_accuracy(operator, ycols, alpha, bias, masks, P):
    """Mean validation accuracy per configuration of a batch (used by halving)."""
    D = operator.matmul(ycols * alpha) + bias[None, :]
    F = masks.shape[1]
    per_c = F * P
    y_enc = np.where(ycols[:, :P] > 0)[1] if P > 1 else (ycols[:, 0] > 0).astype(int)
    out = []
    for k in range(D.shape[1] // per_c):
        accs = []
        for f in range(F):
            held = ~masks[:, f]
            pred = _fold_predictions(D[held, k * per_c + f * P:k * per_c + (f + 1) * P], P)
            accs.append(np.mean(pred == y_enc[held]))
        out.append(float(np.mean(accs)))
    return out


def _rows_for(setting, Cs, res, splits, classes, y_enc):
    """One results row per C of a kernel setting."""
    from muflow.model import SUPPORT_THRESHOLD

    D, P, per_c = res["decision"], res["P"], res["per_c"]
    rows = []
    for c, C in enumerate(Cs):
        accs, n_sv = [], []
        for f, (train, test) in enumerate(splits):
            cols = slice(c * per_c + f * P, c * per_c + (f + 1) * P)
            pred = _fold_predictions(D[test, cols], P)
            accs.append(float(np.mean(pred == y_enc[test])))
            a = res["alpha"][:, cols]
            largest = np.maximum(a.max(axis=0), np.finfo(float).tiny)
            n_sv.append(int((a > SUPPORT_THRESHOLD * largest[None, :]).any(axis=1).sum()))
        row = {"kernel": setting["kernel"]}
        for key in _PARAM_ORDER:
            row[key] = setting.get(key, "")
        row.update(C=float(C), mean_cv_accuracy=float(np.mean(accs)),
                   std_cv_accuracy=float(np.std(accs)), n_iter=int(res["n_iter"][c]),
                   n_support=float(np.mean(n_sv)), time_s=float(res["seconds"][c]),
                   stopped_early=bool(res["stopped"][c]), solver=res["solver"], path=res["path"])
        for f, a in enumerate(accs):
            row[f"split{f}_accuracy"] = a
        rows.append(row)
    return rows


def _best_index(per_kernel):
    """(kernel setting, C index) of the best mean CV accuracy; ties: first in sweep order."""
    best, where = -1.0, (0, 0)
    for k, rec in enumerate(per_kernel):
        for c, row in enumerate(rec["rows"]):
            if row["mean_cv_accuracy"] > best + 1e-12:
                best, where = row["mean_cv_accuracy"], (k, c)
    return where


def _best_model(X, Y, classes, rec, intercept, tol, max_iter):
    """A fitted :class:`muflow.SVC` from the refit of the best configuration on all samples.

    The refit ran while the Gram was in memory (:func:`_refit`), so nothing is built or
    solved here; the estimator's own ``_store_solution`` sets the fitted attributes exactly
    as ``SVC.fit`` would.
    """
    from muflow.kernels import Kernel
    from muflow.model import SVC
    from muflow.solvers import DualSolution

    kernel = Kernel.from_dict(rec["kernel"])
    c = int(rec["refit_C_index"])
    assert c >= 0, "the best setting is always refitted (see _beats)"
    model = SVC(kernel=rec["setting"]["kernel"], C=float(rec["rows"][c]["C"]),
                gamma=kernel.gamma, degree=kernel.degree, coef0=kernel.coef0,
                solver=rec["solver"], intercept=intercept, tol=tol, max_iter=max_iter)
    viol = np.asarray(rec["viol_full"])
    solution = DualSolution(alpha=np.asarray(rec["alpha_full"]), bias=np.asarray(rec["bias_full"]),
                            n_iter=int(rec["refit_n_iter"]),
                            objective_curve=np.asarray(rec["refit_curve"], dtype=np.float64),
                            kkt_violation=viol, converged=viol <= tol, solver=rec["solver"])
    model.classes_ = classes
    model.n_features_in_ = X.shape[1]
    model._store_solution(X, Y, solution, kernel)
    model.solver_ = rec["solver"]
    model.fit_time_ = float(rec["refit_seconds"])
    return model


# -- the run directory -----------------------------------------------------------------
def _data_digest(X, y) -> str:
    h = hashlib.sha256()
    h.update(repr(X.shape).encode())
    if hasattr(X, "indptr"):
        for a in (X.data, X.indices, X.indptr):
            h.update(np.ascontiguousarray(a).tobytes())
    else:
        h.update(np.ascontiguousarray(X).tobytes())
    h.update(np.asarray(y).astype(str).tobytes())
    return h.hexdigest()[:32]


def _check_or_write_meta(out_dir: Path, meta: dict, resume: bool):
    meta_file = out_dir / "sweep.json"
    if resume and meta_file.exists():
        old = json.loads(meta_file.read_text())
        if old != json.loads(json.dumps(meta)):
            diff = sorted(k for k in set(old) | set(meta) if old.get(k) != json.loads(json.dumps(meta)).get(k))
            raise MuflowInputError(
                f"{out_dir} holds a sweep with other settings ({', '.join(diff)} differ); "
                "resume with the same data and options, or use a new --out directory")
        return
    if not resume and (out_dir / "kernels").exists():
        shutil.rmtree(out_dir / "kernels")
    _write_text(meta_file, json.dumps(meta, indent=2) + "\n")


def _save_kernel(kdir: Path, rec: dict, meta: dict):
    from muflow.atomic import atomic_directory as write_atomically

    curves = [np.asarray(c) for c in rec["curves"]]
    length = max(len(c) for c in curves)
    # (nC, length, P): each curve padded with its final value
    padded = np.stack([np.vstack([c, np.repeat(c[-1:], length - len(c), axis=0)]) for c in curves])

    def write(tmp: Path):
        np.savez(tmp / "arrays.npz", alpha_full=rec["alpha_full"], bias_full=rec["bias_full"],
                 viol_full=rec["viol_full"], refit_curve=rec["refit_curve"], curves=padded,
                 curve_lengths=np.array([len(c) for c in curves]))
        info = {k: rec[k] for k in ("setting", "rows", "kernel", "solver", "path", "solve_seconds",
                                    "refit_C_index", "refit_n_iter", "refit_seconds")}
        info["meta"] = meta
        (tmp / "kernel.json").write_text(json.dumps(info, indent=2) + "\n")

    write_atomically(kdir, write)


def _load_kernel(kdir: Path, setting: dict, meta: dict):
    """A finished kernel setting's record, or None when it is absent or from another sweep."""
    try:
        info = json.loads((kdir / "kernel.json").read_text())
        with np.load(kdir / "arrays.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError):
        return None
    if info.get("setting") != json.loads(json.dumps(setting)) or info.get("meta") != json.loads(json.dumps(meta)):
        return None
    lengths = arrays.pop("curve_lengths")
    padded = arrays.pop("curves")
    info["curves"] = [padded[c, :lengths[c]] for c in range(len(lengths))]
    info.update(arrays)
    return info


def _write_text(path: Path, text: str) -> Path:
    """Write a file under a temporary name in its directory and rename it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_CSV_COLUMNS = ("kernel", "gamma", "degree", "coef0", "C", "mean_cv_accuracy", "std_cv_accuracy",
                "n_iter", "n_support", "time_s", "stopped_early", "solver", "path")


def _csv_text(table, folds) -> str:
    buf = io.StringIO()
    columns = list(_CSV_COLUMNS) + [f"split{f}_accuracy" for f in range(folds)]
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({k: row.get(k, "") for k in columns})
    return buf.getvalue()


def _setting_label(setting) -> str:
    params = ", ".join(f"{k}={setting[k]:g}" if not isinstance(setting[k], str) else f"{k}={setting[k]}"
                       for k in _PARAM_ORDER if k in setting)
    return f"{setting['kernel']}({params})" if params else setting["kernel"]


def _plots(out_dir: Path, per_kernel, Cs) -> dict:
    """Heatmaps of CV accuracy (C x kernel parameters, one per kernel) and convergence curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muflow.report import plot_objective_curves

    paths = {}
    by_kernel = {}
    for rec in per_kernel:
        by_kernel.setdefault(rec["setting"]["kernel"], []).append(rec)
    for name, recs in by_kernel.items():
        acc = np.array([[row["mean_cv_accuracy"] for row in rec["rows"]] for rec in recs])
        labels = [_setting_label(rec["setting"]) for rec in recs]
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
        tmp = out_dir / f".heatmap_{name}.tmp.png"
        fig.savefig(tmp, dpi=100)
        plt.close(fig)
        os.replace(tmp, target)
        paths[f"heatmap_{name}"] = target
    ranked = sorted(((-row["mean_cv_accuracy"], k, c) for k, rec in enumerate(per_kernel)
                     for c, row in enumerate(rec["rows"])))[:5]
    curves = {}
    for _, k, c in ranked:
        rec = per_kernel[k]
        curve = np.asarray(rec["curves"][c], dtype=float)
        curve = curve[:, 0] if curve.ndim == 2 else curve
        curves[f"{_setting_label(rec['setting'])}, C={rec['rows'][c]['C']:g}"] = curve - curve.min()
    tmp = out_dir / ".convergence.tmp.png"
    plot_objective_curves(curves, tmp, title="convergence of the best configurations (fold 1)")
    os.replace(tmp, out_dir / "convergence.png")
    paths["convergence"] = out_dir / "convergence.png"
    return paths


class _Progress:
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


__all__ = ["SweepGrid", "SweepResult", "run_sweep", "load_grid_toml", "PATHS", "SUBSET_SOLVERS"]
