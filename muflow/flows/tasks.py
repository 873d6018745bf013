"""Prefect tasks: small typed verbs, each a few lines calling :mod:`muflow.pipeline`.

No maths here. Every stage persists its own output in the run directory
(:mod:`muflow.pipeline`), so a retried task or a retried flow run finds the finished
stages' files and skips them; Prefect's own result persistence and caching are therefore
off (``NO_CACHE``, ``persist_result=False``): the run directory is the single record of
what is done, readable without Prefect.

A task retried for storage errors is not retried for an input error
(:func:`retry_unless_input_error`): it would fail the same way every time.

Dask: a task that needs the cluster opens a ``distributed.Client`` to the scheduler
address it is given and closes it when done (rather than ``prefect-dask``'s
``DaskTaskRunner``). The Prefect tasks of this pipeline are few and sequential; the
parallel work (Gram tiles, the batched solves) is inside muflow's own Dask graphs and
actors, which a DaskTaskRunner would not see. A client per task keeps one cluster for the
whole flow run (started by the flow, or an existing scheduler), adds no dependency, and
works the same on a laptop, a process worker and a remote cluster.
"""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from muflow import pipeline as stages
from muflow.config import RunConfig
from muflow.exceptions import MuflowInputError
from muflow.run_cluster import client_of


def retry_unless_input_error(task, task_run, state) -> bool:
    """Prefect's ``retry_condition_fn``: retry a failure unless it is an input error
    (:class:`~muflow.exceptions.MuflowInputError`, a ``DataFileError`` among them: bad data,
    a bad configuration, a run directory of another run), which fails the same way every
    time and whose message is the run's."""
    try:
        state.result()
    except MuflowInputError:
        return False
    except BaseException:  # noqa: BLE001  (whatever else failed: its retry policy decides)
        return True
    return True


#: Work that touches storage is retried: a transient file-system or object-store error
#: should not cost a run. An input error is not retried.
_STORAGE = dict(retries=2, retry_delay_seconds=2, retry_condition_fn=retry_unless_input_error,
                cache_policy=NO_CACHE, persist_result=False)
_COMPUTE = dict(cache_policy=NO_CACHE, persist_result=False)


@task(name="prepare-data", **_STORAGE)
def prepare_data(cfg: RunConfig, run_dir: str, scheduler: str | None = None) -> dict:
    """Read and validate the data set and split it: in this process, or by the workers of
    ``scheduler`` when the sweep runs there (:func:`muflow.pipeline.data_home`)."""
    with client_of(scheduler, cfg.cluster.timeout) as client:
        return stages.prepare_data(cfg, run_dir, client)


@task(name="build-gram", **_STORAGE)
def build_gram(cfg: RunConfig, run_dir: str, scheduler: str | None) -> dict:
    """Build (or reuse) on the cluster the Gram store of every kernel setting whose plan
    reads one (none for rows on demand); ``scheduler`` None: in this process."""
    with client_of(scheduler, cfg.cluster.timeout) as client:
        return stages.build_gram_stores(cfg, run_dir, client)


@task(name="fit-grid", retries=1, retry_delay_seconds=2, retry_condition_fn=retry_unless_input_error,
      **_COMPUTE)
def fit_grid(cfg: RunConfig, run_dir: str, scheduler: str | None,
             resume_command: str | None = None) -> dict:
    """Cross-validate the grid (resuming finished kernel settings) on the cluster; a sweep
    cut at its time limit names ``resume_command`` (:func:`muflow.pipeline.sweep`)."""
    with client_of(scheduler, cfg.cluster.timeout) as client:
        return stages.sweep(cfg, run_dir, client, resume_command=resume_command)


@task(name="refit-best", **_STORAGE)
def refit_best(cfg: RunConfig, run_dir: str, params: dict | None = None) -> dict:
    """The best configuration (or ``params``) fitted on the whole training set."""
    return stages.refit_best(cfg, run_dir, params)


@task(name="evaluate", **_COMPUTE)
def evaluate(cfg: RunConfig, run_dir: str, scheduler: str | None = None) -> dict:
    """Test-set metrics of the refitted model (predicted on the workers when they hold
    the test split)."""
    with client_of(scheduler, cfg.cluster.timeout) as client:
        return stages.evaluate(cfg, run_dir, client)


@task(name="release-data", **_COMPUTE)
def release_data(run_dir: str, scheduler: str) -> None:
    """Free the split the workers hold for this run. Best effort: it runs on every way out
    of the cluster block, and a scheduler that is gone has freed it already (its error,
    not this one, is the run's)."""
    try:
        with client_of(scheduler, timeout=5.0) as client:
            stages.release_data(run_dir, client)
    except Exception as exc:  # noqa: BLE001
        from prefect import get_run_logger

        get_run_logger().warning("the split on the workers was not released (%s)", exc)


@task(name="write-report", **_STORAGE)
def write_report(cfg: RunConfig, run_dir: str) -> str:
    """report.md linking the results table, plots, model and metrics."""
    return str(stages.write_report(cfg, run_dir))


def _key(text: str) -> str:
    """An artifact key: lowercase letters, digits and dashes only."""
    out = "".join(c if c.isalnum() else "-" for c in text.lower())
    return "-".join(p for p in out.split("-") if p)


@task(name="publish-artifacts", **_COMPUTE)
def publish_artifacts(run_dir: str, key_prefix: str = "muflow") -> list[str]:
    """Prefect artifacts of a run: the sweep results (Markdown table), the best configuration
    with its test metrics, and links to the plots and the report; their keys
    ``{key_prefix}-results``, ``-best``, ``-summary``, ``-plot-*`` and ``-report``, each flow
    with its own prefix (``muflow`` the pipeline's, ``muflow-sweep``, ``muflow-train``)."""
    run_dir = Path(run_dir)
    rows = stages.summary_rows(run_dir)
    keys = []

    def publish(create, key, **kwargs):
        create(key=key, **kwargs)
        keys.append(key)

    if (run_dir / "sweep-summary.json").exists():
        publish(create_markdown_artifact, f"{key_prefix}-results",
                markdown="# Sweep results\n\n" + stages.results_markdown(run_dir),
                description=f"cross-validation results of every configuration ({run_dir})")
    # the sweep flow evaluates nothing on the test set: its best by cross-validation alone
    what = ("best configuration and its test metrics" if (run_dir / "metrics.json").exists()
            else "best configuration by cross-validation")
    publish(create_markdown_artifact, f"{key_prefix}-best",
            markdown=f"# {what.capitalize()}\n\n| item | value |\n|---|---|\n"
                     + "\n".join(f"| {k} | {v} |" for k, v in rows),
            description=what)
    publish(create_table_artifact, f"{key_prefix}-summary",
            table=[{"item": k, "value": v} for k, v in rows], description="the run's summary table")
    for plot in stages.plot_paths(run_dir):
        publish(create_link_artifact, _key(f"{key_prefix}-plot-{plot.stem}"),
                link=plot.resolve().as_uri(), link_text=plot.name, description=f"plot {plot.name}")
    if (run_dir / "report.md").exists():
        publish(create_link_artifact, f"{key_prefix}-report",
                link=(run_dir / "report.md").resolve().as_uri(), link_text="report.md",
                description="the run's report")
    return keys
