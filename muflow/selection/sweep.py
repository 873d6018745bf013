"""The sweep: cross-validate every configuration of a grid and refit the best on all data.

For each kernel setting (one Gram of all samples), every (C, fold, class) problem is a
column of one batch (:mod:`muflow.selection.kernel_solve`); the decision values of all columns
give every configuration's CV accuracy (:mod:`muflow.selection.scoring`). After the folds,
a kernel setting whose best C beats every earlier setting is refitted on all samples while
its Gram is still in memory, warm-started from the mean of the fold solutions (a feasible
point close to the answer); the best model of the sweep is the last of these refits, so it
needs no Gram build of its own, and settings that cannot be the best are not refitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from muflow.backends import gram_operator
from muflow.dask.predict import is_dask_collection
from muflow.device.arrays import fit_device
from muflow.exceptions import MuflowInputError
from muflow.kernels import kernel_from_setting
from muflow.routing import sweep_path
from muflow.selection import rundir, timeout
from muflow.selection.convergence import warn_not_converged
from muflow.selection.kernel_plan import plan_setting, sweep_solves
from muflow.svc_fit import iteration_budget
from muflow.selection.kernel_solve import refit as refit_setting, solve_kernel
from muflow.selection.grid import SweepGrid, check_options, setting_label
from muflow.selection.plots import Progress, write_plots
from muflow.selection.records import KernelRecord, Refit, SweepResult
from muflow.selection.scoring import beats, best_index, best_summary, configuration_rows
from muflow.selection.test_set import columns_of, scored_test_set
from muflow.solvers.registry import choose_solver
from muflow.solvers.rowcache import DEFAULT_CACHE_MB
from muflow.threads import budget_scope, thread_budget
from muflow.time_limit import bounded
from muflow.time_limit import start as start_deadline


def run_sweep(X, y, grid: SweepGrid, *, folds: int = 5, seed: int = 0, out_dir, X_test=None,
              y_test=None, solver: str = "auto", path: str = "auto", intercept: str = "exact",
              tol: float = 1e-3, max_iter: int = -1, client=None, cache_dir=None, storage_options=None,
              resume: bool = False, progress: bool = True, halving: int | None = None,
              halving_min_iter: int = 10, n_jobs: int | None = None, cache_size: float = DEFAULT_CACHE_MB,
              on_kernel_done=None, resume_command=None, time_limit: float | None = None,
              device: str = "cpu", feature_names=None, svmlight_zero_based: bool | None = None) -> SweepResult:
    """Cross-validate every configuration of ``grid`` and refit the best on all data.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
    y : array-like of shape (n_samples,)
    feature_names, svmlight_zero_based : optional
        How X's file was read: its columns' names (kept where X has none: an array) and an
        svmlight file's indexing, saved with the best model so that ``predict`` reads alike.
    grid : SweepGrid
    folds : int, default=5
        Stratified folds: ``StratifiedKFold(folds, shuffle=True, random_state=seed)``.
    seed : int, default=0
    out_dir : str or Path
        Run directory (created; :mod:`muflow.selection.rundir`). Outputs are written atomically;
        each kernel setting's results land in ``out_dir/kernels/`` as soon as it is done.
    X_test, y_test : optional
        Test set: the best model's accuracy on it goes to ``test_metrics.json``.
    solver : str, default="auto"
        A registered solver; "auto" takes what :func:`muflow.solvers.registry.choose_solver`
        picks with K in memory (SMO for the exact intercept); above the sweep's stored-K size
        (:data:`muflow.routing.SWEEP_ROWS_MIN_SAMPLES` samples, or a K that does not fit in half
        the available memory: the store-or-stream rule of each kernel setting,
        :func:`muflow.routing.plan_kernel`, which :class:`muflow.SVC` and the pipeline follow
        too) kernel rows are computed on demand and "auto" is the working-set solver: each
        fold's problem on rows over its own training samples
        (:func:`muflow.routing.solves_on_own_samples`), warm-started along C, and the refit on
        all samples by the engine of ``SVC.fit``. With a Dask client the working-set solver on X
        partitioned over the workers (:mod:`muflow.dask.working_set`); "m3", "munk" and the
        other multiplicative solvers with a client run on the same partitions with their kernel
        panels (every column of the batch in one round trip a pass, :mod:`muflow.dask.panels`)
        when those fit in the workers' memory, else on a Gram store built on the cluster.
    path : {"auto", "batched", "continuation", "compare"}, default="auto"
        See :mod:`muflow.selection.kernel_solve`; "compare" solves the first kernel setting
        both ways, keeps the faster for the rest, both times in :attr:`SweepResult.path_report`.
    intercept : {"exact", "regularized", "none"}, default="exact"
    tol : float, default=1e-3
        KKT tolerance of every column.
    max_iter : int, default=-1
        -1: no limit, as :class:`muflow.SVC`'s. Else the budget per solve in SVC's unit of
        ``max_iter`` and ``n_iter_``, handed to the solver as ``SVC.fit`` hands it (SMO: pair
        steps, not sweeps of n), so the best model's ``n_iter_ <= max_iter``;
        ``halving_min_iter`` too. Solves stopped above ``tol``: :mod:`~.convergence`.
    client : distributed.Client, optional
        Solve on the cluster: X partitioned over the workers (see ``solver``), or each
        Gram built on the cluster into the store cache and served by the workers
        (multiplicative solvers whose kernel panels do not fit, batched path).
    cache_dir, storage_options : str, dict, optional
        Gram store cache (:mod:`muflow.gram`; an fsspec URL opened with ``storage_options``, here
        and on the workers): a setting whose plan (:func:`muflow.routing.plan_kernel`) reads a
        store (K stored, room on the disk) reads it here when present, else writes it there;
        settings on rows on demand or on X partitioned over the workers neither read nor write it.
    resume : bool, default=False
        Skip the kernel settings whose results are already in ``out_dir`` (same data,
        grid and options); their Grams are not rebuilt.
    progress : bool, default=True
        A rich progress bar of configurations and solver iterations.
    halving : int, optional
        Successive-halving factor eta >= 2 (off by default); see :mod:`muflow.selection.halving`.
    halving_min_iter : int, default=10
        Iterations of the first halving rung.
    n_jobs : int, default=None
        The sweep's thread budget (:func:`muflow.threads.thread_budget`: None or -1 every
        core this process may use, within what the caller allows; a positive integer that
        many). Subset solvers on the chains path share it out to forked processes, each
        fold's chain on its share (they share an in-memory K copy-on-write; P = min(chains,
        budget) processes of budget // P threads); 1 solves the chains here in turn. Every
        solve, row computation and the refit in this process use at most the budget.
    cache_size : float, default=256
        Megabytes of kernel rows the solvers that read rows cache (libsvm's and
        :class:`muflow.SVC`'s ``cache_size``): in this process when rows are computed on demand (a
        fold's problem on its own samples keeps one cache for its whole C path, the refit has its
        own; a process holds one at a time), on each worker when X is partitioned over a cluster.
    on_kernel_done : callable, optional
        ``on_kernel_done(setting, rows)`` after each kernel setting's results are saved.
    time_limit : float, optional
        Seconds the sweep may take (from its start): the solves running then stop with
        their best iterates so far (:mod:`muflow.selection.timeout`), the kernel settings
        not yet started are not started, and every configuration not finished has
        ``finished=False`` in ``results.csv`` (never-started ones with NaN scores). The
        best model is chosen among finished configurations when there are any. Unfinished
        settings are not recorded as done: ``resume=True`` solves them again. A
        ``ConvergenceWarning`` says how many were cut. None: no limit.
    device : {"cpu", "cuda", "auto"}, default="cpu"
        As :class:`muflow.SVC`'s: on a GPU each kernel setting's rows (and its products)
        are computed there and the working-set solves keep their state there
        (:mod:`muflow.device`); not with ``client``.
    resume_command : str, default="sweep --resume --out OUT_DIR"
        What the warning of a sweep cut at ``time_limit`` says continues it (``run``: its own).

    Returns
    -------
    SweepResult
    """
    t_start, deadline = time.perf_counter(), start_deadline(time_limit)
    grid.validate()
    options = dict(folds=folds, seed=seed, solver=solver, path=path, intercept=intercept, tol=tol,
                   max_iter=max_iter, halving=halving, halving_min_iter=halving_min_iter)
    check_options(dict(options, n_jobs=n_jobs))
    xp, budget = fit_device(device, client), thread_budget(n_jobs)
    data = _check_data(X, y, X_test, y_test, folds, seed, client, feature_names, svmlight_zero_based)
    settings, Cs = grid.kernel_settings(), grid.sorted_C()
    plans = _plan_settings(data.X, settings, len(Cs), folds=folds, solver=solver, path=path,
                           intercept=intercept, client=client, cache_dir=cache_dir, cache_mb=cache_size,
                           device=xp is not None, halving=halving, storage_options=storage_options)
    out_dir, meta = rundir.open_run_dir(out_dir, data.X, y, grid.to_dict(), options, resume)
    run = _SweepRun(data=data, Cs=Cs, out_dir=out_dir, meta=meta, intercept=intercept, tol=tol,
                    max_iter=max_iter, halving=halving, halving_min_iter=halving_min_iter,
                    budget=budget, device=xp, client=client, cache_dir=cache_dir, storage_options=storage_options,
                    cache_size=cache_size, deadline=deadline, on_kernel_done=on_kernel_done,
                    resume_command=resume_command, bar=Progress(progress, total=len(settings) * len(Cs)))
    run.every_setting(settings, plans, resume=resume)
    return run.result(t_start)


@dataclass
class _SweepData:
    """The checked inputs of a sweep: X and the encoded labels, the folds as masks of
    training samples (n x folds booleans: a fold's held-out indices are where its column is
    False, not a list of index arrays), the binary problems and the test set."""

    X: object
    y_enc: np.ndarray
    classes: np.ndarray
    masks: np.ndarray
    Y: np.ndarray
    member: np.ndarray
    X_test: object = None
    y_test: object = None
    feature_names: object = None  # X's column names (a DataFrame's, else its file's): SVC.fit's
    zero_based: bool | None = None  # how the svmlight file X was read from was indexed
    unseen: dict = field(default_factory=dict)  # the test set's classes that y lacks: rows


def _check_data(X, y, X_test, y_test, folds: int, seed: int, client=None, file_names=None,
                zero_based=None) -> _SweepData:
    """Validate X, y and the test set once, and pose the folds and the binary problems.

    X's column names are a DataFrame's own, else ``file_names``, the names its file gave
    (an array the workers read from a CSV header): the best model keeps them either way."""
    from sklearn.model_selection import StratifiedKFold
    from sklearn.utils.validation import _get_feature_names, check_X_y

    from muflow.data import check_finite
    from muflow.data.files import check_labels_are_classes, label_text
    from muflow.data.test_labels import unseen_classes
    from muflow.multiclass import binary_problems

    names = _get_feature_names(X)
    if is_dask_collection(X):  # read by the workers (muflow.data.workers): it stays there
        X, y = _dask_input(X, y, client)
    else:
        X, y = check_X_y(X, y, accept_sparse="csr", dtype=np.float64, ensure_all_finite=False)
        check_finite(X)
    check_labels_are_classes(y, labels="y", choose=None)  # the command line's check too
    classes, y_enc, counts = np.unique(y, return_inverse=True, return_counts=True)
    if len(classes) < 2:
        raise MuflowInputError(f"the data hold only one class ({label_text(classes[0])}); a sweep needs at least 2")
    if counts.min() < 2:  # no number of folds (>= 2) would do
        raise MuflowInputError(
            f"the class {label_text(classes[counts.argmin()])} has only 1 sample; stratified folds need "
            "at least 2 samples of every class: drop it or merge it with another class")
    if counts.min() < folds:
        raise MuflowInputError(
            f"folds={folds} but the smallest class ({label_text(classes[counts.argmin()])}) has only "
            f"{counts.min()} samples; use at most {counts.min()} folds")
    if (X_test is None) != (y_test is None):
        raise MuflowInputError("give both X_test and y_test, or neither")
    unseen = {}
    if X_test is not None:
        X_test, y_test = check_X_y(columns_of(X_test, names), y_test, accept_sparse="csr",
                                   dtype=np.float64, ensure_all_finite=False)
        check_finite(X_test, "X_test", before="predicting")  # named: "Input X" was X's
        if X_test.shape[1] != X.shape[1]:
            raise MuflowInputError(f"X_test has {X_test.shape[1]} features, X has {X.shape[1]}")
        unseen = unseen_classes(y_test, classes, test="y_test", training="y")  # or refused
    if names is None and file_names is not None:  # after X_test: an unnamed X matches by position
        names = _file_names(file_names, X.shape[1])
    n = X.shape[0]
    masks = np.zeros((n, folds), dtype=bool)
    for f, (train, _) in enumerate(StratifiedKFold(folds, shuffle=True, random_state=seed)
                                   .split(np.zeros(n), y_enc)):
        masks[train, f] = True  # one fold's indices at a time
    Y, member = binary_problems(y_enc, len(classes))
    return _SweepData(X, y_enc, classes, masks, Y, member, X_test, y_test, names,
                      None if zero_based is None else bool(zero_based), unseen)


def _file_names(names, n_features: int) -> np.ndarray:
    """The names of X's columns its file gave, as ``feature_names_in_`` holds them; refused
    where they are not one string a column."""
    names = np.asarray(list(names), dtype=object)
    if len(names) != n_features or not all(isinstance(name, str) for name in names):
        raise MuflowInputError(f"feature_names must be {n_features} strings, one per column of "
                               f"X, got {list(names)[:5]!r}{' ...' if len(names) > 5 else ''}")
    return names


def _plan_settings(X, settings, n_C: int, *, folds, solver, path, intercept, client, cache_dir,
                   cache_mb, device=False, halving=None, storage_options=None) -> list:
    """``[(kernel, plan, info, path along C), ...]``, one per kernel setting, asked once
    before any solve (:func:`muflow.selection.kernel_plan.plan_setting`, the rule the
    pipeline follows too): impossible combinations are refused before anything runs."""
    planned = []
    for setting in settings:
        kernel = kernel_from_setting(setting, X, intercept=intercept)
        plan = plan_setting(X, kernel, solver=solver, intercept=intercept,
                            solves=sweep_solves(folds, n_C), client=client, cache_dir=cache_dir,
                            cache_mb=cache_mb, device=device, storage_options=storage_options)
        along = sweep_path(path, plan.solver, halving)
        info = choose_solver(plan.solver, intercept=intercept, kernel_nonnegative=kernel.is_nonnegative(X))
        planned.append((kernel, plan, info, along))
    return planned


@dataclass
class _SweepRun:
    """The state of a sweep across its kernel settings: the records so far, the timings and
    counts, the progress bar and the Gram buffer the next setting builds its K into."""

    data: _SweepData
    Cs: np.ndarray
    out_dir: Path
    meta: dict
    intercept: str
    tol: float
    max_iter: int
    halving: int | None
    halving_min_iter: int
    budget: int  # the sweep's threads (muflow.threads.thread_budget), shared by forked chains
    device: object  # the array module of device= (None: the CPU)
    client: object
    cache_dir: object
    storage_options: dict | None  # of the file system of an fsspec URL cache_dir
    cache_size: float
    deadline: object
    on_kernel_done: object
    resume_command: str | None  # named by the warning of a sweep cut at its time limit
    bar: Progress
    records: list = field(default_factory=list)
    not_started: list = field(default_factory=list)  # rows of the settings the time limit left
    chosen_path: str | None = None  # the faster path of path="compare"
    compare: dict | None = None
    buffer: object = None
    timings: dict = field(default_factory=lambda: {"gram": 0.0, "solve": 0.0, "refit": 0.0})
    counts: dict = field(default_factory=lambda: {"grams_built": 0, "kernels_solved": 0,
                                                  "kernels_resumed": 0})

    def __post_init__(self):
        self.timings.update({solve_key(c): 0.0 for c in self.Cs})

    def every_setting(self, settings, plans, *, resume):
        """Every kernel setting in turn (:meth:`setting`) on the sweep's thread budget; the
        progress bar closed after, whatever happens."""
        try:
            with budget_scope(self.budget):
                for i, (setting, planned) in enumerate(zip(settings, plans)):
                    self.setting(i, setting, *planned, resume=resume)
        finally:
            self.bar.close()

    def setting(self, i, setting, kernel, plan, info, kpath, *, resume):
        """One kernel setting: its saved results (``resume``), its rows left unstarted by
        the time limit, or its solves on the operator of its plan."""
        kdir = rundir.kernel_dir(self.out_dir, i, setting)
        done = rundir.load_kernel(kdir, setting, self.meta) if resume else None
        if done is not None:
            self.counts["kernels_resumed"] += 1
            self.records.append(done)
        elif self.deadline is not None and self.deadline.expired:
            self.not_started.extend(timeout.not_started_rows(setting, self.Cs, self.data.masks.shape[1],
                                                             info, kpath))
        else:
            self._solve(kdir, setting, kernel, plan, info, self.chosen_path or kpath)
        self.bar.advance_configs(len(self.Cs))

    def _solve(self, kdir, setting, kernel, plan, info, kpath):
        """Build the setting's operator by its plan, solve every (C, fold, class) column,
        refit the best C when it beats every earlier setting, save the record."""
        info = bounded(info, self.deadline)  # every solve and refit stops at the time limit
        t = time.perf_counter()
        operator = gram_operator(self.data.X, kernel, plan, client=self.client, out=self.buffer,
                                 cache_dir=self.cache_dir if plan.store else None,
                                 storage_options=self.storage_options,
                                 device=self.device, n_threads=self.budget)
        self.buffer = operator.dense  # the next setting builds its K into this array
        self.timings["gram"] += time.perf_counter() - t
        self.counts["grams_built"] += 1
        self.bar.describe(setting_label(setting))
        try:
            res = self._solve_columns(operator, setting, info, kpath)
            rows = configuration_rows(setting, self.Cs, res, self.data.masks, self.data.y_enc)
            res.decision = None  # scored: the refit reads the folds' solutions, not these
            cut = self.deadline is not None and self.deadline.stopped
            if cut:
                rows = timeout.mark_unfinished(rows)
            refit = self._refit(operator, rows, res, info, cut)
            if not cut and self.deadline is not None and self.deadline.stopped:
                cut, rows = True, timeout.mark_unfinished(rows)  # the refit ran into the limit
        finally:
            operator.close()  # a cluster's partitions or panels are released here
        res.decision = res.products = None
        self.counts["kernels_solved"] += 1
        record = KernelRecord(setting=setting, rows=rows, kernel=kernel, solver=info.name,
                              path=res.path, solve_seconds=res.solve_seconds + refit.seconds,
                              refit=refit, curves=res.curves, gram=plan.path, reason=plan.reason)
        if not cut:  # a cut setting is not done: a resumed sweep solves it again
            rundir.save_kernel(kdir, record, self.meta)
        self.records.append(record)
        if self.on_kernel_done is not None:
            self.on_kernel_done(setting, rows)

    def _solve_columns(self, operator, setting, info, kpath):
        """Every (C, fold, class) column on ``kpath``; "compare" solves both paths, keeps
        the faster for the settings after and reports both times."""
        d = self.data
        options = info.options(cache_mb=self.cache_size, libsvm_iterations=True)  # SVC's unit

        def solve(p, halving_eta):
            return solve_kernel(operator, d.Y, d.masks, self.Cs, info, p, self.intercept, self.tol,
                                iteration_budget(self.max_iter), halving_eta, self.halving_min_iter,
                                self.bar.iteration_callback(), self.budget, d.member, d.y_enc, options)

        if kpath == "compare":
            res_b, res_c = solve("batched", None), solve("continuation", None)
            tb, tc = res_b.solve_seconds, res_c.solve_seconds
            self.chosen_path = "batched" if tb <= tc else "continuation"
            self.compare = {"setting": setting, "solver": info.name, "batched_seconds": tb,
                            "continuation_seconds": tc, "faster": self.chosen_path}
            res = res_b if self.chosen_path == "batched" else res_c
            self.timings["solve"] += tb + tc
        else:
            res = solve(kpath, self.halving)
            self.timings["solve"] += res.solve_seconds
        for c, seconds in zip(self.Cs, res.seconds):
            self.timings[solve_key(c)] += float(seconds)
        return res

    def _refit(self, operator, rows, res, info, cut) -> Refit:
        """The best C refitted on all samples while K is at hand, when it beats every earlier
        setting (a setting cut at the time limit only when nothing else finished)."""
        c_best = best_index([rows])[1]
        if not ((not self.records) if cut else beats(rows[c_best], self.records)):
            return Refit()  # an earlier setting is better: this one's model would never be used
        d = self.data
        refit = refit_setting(operator, d.Y, self.Cs[c_best], res, c_best, info, self.intercept,
                              self.tol, iteration_budget(self.max_iter), d.member,
                              info.options(cache_mb=self.cache_size, libsvm_iterations=True))
        self.timings["refit"] += refit.seconds
        return refit

    def result(self, t_start) -> SweepResult:
        """The table, the best configuration and its model, the outputs written."""
        d, records = self.data, self.records
        table = [row for rec in records for row in rec.rows] + self.not_started
        k_best, c_best = best_index(timeout.rows_to_choose_from(records, self.out_dir,
                                                                      self.resume_command))
        best = best_summary(records[k_best].rows[c_best])
        model = _best_model(_RowsOf(d.X) if is_dask_collection(d.X) else d.X, d.y_enc, d.classes,
                            records[k_best], self.intercept, self.tol, self.max_iter)
        test_metrics = None
        if d.X_test is not None:
            test_metrics = scored_test_set(model, d.X_test, d.y_test, d.unseen, best)
        if d.feature_names is not None:  # after the test score, which read X_test as an array
            model.feature_names_in_ = d.feature_names  # kept and checked as SVC.fit's
        paths = rundir.write_outputs(self.out_dir, table, d.masks.shape[1], best, model, test_metrics,
                                     svmlight_zero_based=d.zero_based)
        paths.update(write_plots(self.out_dir, records, self.Cs))
        timings = self.timings
        timings["total"] = time.perf_counter() - t_start
        if self.deadline is not None:
            timeout.warn_unfinished(table, self.deadline, self.out_dir, self.resume_command,
                                    self.counts)
        warn_not_converged(table, model, max_iter=self.max_iter, tol=self.tol, out_dir=self.out_dir,
                           timed_out=self.deadline is not None and self.deadline.stopped)
        timings["overhead"] = timings["total"] - timings["gram"] - timings["solve"] - timings["refit"]
        path_report = {"settings": [{"setting": r.setting, "gram": r.gram, "reason": r.reason,
                                     "solver": r.solver, "path": r.path,
                                     "solve_seconds": r.solve_seconds} for r in records]}
        if self.compare is not None:
            path_report["compare"] = self.compare
        return SweepResult(table=table, best=best, best_model=model, paths=paths, timings=timings,
                           test_metrics=test_metrics, path_report=path_report, counts=self.counts)


def _dask_input(X, y, client):
    """A dask X (its finite values checked where it was read, and again by each partition
    it becomes) and y brought here, of the same length."""
    if client is None:
        raise MuflowInputError("X is a dask collection: give client=... (the cluster that holds "
                               "it), or pass a NumPy array")
    if hasattr(X, "to_dask_array"):
        X = X.to_dask_array(lengths=True)
    if X.ndim != 2:
        raise MuflowInputError(f"X must be 2-d, got a dask array of shape {X.shape}")
    y = np.asarray(y.compute() if hasattr(y, "compute") else y)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise MuflowInputError(f"X has {X.shape[0]} rows and y has shape {y.shape}; give one label a row")
    return X, y


class _RowsOf:
    """Rows of a dask X as :meth:`muflow.SVC._set_fitted` reads them: ``X[support]``
    computed on the workers, only those rows brought here."""

    def __init__(self, X):
        self.X, self.shape = X, tuple(X.shape)

    def __getitem__(self, idx):
        return np.asarray(self.X[np.asarray(idx)].compute(), dtype=np.float64)


def solve_key(C) -> str:
    """The key of ``SweepResult.timings`` that holds the seconds spent on one C value (the
    folds' columns of every kernel setting; a continuation chain's time is split by C)."""
    return f"solve C={float(C):g}"


def _best_model(X, y_enc, classes, record: KernelRecord, intercept, tol, max_iter):
    """A fitted :class:`muflow.SVC` from the refit of the best configuration on all samples.

    The refit ran while the Gram was in memory (:func:`muflow.selection.kernel_solve.refit`), so
    nothing is built or solved here: :meth:`muflow.SVC.from_solution` sets the fitted
    attributes exactly as ``SVC.fit`` would.
    """
    from muflow.model import SVC
    from muflow.solvers import DualSolution

    refit = record.refit
    assert refit.done, "the best setting is always refitted (see scoring.beats)"
    viol = np.asarray(refit.kkt_violation)
    # SMO's pair steps go with it: the model's n_iter_ counts them, as SVC.fit's does
    counts = {} if refit.pair_steps is None else {"pair_steps": int(refit.pair_steps)}
    solution = DualSolution(alpha=np.asarray(refit.alpha), bias=np.asarray(refit.bias),
                            n_iter=int(refit.n_iter),
                            objective_curve=np.asarray(refit.curve, dtype=np.float64),
                            kkt_violation=viol, converged=viol <= tol, timings=counts,
                            solver=record.solver)
    # the parameters as the grid named them ("scale" stays "scale", as SVC.fit keeps it); the
    # kernel holds their values resolved on these data
    named = {k: v for k, v in record.setting.items() if k in ("gamma", "degree", "coef0")}
    return SVC.from_solution(solution, X=X, y_encoded=y_enc, classes=classes, kernel=record.kernel,
                             fit_time=refit.seconds, C=float(record.rows[refit.c_index].C),
                             solver=record.solver, intercept=intercept, tol=tol, max_iter=max_iter,
                             **named)
