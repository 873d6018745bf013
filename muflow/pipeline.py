"""The stages of the main job, as plain functions over a run directory.

``python -m muflow run`` and the Prefect flows in ``flows/`` call these; this module never
imports Prefect. Each stage reads what earlier stages wrote into the run directory and
writes its own output there, atomically (a temporary name, then a rename), so

- a stage whose output exists is finished: calling it again returns that output without
  computing anything (a retried or resumed run skips finished stages);
- a stage that fails leaves no half-written output behind.

Every call appends one line to ``stages.log`` in the run directory (``<stage> computed`` or
``<stage> reused``), which is how a person or a test sees what a rerun recomputed.

The run directory's bookkeeping (a stage's record, the log, the configuration it holds) is
:mod:`muflow.run_directory`'s, the report stage and the summaries are
:mod:`muflow.run_report`'s, the data a stage reads :mod:`muflow.run_data`'s, and the cluster
the stages use :mod:`muflow.run_cluster`'s; this module holds the computing stages and is
the one place the flows and the ``run`` command call, so it names the report stage and the
run directory's entry points too.

Run directory::

    config.json            the validated run configuration (and the train flow's SVC params)
    data.json              the source's fingerprint (files, sizes, modification times or
                           ETags), the split's seed, and the data's description
    data.npz               in process only: the train/test split (a source read by the
                           workers is not copied: they read it again on a new cluster)
    gram.json              each kernel setting's plan (store or stream, and why) and the Gram
                           stores of those that read one (in gram/ by default)
    sweep/                 results.csv, best.json, plots (PNG), ... from muflow.selection
    sweep-summary.json     the sweep's best configuration, counts and the paths of its outputs
    model/                 the best configuration refitted on the whole training set
    metrics.json           test-set metrics of that model
    objective.png          its dual objective curve
    report.md              the report, linking all of the above
    summary.json           the rows of the summary table the command line prints
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from muflow.config import RunConfig
from muflow.exceptions import MuflowInputError
from muflow.kernels import kernel_from_setting
from muflow.run_directory import gram_dir, read_record, stage, stage_log, start_run  # noqa: F401
from muflow.run_report import (best_params, plot_paths, results_markdown,  # noqa: F401
                               summary_rows, write_report)
from muflow.run_data import (check_classes, check_solver_on_data, check_source_unchanged,  # noqa: F401
                             check_test, data_home, layout_record,
                             load_split, publish, read_split_on_workers, reads_on_workers,
                             release_data, source_fingerprint, split_in_process, split_on_cluster,
                             test_split, training_split)

STAGES = ("data", "gram", "sweep", "refit", "evaluate", "report")


def gram_dtype(cfg: RunConfig) -> str:
    """The dtype of the stores the sweep reads: float32 for the Dask operator
    (:func:`muflow.gram.operator_for`), float64 when K is solved in this process."""
    from muflow.selection.kernel_plan import store_dtype

    return store_dtype(cfg.sweep.on_cluster)


# ----------------------------------------------------------------------------- stages

def prepare_data(cfg: RunConfig, run_dir, client=None) -> dict:
    """Stage ``data``: read and validate the data set and split it (stratified, seeded), or
    read the test set of ``data.test_path``; a resumed run first checks that the source
    has not changed (:func:`check_source_unchanged`).

    Where it is read is :func:`data_home`'s: in this process (output ``data.npz``, the split,
    and ``data.json``), or by the workers of ``client`` (output ``data.json`` only: the
    split stays on the workers, published for the later stages, :func:`split_on_cluster`).
    """
    check_source_unchanged(cfg, run_dir)
    return _prepare_data(cfg, run_dir, client)


@stage("data", "data.json")
def _prepare_data(cfg: RunConfig, run_dir, client=None) -> dict:
    """The data stage's work (see :func:`prepare_data`)."""
    fingerprint = source_fingerprint(cfg)
    if data_home(cfg, client) == "workers":
        X_train, X_test, y_train, y_test, layout = read_split_on_workers(cfg, client)
        classes = check_classes(cfg, y_train)
        check_solver_on_data(cfg, X_train)
        publish(client, run_dir, X_train, X_test, y_train, y_test)
        return {"source": cfg.data.source().label, "home": "workers",
                "n_samples": int(X_train.shape[0] + X_test.shape[0]),
                "n_features": int(X_train.shape[1]), "n_train": int(X_train.shape[0]),
                "n_test": int(X_test.shape[0]), **layout_record(layout),
                "classes": [_json_value(c) for c in classes],
                "fingerprint": fingerprint}
    return split_in_process(cfg, run_dir, fingerprint)


def kernel_plans(cfg: RunConfig, run_dir, client=None, X_train=None) -> list:
    """``[(setting, kernel, KernelPlan), ...]``: the store-or-stream plan of every kernel
    setting of the grid over the training split, by the rule the sweep follows
    (:func:`muflow.selection.kernel_plan.plan_setting`, given the sweep's client: ``client``
    only with ``sweep.on_cluster``), so a store is built exactly where the sweep reads one."""
    from muflow.selection.kernel_plan import plan_setting, sweep_solves

    if X_train is None:
        X_train = _train_input(cfg, run_dir, client)
    sweep_client = client if cfg.sweep.on_cluster else None
    solves = sweep_solves(cfg.sweep.folds, len(cfg.grid.sorted_C()))
    plans = []
    for setting in cfg.grid.kernel_settings():
        # the sweep's own constructor: the stores built here carry the keys it looks up
        kernel = kernel_from_setting(setting, X_train, intercept=cfg.sweep.intercept)
        plans.append((setting, kernel, plan_setting(X_train, kernel, solver=cfg.sweep.solver,
                                                    intercept=cfg.sweep.intercept, solves=solves,
                                                    client=sweep_client, cache_dir=gram_dir(cfg, run_dir),
                                                    storage_options=cfg.gram.options())))
    return plans


def _train_input(cfg, run_dir, client=None):
    X_train, _ = training_split(cfg, run_dir, client)
    if hasattr(X_train, "dask") or hasattr(X_train, "indptr"):
        return X_train
    return np.asarray(X_train, dtype=np.float64)


def needs_cluster(cfg: RunConfig, run_dir) -> bool:
    """Whether the run has work for a Dask cluster: the sweep runs there
    (``sweep.on_cluster``), or some kernel setting's plan reads a Gram store, which the Gram
    stage builds on the cluster. A run whose every setting is on rows on demand in this
    process needs none (the flows then start no LocalCluster)."""
    if cfg.sweep.on_cluster:
        return True
    done = Path(run_dir) / "gram.json"
    if done.exists():  # a resumed run: the stage's record, not a new look at the disk
        return any(s["store"] for s in read_record(done).get("settings", [{"store": True}]))
    return any(plan.store for _, _, plan in kernel_plans(cfg, run_dir))


@stage("gram", "gram.json")
def build_gram_stores(cfg: RunConfig, run_dir, client=None) -> dict:
    """Stage ``gram``: build or reuse, in :func:`gram_dir` (a URL opened with
    ``gram.storage_options``, here and by the workers), the Gram store of K(X_train,
    X_train) of every kernel setting whose plan reads one (:func:`kernel_plans`); a
    setting on rows on demand or on X partitioned over the workers gets no store (an n x n
    store nobody would read). Output: ``gram.json``: ``stores`` (each store built or
    reused: url, tiles computed, seconds) and ``settings`` (per kernel setting its plan:
    path, reason, whether it has a store)."""
    from muflow.gram import ensure_gram

    X_train = _train_input(cfg, run_dir, client)
    stores, settings = [], []
    for setting, kernel, plan in kernel_plans(cfg, run_dir, client, X_train):
        entry = {"kernel": setting, **plan.to_dict(), "store_url": None}
        if plan.store:
            gram, report = ensure_gram(X_train, kernel, client=client, cache_dir=gram_dir(cfg, run_dir),
                                       dtype=gram_dtype(cfg), storage_options=cfg.gram.options())
            stores.append({"kernel": setting, "store": gram.url, "tiles": report.total,
                           "computed": len(report.computed), "seconds": round(report.seconds, 3)})
            entry["store_url"] = gram.url
        settings.append(entry)
    info = {"cache_dir": gram_dir(cfg, run_dir), "stores": stores, "settings": settings}
    return info


@stage("sweep", "sweep-summary.json")
def sweep(cfg: RunConfig, run_dir, client=None, *, progress=True,
          resume_command: str | None = None) -> dict:
    """Stage ``sweep``: cross-validate every configuration of the grid with
    :func:`muflow.selection.run_sweep` into ``sweep/``. The solves run on the cluster behind
    ``client`` only with ``sweep.on_cluster = true`` (X partitioned over the workers: the
    working-set solver, or the multiplicative solvers on kernel panels computed there, or on
    the Dask Gram operator when those do not fit; calls to the workers every iteration, worth it
    when K does not fit here); otherwise in this process, each kernel setting by its plan
    (:func:`kernel_plans`, the rule the Gram stage followed): K read from its Gram store
    into memory (SMO by default), which on small and medium data is much faster, or rows
    on demand (the working-set solver) above the sweep's stored-K size. Always
    ``resume=True``: after a failure, the kernel settings it finished (``sweep/kernels/``)
    are read back, not recomputed, and the Gram stores come from :func:`gram_dir`. Output:
    ``sweep-summary.json`` (best configuration, the paths of the sweep's outputs, its
    counts of Grams built and settings resumed, and ``kernel_paths``: per kernel setting
    the path taken, why, the solver and its seconds); ``sweep/best_model/`` is saved once,
    with how ``data.path`` was read (``data.json``: its features' names, an svmlight file's
    indexing), as ``model/`` is. The test split is scored by the ``evaluate`` stage alone.
    A sweep cut at ``sweep.time_limit`` warns naming
    ``resume_command``, the command that continues the run (the ``run`` command's own; by
    default ``python -m muflow run CONFIG.toml --out RUN_DIR --resume``): resuming the
    sweep alone would leave the run's later stages undone."""
    from muflow import selection

    t0 = time.perf_counter()
    X_train, y_train = training_split(cfg, run_dir, client if cfg.sweep.on_cluster else None)
    data = read_record(run_dir / "data.json")  # how data.path was read: the split has no names
    result = selection.run_sweep(
        X_train, y_train, cfg.grid, out_dir=str(run_dir / "sweep"),
        client=client if cfg.sweep.on_cluster else None, cache_dir=gram_dir(cfg, run_dir),
        storage_options=cfg.gram.options(),
        resume=True, progress=progress, **cfg.sweep.sweep_options(),
        feature_names=data.get("feature_names"),
        svmlight_zero_based=data.get("svmlight_zero_based"),
        resume_command=resume_command or f"python -m muflow run CONFIG.toml --out {run_dir} --resume")
    paths = {k: [str(p) for p in v] if isinstance(v, (list, tuple)) else str(v)
             for k, v in dict(result.paths).items()}
    kernel_paths = [{"setting": r["setting"], "path": r["gram"], "reason": r.get("reason", ""),
                     "solver": r["solver"], "solve_path": r["path"],
                     "solve_seconds": round(float(r["solve_seconds"]), 3)}
                    for r in result.path_report.get("settings", [])]
    info = {"best": dict(result.best), "paths": paths,
            "kernel_paths": kernel_paths,
            "n_configurations": int(len(result.table)), "counts": dict(result.counts),
            "unfinished": int(sum(not row.finished for row in result.table)),  # sweep.time_limit
            "timings": {k: round(float(v), 3) for k, v in result.timings.items()},
            "seconds": round(time.perf_counter() - t0, 3)}
    return info


def svc_params(cfg: RunConfig, params: dict) -> dict:
    """The keyword arguments of the ``train`` flow's :class:`muflow.SVC`: ``params`` over
    the configuration's ``[sweep]`` ``solver``, ``intercept``, ``tol`` and ``max_iter``
    (``params`` win: every SVC keyword may be given), checked as ``SVC.fit`` checks them,
    so that params it would refuse are refused before a run directory records them."""
    import inspect

    import muflow

    if not isinstance(params, dict):
        raise MuflowInputError(f"train params must be a mapping of SVC keywords, got {params!r}")
    allowed = list(inspect.signature(muflow.SVC).parameters)
    unknown = [k for k in params if k not in allowed]
    if unknown:
        raise MuflowInputError(f"train params: {', '.join(map(repr, unknown))} is no SVC keyword; "
                               f"SVC takes {', '.join(allowed)}")
    kwargs = {"solver": cfg.sweep.solver, "intercept": cfg.sweep.intercept, "tol": cfg.sweep.tol,
              "max_iter": cfg.sweep.max_iter, **params}
    try:
        muflow.SVC(**kwargs)._check_params()
    except MuflowInputError as exc:
        raise type(exc)(f"train params: {exc}") from None
    return kwargs


@stage("refit", "refit.json")
def refit_best(cfg: RunConfig, run_dir, params: dict | None = None) -> dict:
    """Stage ``refit``: the best configuration fitted on the whole training set.

    After a sweep this is the sweep's own best model: :func:`muflow.selection.run_sweep` solves
    the all-samples problem of every configuration in the same batch as the folds, so the
    refit needs no new Gram and no new solve; it is loaded and saved as ``model/``. With
    ``params`` (the ``train`` flow) an :class:`muflow.SVC` of :func:`svc_params` is fitted
    here instead.
    Output: ``model/`` (:func:`muflow.save`), ``objective.png``, ``refit.json``.
    """
    import muflow

    t0 = time.perf_counter()
    if params is None:
        sw = read_record(run_dir / "sweep-summary.json")
        params = best_params(sw)
        model = muflow.load(sw["paths"]["best_model"])
        source = "the sweep's all-samples solve"
    else:
        X_train, y_train = training_split(cfg, run_dir)
        model = muflow.SVC(**svc_params(cfg, params)).fit(X_train, y_train)
        source = "fitted by the train stage"
    data = read_record(run_dir / "data.json")
    names = data.get("feature_names")  # the split's arrays have none: data.path's header
    if names is not None:
        model.feature_names_in_ = np.asarray(names, dtype=object)
    muflow.save(model, run_dir / "model", svmlight_zero_based=data.get("svmlight_zero_based"))
    from muflow.report import plot_objective_curves

    plot_objective_curves(model.objective_curve_, run_dir / "objective.png",
                          title=f"refit: {model.solver_}, {params}")
    from muflow.solvers.registry import svc_iteration_unit

    # n_iter_'s unit, the solver's (SMO: libsvm's pair steps), as SVC.fit counts them
    info = {"params": params, "source": source, "solver": model.solver_,
            "iterations": int(np.max(model.n_iter_)),
            "iteration_unit": svc_iteration_unit(model.solver_),
            "kkt_violation": float(np.max(model.kkt_violation_)), "tol": float(model.tol),
            "converged": bool(np.all(model.converged_)),
            "support_vectors": int(len(model.support_)), "seconds": round(time.perf_counter() - t0, 3)}
    return info


@stage("evaluate", "metrics.json")
def evaluate(cfg: RunConfig, run_dir, client=None) -> dict:
    """Stage ``evaluate``: test-set accuracy and confusion matrix of ``model/``, predicted
    where the test split is (on the workers of ``client`` for a source they read: only the
    predicted labels come here). Output: ``metrics.json``.

    The matrix has a row for every class of the test set, those the training split lacks
    among them (a separate ``data.test_path``): the model never predicts them, so their
    rows count as errors and the matrix sums to ``n_test``, as the accuracy is taken over
    every test row. Such classes are listed in ``unseen_classes`` (class: rows) and warned
    about (:func:`muflow.data.test_labels.unseen_classes_note`).
    """
    import warnings

    import muflow
    from sklearn.metrics import balanced_accuracy_score, confusion_matrix

    from muflow.data.test_labels import unseen_classes, unseen_classes_note

    X_test, y_test = test_split(cfg, run_dir, client)
    y_test = np.asarray(y_test)
    model = muflow.load(run_dir / "model")
    with warnings.catch_warnings():  # the test split's columns are the model's, in its order
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        pred = model.predict(X_test)
    if hasattr(pred, "compute"):
        pred = pred.compute()
    unseen = unseen_classes(y_test, model.classes_, training="the training split")
    labels = np.union1d(model.classes_, y_test)
    if unseen:
        warnings.warn(unseen_classes_note(unseen), UserWarning, stacklevel=2)
    metrics = {"n_test": int(len(y_test)), "accuracy": float(np.mean(pred == y_test)),
               "balanced_accuracy": float(balanced_accuracy_score(y_test, pred)),
               "classes": [_json_value(c) for c in labels],
               "confusion_matrix": confusion_matrix(y_test, pred, labels=labels).tolist(),
               "unseen_classes": unseen}
    return metrics


def _json_value(label):
    """A class as JSON holds it: ``2``, ``'cat'`` (not ``np.int64(2)``)."""
    return label.item() if hasattr(label, "item") else label
