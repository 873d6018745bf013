"""Prefect flows of muflow: ``pipeline`` (the main job), and ``gram``, ``train`` and
``sweep`` on their own.

Every flow takes the same three infrastructure-free parameters (``pipeline`` also
``resume_command``, the command its warnings name to continue the run):

- ``config``: a run configuration (:mod:`muflow.config`): None for the embedded default, a
  path to a TOML file, or the TOML's content as a dict (what a deployment's parameters hold);
- ``out_dir``: the run directory; by default ``muflow-runs/<flow run name>-<id>`` in the
  working directory, the same for every retry of one flow run, so a retried run resumes;
  a relative one is taken in the flow's working directory and made absolute before
  anything is recorded or sent to the workers. A flow run holds its lock
  (:mod:`muflow.runlock`): a second flow run or ``muflow run`` on it is refused meanwhile;
- ``scheduler``: address of a running Dask scheduler (``tcp://host:8786``) overriding
  ``cluster.scheduler``; with neither, the flow starts a ``LocalCluster`` for the run.

Where the Dask work runs is decided at run time, by these parameters, not in the
decorators; Prefect settings (retries, run names, timeouts) are applied at run time too,
with ``flow.with_options(...)`` (see ``muflow/commands/run.py``) or in ``deploy/prefect.yaml``.
Why the tasks open a Dask client themselves rather than use a ``DaskTaskRunner``:
see :mod:`muflow.flows.tasks`.

Stages persist their outputs in the run directory (:mod:`muflow.pipeline`): rerunning a
flow run whose sweep failed rebuilds no Gram store, and the sweep resumes the kernel
settings it had finished.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from prefect import flow, get_run_logger

from muflow import config as run_config
from muflow import pipeline as stages
from muflow.flows import tasks
from muflow.run_cluster import dask_scheduler

DEFAULT_RUNS_ROOT = "muflow-runs"


def check_prefect_api(timeout: float = 5.0) -> str | None:
    """None when flows can run: no API URL is configured (Prefect then starts a temporary
    local server) or the configured one answers ``/health``; otherwise a message that says
    which URL does not answer and what to do."""
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return None
    try:
        httpx.get(url.rstrip("/") + "/health", timeout=timeout).raise_for_status()
    except Exception as exc:
        return (f"the Prefect API at {url} does not answer ({type(exc).__name__}: {exc}); start a "
                "server with `prefect server start`, or unset PREFECT_API_URL to run on a temporary "
                "local server")
    return None


def _setup(config, out_dir, scheduler):
    """The validated configuration (with ``scheduler`` applied) and the run directory, an
    absolute path: the Dask workers that write into it (the Gram stores) may run in another
    working directory."""
    cfg = run_config.resolve(config)
    if scheduler:
        run_config.check_scheduler_address(scheduler, "scheduler")
        cfg = cfg.with_overrides(cluster={"scheduler": scheduler})
    run_config.check_data_exists(cfg)
    if not out_dir:
        from prefect.runtime import flow_run

        out_dir = Path(DEFAULT_RUNS_ROOT) / f"{flow_run.name or 'run'}-{str(flow_run.id or '')[:8]}"
    return cfg, str(Path(out_dir).absolute())


@contextmanager
def _held(run_dir):
    """The run directory's lock (:func:`muflow.runlock.hold_run_dir`) for the flow's work:
    two flow runs given one ``out_dir`` (or a flow run and a ``muflow run``) would race on
    its records and stages; the second is refused naming the first's pid. The ``run``
    command, which holds it already, passes."""
    from muflow.runlock import hold_run_dir

    with hold_run_dir(run_dir, option="out_dir", holder="run (`muflow run` or a flow run)"):
        yield


def _start(cfg, run_dir, address=None, params=None):
    """Create (or reopen) the run directory with its configuration (and the ``train``
    flow's ``params``: a directory of other params is refused), then load, validate and
    split the data (the ``data`` stage; by the workers of ``address`` when the sweep runs
    there)."""
    stages.start_run(cfg, run_dir, params)
    tasks.prepare_data(cfg, run_dir, address)


@contextmanager
def _on_cluster(cfg, run_dir):
    """The run started (:func:`_start`) on the run's Dask scheduler, whose address it yields.

    The scheduler is ``cluster.scheduler`` (connected before anything is written) or a
    LocalCluster started for the block and closed after it
    (:func:`muflow.run_cluster.dask_scheduler`); its address and dashboard go to the flow
    run's log. No LocalCluster is started when the run has no work for one
    (:func:`muflow.pipeline.needs_cluster`: every kernel setting on rows on demand in this
    process, no Gram store to build, ``sweep.on_cluster`` off): it yields None and the
    stages compute in this process. With ``sweep.on_cluster`` the cluster comes first and
    its workers read the data (:func:`muflow.pipeline.data_home`); the split they hold is
    released when the block ends.
    """
    on_workers = cfg.sweep.on_cluster and not cfg.data.bundled  # the workers read the data
    if not cfg.cluster.scheduler and not on_workers:
        _start(cfg, run_dir)
        if not stages.needs_cluster(cfg, run_dir):
            get_run_logger().info("no Dask cluster: no Gram store to build and the sweep runs in "
                                  "this process (gram.json says why)")
            yield None
            return
    with dask_scheduler(cfg) as (address, dashboard):
        logger = get_run_logger()
        logger.info("Dask scheduler: %s", address)
        if dashboard:
            logger.info("Dask dashboard: %s", dashboard)
        if cfg.cluster.scheduler or on_workers:
            _start(cfg, run_dir, address)
        try:
            yield address
        finally:
            if on_workers:
                tasks.release_data(run_dir, address)


@flow(name="pipeline", log_prints=True)
def pipeline(config: dict | str | None = None, out_dir: str | None = None,
             scheduler: str | None = None, resume_command: str | None = None) -> dict:
    """Load and validate data -> build or reuse the Gram stores the kernel settings' plans
    read (store or stream: :func:`muflow.pipeline.kernel_plans`) -> sweep -> refit the best
    -> evaluate on the test set -> write the report, which says which path each setting
    took and why (and publish it as artifacts).

    ``resume_command``: what a sweep cut at ``sweep.time_limit`` names as the command that
    continues the run (the ``run`` command passes its own; default
    ``python -m muflow run CONFIG.toml --out OUT_DIR --resume``).

    Returns ``{"run_dir", "report", "summary"}``.
    """
    cfg, run_dir = _setup(config, out_dir, scheduler)
    with _held(run_dir):
        with _on_cluster(cfg, run_dir) as address:
            tasks.build_gram(cfg, run_dir, address)
            tasks.fit_grid(cfg, run_dir, address, resume_command)
            on_workers = stages.reads_on_workers(run_dir)
            if on_workers:  # the test split is on the workers: evaluated there
                tasks.refit_best(cfg, run_dir)
                tasks.evaluate(cfg, run_dir, address)
        if not on_workers:
            tasks.refit_best(cfg, run_dir)
            tasks.evaluate(cfg, run_dir)
        report = tasks.write_report(cfg, run_dir)
        tasks.publish_artifacts(run_dir)
    get_run_logger().info("report: %s", report)
    return {"run_dir": run_dir, "report": report, "summary": stages.summary_rows(run_dir)}


@flow(name="gram", log_prints=True)
def gram(config: dict | str | None = None, out_dir: str | None = None,
         scheduler: str | None = None) -> dict:
    """Build or reuse the Gram store of every kernel setting of the grid (training split)
    whose plan reads one: the plan the sweep follows (:func:`muflow.pipeline.kernel_plans`),
    so this flow alone builds exactly the stores a later ``sweep`` or ``pipeline`` run of
    the same configuration reads, and none for the settings on rows on demand or on X
    partitioned over the workers; ``gram.json`` records each setting's plan and reason."""
    cfg, run_dir = _setup(config, out_dir, scheduler)
    with _held(run_dir), _on_cluster(cfg, run_dir) as address:
        return tasks.build_gram(cfg, run_dir, address)


@flow(name="sweep", log_prints=True)
def sweep(config: dict | str | None = None, out_dir: str | None = None,
          scheduler: str | None = None) -> dict:
    """Cross-validate the grid (Gram stores built or reused first) and publish the results."""
    cfg, run_dir = _setup(config, out_dir, scheduler)
    with _held(run_dir):
        with _on_cluster(cfg, run_dir) as address:
            tasks.build_gram(cfg, run_dir, address)
            result = tasks.fit_grid(cfg, run_dir, address)
        tasks.publish_artifacts(run_dir, key_prefix="muflow-sweep")
    return result


@flow(name="train", log_prints=True)
def train(config: dict | str | None = None, out_dir: str | None = None,
          params: dict | None = None) -> dict:
    """Fit one configuration (``params``, SVC keywords; default RBF, C=1, gamma "scale";
    ``solver``, ``intercept``, ``tol`` and ``max_iter`` default to the configuration's
    ``[sweep]`` values) on the training split, evaluate it on the test split and write the
    report. In memory: no cluster. Params SVC refuses are refused before anything is
    written (:func:`muflow.pipeline.svc_params`). The params are recorded with the
    configuration (``config.json``): an ``out_dir`` that holds a model of other params, or
    a sweep, is refused."""
    cfg, run_dir = _setup(config, out_dir, None)
    params = params or {"kernel": "rbf", "C": 1.0, "gamma": "scale"}
    stages.svc_params(cfg, params)
    with _held(run_dir):
        _start(cfg, run_dir, params=params)
        tasks.refit_best(cfg, run_dir, params)
        metrics = tasks.evaluate(cfg, run_dir)
        report = tasks.write_report(cfg, run_dir)
        tasks.publish_artifacts(run_dir, key_prefix="muflow-train")
    return {"run_dir": run_dir, "report": report, "metrics": metrics}


if __name__ == "__main__":
    # The embedded default on a LocalCluster; the workers import this module, hence the guard.
    print(pipeline.with_options(retries=1)())
