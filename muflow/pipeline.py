"""The stages of the main job, as plain functions over a run directory.

``python -m muflow run`` and the Prefect flows in ``flows/`` call these; this module never
imports Prefect. Each stage reads what earlier stages wrote into the run directory and
writes its own output there, atomically (a temporary name, then a rename), so

- a stage whose output exists is finished: calling it again returns that output without
  computing anything (a retried or resumed run skips finished stages);
- a stage that fails leaves no half-written output behind.

Every call appends one line to ``stages.log`` in the run directory (``<stage> computed`` or
``<stage> reused``), which is how a person or a test sees what a rerun recomputed.

Run directory::

    config.json            the validated run configuration
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

import contextlib
import functools
import json
import time
from pathlib import Path

import numpy as np

from muflow.atomic import write_json, write_text
from muflow.config import RunConfig
from muflow.exceptions import MuflowInputError
from muflow.kernels import kernel_from_setting
from muflow.run_data import (check_classes, check_source_unchanged, check_test, data_home,  # noqa: F401
                             load_split, publish, read_split_on_workers, reads_on_workers,
                             release_data, source_fingerprint, split_in_process, split_on_cluster,
                             test_split, training_split)

STAGES = ("data", "gram", "sweep", "refit", "evaluate", "report")
_SVC_KEYS = ("kernel", "C", "gamma", "degree", "coef0")


# ---------------------------------------------------------------------------- helpers

def _write_json(path: Path, obj) -> Path:
    return write_json(path, obj, default=_json_default)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return str(o)


def _read_json(path: Path):
    return json.loads(Path(path).read_text())


def _stage(name: str, output: str):
    """Make ``compute(cfg, run_dir, ...) -> dict`` a stage: its output ``run_dir/output``
    (JSON, written atomically) is returned as is when it exists (logged ``reused``), else
    computed, written and logged ``computed`` with its seconds."""
    def wrap(compute):
        @functools.wraps(compute)
        def stage(cfg, run_dir, *args, **kwargs):
            run_dir = Path(run_dir)
            done = run_dir / output
            if done.exists():
                log_stage(run_dir, name, "reused")
                return _read_json(done)
            t0 = time.perf_counter()
            info = compute(cfg, run_dir, *args, **kwargs)
            _write_json(done, info)
            log_stage(run_dir, name, "computed", time.perf_counter() - t0)
            return info
        return stage
    return wrap


def log_stage(run_dir, stage: str, state: str, seconds: float = 0.0):
    """Append ``<stage> <state> <seconds>`` to the run directory's ``stages.log``."""
    with open(Path(run_dir) / "stages.log", "a") as fh:
        fh.write(f"{stage} {state} {seconds:.2f}\n")


def stage_log(run_dir) -> list[tuple[str, str]]:
    """``[(stage, "computed" | "reused"), ...]`` in the order they ran."""
    path = Path(run_dir) / "stages.log"
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines() if line.strip()]


def config_matches(run_dir, cfg: RunConfig) -> bool:
    """Whether ``run_dir/config.json`` records ``cfg`` (a run directory holds one run)."""
    path = Path(run_dir) / "config.json"
    try:
        recorded = _read_json(path)
    except ValueError:
        raise MuflowInputError(f"{path} is damaged (not JSON); delete the run directory "
                               f"{run_dir} or choose another") from None
    return recorded == json.loads(json.dumps(cfg.to_dict()))


def start_run(cfg: RunConfig, run_dir) -> Path:
    """Create the run directory (or reopen it) and record the configuration.

    A run directory that holds another configuration is refused: resuming it would mix
    the outputs of two runs.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.json"
    if path.exists():
        if not config_matches(run_dir, cfg):
            raise MuflowInputError(
                f"run directory {str(run_dir)!r} holds a run of another configuration; "
                "resume it with its own configuration or choose a new directory")
    else:
        _write_json(path, cfg.to_dict())
    return run_dir


def gram_dir(cfg: RunConfig, run_dir) -> str:
    """Where the Gram stores live: ``gram.cache_dir`` or ``<run dir>/gram``."""
    return cfg.gram.cache_dir or str(Path(run_dir) / "gram")


@contextlib.contextmanager
def dask_scheduler(cfg: RunConfig):
    """The scheduler address the stages connect to: ``cluster.scheduler`` (checked to answer
    within ``cluster.timeout``) or a LocalCluster of ``cluster.workers`` processes started
    here and closed on exit. Yields ``(address, dashboard_link or None)``."""
    from muflow.dask.cluster import connect, local_cluster

    if cfg.cluster.scheduler:
        client = connect(cfg.cluster.scheduler, timeout=cfg.cluster.timeout)
        try:
            yield cfg.cluster.scheduler, _dashboard(client)
        finally:
            client.close()
        return
    kwargs = {"n_workers": cfg.cluster.workers} if cfg.cluster.workers else {}
    if _has_bokeh():
        kwargs["dashboard_address"] = ":0"  # a free port; printed by the flow
    with local_cluster(**kwargs) as cluster:
        try:
            yield cluster.scheduler_address, _dashboard(cluster)
        except BaseException as exc:
            if isinstance(exc, Exception):
                raise
            # SIGINT or SIGTERM (muflow.signals; Prefect's flow engine raises its own
            # TerminationSignal for SIGTERM): the work is abandoned, no graceful wait
            from muflow.dask.cluster import stop_workers_now

            stop_workers_now(cluster)
            raise


def _has_bokeh() -> bool:
    try:
        import bokeh  # noqa: F401  (distributed serves a dashboard only with bokeh)
    except ImportError:
        return False
    return True


def _dashboard(obj):
    if not _has_bokeh():
        return None
    try:
        return obj.dashboard_link
    except Exception:
        return None


@contextlib.contextmanager
def client_of(address: str | None, timeout: float = 10.0):
    """A client connected to ``address`` (None: no client, the stages compute in process)."""
    if not address:
        yield None
        return
    from muflow.dask.cluster import connect

    client = connect(address, timeout=timeout)
    try:
        # Current in this thread: the actors of muflow.dask.store_operator.DaskGram find their
        # client through distributed.get_client(), and connect() does not make the client
        # the process-wide default (a Prefect task runs in a worker thread).
        with client.as_current():
            yield client
    finally:
        client.close()


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


@_stage("data", "data.json")
def _prepare_data(cfg: RunConfig, run_dir, client=None) -> dict:
    """The data stage's work (see :func:`prepare_data`)."""
    fingerprint = source_fingerprint(cfg)
    if data_home(cfg, client) == "workers":
        X_train, X_test, y_train, y_test, layout = read_split_on_workers(cfg, client)
        classes = check_classes(cfg, y_train)
        publish(client, run_dir, X_train, X_test, y_train, y_test)
        return {"source": cfg.data.source().label, "home": "workers",
                "n_samples": int(X_train.shape[0] + X_test.shape[0]),
                "n_features": int(X_train.shape[1]), "n_train": int(X_train.shape[0]),
                "n_test": int(X_test.shape[0]), "format": layout.format,
                "features": list(layout.features), "label": layout.label,
                "classes": [c.item() if hasattr(c, "item") else c for c in classes],
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
                                                    client=sweep_client, cache_dir=gram_dir(cfg, run_dir))))
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
        return any(s["store"] for s in _read_json(done).get("settings", [{"store": True}]))
    return any(plan.store for _, _, plan in kernel_plans(cfg, run_dir))


@_stage("gram", "gram.json")
def build_gram_stores(cfg: RunConfig, run_dir, client=None) -> dict:
    """Stage ``gram``: build or reuse, in :func:`gram_dir`, the Gram store of K(X_train,
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
                                       dtype=gram_dtype(cfg))
            stores.append({"kernel": setting, "store": gram.url, "tiles": report.total,
                           "computed": len(report.computed), "seconds": round(report.seconds, 3)})
            entry["store_url"] = gram.url
        settings.append(entry)
    info = {"cache_dir": gram_dir(cfg, run_dir), "stores": stores, "settings": settings}
    return info


@_stage("sweep", "sweep-summary.json")
def sweep(cfg: RunConfig, run_dir, client=None, *, progress=True) -> dict:
    """Stage ``sweep``: cross-validate every configuration of the grid with
    :func:`muflow.selection.run_sweep` into ``sweep/``. The solves run on the cluster behind
    ``client`` only with ``sweep.on_cluster = true`` (X partitioned over the workers: the
    working-set solver, or the multiplicative solvers on kernel panels computed there, or on
    the Dask Gram operator when those do not fit; one round trip per iteration, worth it
    when K does not fit here); otherwise in this process, each kernel setting by its plan
    (:func:`kernel_plans`, the rule the Gram stage followed): K read from its Gram store
    into memory (SMO by default), which on small and medium data is much faster, or rows
    on demand (the working-set solver) above the sweep's stored-K size. Always
    ``resume=True``: after a failure, the kernel settings it finished (``sweep/kernels/``)
    are read back, not recomputed, and the Gram stores come from :func:`gram_dir`. Output:
    ``sweep-summary.json`` (best configuration, the paths of the sweep's outputs, its
    counts of Grams built and settings resumed, and ``kernel_paths``: per kernel setting
    the path taken, why, the solver and its seconds). The test split is scored by the
    ``evaluate`` stage alone."""
    from muflow import selection

    t0 = time.perf_counter()
    X_train, y_train = training_split(cfg, run_dir, client if cfg.sweep.on_cluster else None)
    result = selection.run_sweep(
        X_train, y_train, cfg.grid, out_dir=str(run_dir / "sweep"),
        client=client if cfg.sweep.on_cluster else None, cache_dir=gram_dir(cfg, run_dir),
        resume=True, progress=progress, **cfg.sweep.sweep_options())
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


def best_params(sweep_info: dict) -> dict:
    """SVC keyword arguments of the sweep's best configuration."""
    best = sweep_info["best"]
    params = {k: best[k] for k in _SVC_KEYS if k in best and best[k] is not None}
    if "kernel" not in params:
        raise MuflowInputError(f"the sweep's best configuration names no kernel: {best}")
    return params


@_stage("refit", "refit.json")
def refit_best(cfg: RunConfig, run_dir, params: dict | None = None) -> dict:
    """Stage ``refit``: the best configuration fitted on the whole training set.

    After a sweep this is the sweep's own best model: :func:`muflow.selection.run_sweep` solves
    the all-samples problem of every configuration in the same batch as the folds, so the
    refit needs no new Gram and no new solve; it is loaded and saved as ``model/``. With
    ``params`` (the ``train`` flow) an :class:`muflow.SVC` is fitted here instead.
    Output: ``model/`` (:func:`muflow.save`), ``objective.png``, ``refit.json``.
    """
    import muflow

    t0 = time.perf_counter()
    if params is None:
        sw = _read_json(run_dir / "sweep-summary.json")
        params = best_params(sw)
        model = muflow.load(sw["paths"]["best_model"])
        source = "the sweep's all-samples solve"
    else:
        X_train, y_train = training_split(cfg, run_dir)
        model = muflow.SVC(**params, solver=cfg.sweep.solver, intercept=cfg.sweep.intercept,
                           tol=cfg.sweep.tol, max_iter=cfg.sweep.max_iter).fit(X_train, y_train)
        source = "fitted by the train stage"
    muflow.save(model, run_dir / "model")
    from muflow.report import plot_objective_curves

    plot_objective_curves(model.objective_curve_, run_dir / "objective.png",
                          title=f"refit: {model.solver_}, {params}")
    from muflow.solvers.registry import svc_iteration_unit

    # n_iter_'s unit, the solver's (SMO: libsvm's pair steps), as SVC.fit counts them
    info = {"params": params, "source": source, "solver": model.solver_,
            "iterations": int(np.max(model.n_iter_)),
            "iteration_unit": svc_iteration_unit(model.solver_),
            "kkt_violation": float(np.max(model.kkt_violation_)),
            "support_vectors": int(len(model.support_)), "seconds": round(time.perf_counter() - t0, 3)}
    return info


@_stage("evaluate", "metrics.json")
def evaluate(cfg: RunConfig, run_dir, client=None) -> dict:
    """Stage ``evaluate``: test-set accuracy and confusion matrix of ``model/``, predicted
    where the test split is (on the workers of ``client`` for a source they read: only the
    predicted labels come here). Output: ``metrics.json``."""
    import muflow
    from sklearn.metrics import balanced_accuracy_score, confusion_matrix

    X_test, y_test = test_split(cfg, run_dir, client)
    model = muflow.load(run_dir / "model")
    pred = model.predict(X_test)
    if hasattr(pred, "compute"):
        pred = pred.compute()
    metrics = {"n_test": int(len(y_test)), "accuracy": float(np.mean(pred == y_test)),
               "balanced_accuracy": float(balanced_accuracy_score(y_test, pred)),
               "classes": [c.item() if hasattr(c, "item") else c for c in model.classes_],
               "confusion_matrix": confusion_matrix(y_test, pred, labels=model.classes_).tolist()}
    return metrics


def results_markdown(run_dir, *, max_rows: int = 50) -> str:
    """The sweep's results table (``results.csv``) as a Markdown table."""
    import csv

    info = _read_json(Path(run_dir) / "sweep-summary.json")
    path = info["paths"].get("results")
    if not path or not Path(path).exists():
        return "_no results table_\n"
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return "_empty results table_\n"
    head, body = rows[0], rows[1:]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_short(v) for v in r) + " |" for r in body[:max_rows]]
    if len(body) > max_rows:
        lines.append(f"\n_{len(body) - max_rows} more rows in results.csv_")
    return "\n".join(lines) + "\n"


def _short(v: str) -> str:
    try:
        f = float(v)
    except ValueError:
        return v
    return v if f.is_integer() and "." not in v else f"{f:.4g}"


def plot_paths(run_dir) -> list[Path]:
    """The PNG plots of a run: the sweep's and the refit's objective curve."""
    run_dir = Path(run_dir)
    found = sorted((run_dir / "sweep").rglob("*.png")) if (run_dir / "sweep").exists() else []
    if (run_dir / "objective.png").exists():
        found.append(run_dir / "objective.png")
    return found


def kernel_path_summary(kernel_paths: list) -> str:
    """``rows on demand (1 setting)``, ``stored Gram (2 settings), rows on demand (1
    setting)``: how many kernel settings took each path (:data:`muflow.routing.PATH_LABELS`)."""
    from collections import Counter

    from muflow.routing import PATH_LABELS

    counts = Counter(p["path"] for p in kernel_paths)
    return ", ".join(f"{PATH_LABELS.get(path, path)} ({k} setting{'' if k == 1 else 's'})"
                     for path, k in counts.items())


def kernel_paths_markdown(kernel_paths: list) -> str:
    """The report's table of kernel paths: one row per kernel setting, as the sweep recorded
    it (``sweep-summary.json``; a resumed setting keeps the record of the run that solved it)."""
    from muflow.routing import PATH_LABELS
    from muflow.selection.grid import setting_label

    lines = ["| setting | path | solver | reason | solve s |", "|---|---|---|---|---|"]
    lines += [f"| {setting_label(p['setting'])} | {PATH_LABELS.get(p['path'], p['path'])} | "
              f"{p['solver']} ({p['solve_path']}) | {p['reason'] or '_not recorded_'} | "
              f"{float(p['solve_seconds']):.2f} |" for p in kernel_paths]
    return "\n".join(lines) + "\n"


def summary_rows(run_dir) -> list[tuple[str, str]]:
    """``(item, value)`` rows of the run's summary (what the command line prints)."""
    run_dir = Path(run_dir)
    data = _read_json(run_dir / "data.json")
    rows = [("data", f"{data['source']} ({data['n_samples']} x {data['n_features']}, "
                     f"{data['n_train']} train / {data['n_test']} test)")]
    if (run_dir / "sweep-summary.json").exists():
        sw = _read_json(run_dir / "sweep-summary.json")
        rows.append(("configurations", f"{sw['n_configurations']} ({sw['counts'].get('kernels_resumed', 0)} "
                                       f"kernel settings resumed, {sw['counts'].get('kernels_solved', 0)} solved)"))
        if sw.get("kernel_paths"):
            rows.append(("kernel path", kernel_path_summary(sw["kernel_paths"])))
        if sw.get("unfinished"):  # cut at sweep.time_limit: said wherever the sweep shows
            rows.append(("unfinished configurations",
                         f"{sw['unfinished']} of {sw['n_configurations']}: cut at sweep.time_limit "
                         "(finished=False in sweep/results.csv)"))
        cut = " (not finished: cut at sweep.time_limit)" if sw["best"].get("finished") is False else ""
        rows.append(("best CV accuracy", f"{float(sw['best']['cv_accuracy']):.4f} "
                                         f"± {float(sw['best'].get('cv_accuracy_std', 0)):.4f}{cut}"))
    if (run_dir / "refit.json").exists():
        rf = _read_json(run_dir / "refit.json")
        rows += [("best configuration", ", ".join(f"{k}={v}" for k, v in rf["params"].items())),
                 ("solver", rf["solver"]),
                 ("iterations", f"{rf['iterations']}" + (f" ({rf['iteration_unit']})"
                                                           if rf.get("iteration_unit") else "")),
                 ("support vectors", str(rf["support_vectors"]))]
    if (run_dir / "metrics.json").exists():
        m = _read_json(run_dir / "metrics.json")
        rows += [("test accuracy", f"{m['accuracy']:.4f}"),
                 ("test balanced accuracy", f"{m['balanced_accuracy']:.4f}")]
    return rows


def write_report(cfg: RunConfig, run_dir) -> Path:
    """Stage ``report``: ``report.md`` linking the results table, the plots, the model
    and the metrics (relative links, so the run directory can be moved), and
    ``summary.json``."""
    run_dir = Path(run_dir)
    done = run_dir / "report.md"
    if done.exists():
        log_stage(run_dir, "report", "reused")
        return done
    rows = summary_rows(run_dir)
    _write_json(run_dir / "summary.json", rows)
    lines = ["# muflow run", "", "| item | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "## Files", ""]

    def rel(p):
        p = Path(p)
        try:
            return p.resolve().relative_to(run_dir.resolve()).as_posix()
        except ValueError:
            return p.as_posix()

    sw = _read_json(run_dir / "sweep-summary.json") if (run_dir / "sweep-summary.json").exists() else None
    if sw:
        for key, what in (("results", "sweep results (CSV)"), ("best", "best configuration"),
                          ("best_model", "sweep's best model")):
            if key in sw["paths"]:
                lines.append(f"- {what}: [{rel(sw['paths'][key])}]({rel(sw['paths'][key])})")
    lines += ["- refitted model: [model/](model/)", "- test metrics: [metrics.json](metrics.json)",
              "- configuration: [config.json](config.json)", ""]
    if sw and sw.get("kernel_paths"):
        lines += ["## Kernel paths", "", "Where each kernel setting's K came from and why "
                  "(stored Gram or rows on demand: muflow.routing.plan_kernel).", "",
                  kernel_paths_markdown(sw["kernel_paths"]), ""]
    if sw:
        lines += ["## Sweep results", "", results_markdown(run_dir), ""]
    m = _read_json(run_dir / "metrics.json")
    lines += ["## Test set", "", f"classes {m['classes']}, confusion matrix (rows: true, "
              f"columns: predicted): `{m['confusion_matrix']}`", "", "## Plots", ""]
    lines += [f"![{p.stem}]({rel(p)})" for p in plot_paths(run_dir)]
    write_text(done, "\n".join(lines) + "\n")
    log_stage(run_dir, "report", "computed")
    return done
