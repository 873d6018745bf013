"""``python -m muflow run [CONFIG.toml] [--scheduler ADDRESS] [--out DIR] [--resume]``:
the main job, run as the Prefect ``pipeline`` flow (:mod:`muflow.flows.pipeline`).

Stages: load and validate the data -> build or reuse the Gram stores (on a Dask cluster)
that the kernel settings' plans read (a setting on rows on demand gets none, and a run
with no store to build and ``sweep.on_cluster`` off starts no LocalCluster) -> sweep the grid -> refit the best -> evaluate it on the test set -> write the report.
With no arguments it runs the embedded default (:data:`muflow.config.DEFAULT_TOML`): a
LocalCluster on this machine, the bundled breast-cancer data, a small RBF and polynomial
grid; it prints a summary table and where the report is.

Prefect is imported only when the command runs (``import muflow`` never imports it).
Without ``PREFECT_API_URL`` the flow runs against a temporary local server that ends with
the command on every exit path, a ``SIGKILL`` included
(:mod:`muflow.flows.temporary_server`); with it, against that server (checked first: one
that does not answer is exit code 1, with nothing written).

Everything that can be checked before work starts is checked before the run directory
is created: the configuration (the solver against every kernel setting of the grid among
it), the data path, the run directory, the Dask scheduler, the
Prefect API. Each stage writes its outputs atomically, so a failed run leaves only
finished stages behind, which ``--resume --out DIR`` continues from.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

from muflow.cli import one_line, set_hint
from muflow.commands._cluster import (add_cluster_options, continue_hint, log_to_file,
                                      rerun_command)
from muflow.commands._common import add_data_options, data_overrides
from muflow.exceptions import MuflowInputError

EXIT_FAILURE = 1
RUN_LOG = "run.log"  # Prefect's and Dask's log records (--verbose: stderr)


def add_parser(subparsers):
    p = subparsers.add_parser(
        "run", help="run the main pipeline as a Prefect flow (default: bundled breast cancer, "
                    "RBF + poly grid, on a local Dask cluster)",
        description=(
            "Run the pipeline flow: load and validate the data, build or reuse the Gram "
            "stores on a Dask cluster, cross-validate the grid, refit the best "
            "configuration, evaluate it on the held-out test set and write a report. "
            "With no arguments it runs the embedded default (bundled breast-cancer data, a "
            "small RBF and polynomial grid, a local cluster). The run directory holds "
            "results.csv, PNG plots, the saved best model and report.md linking them. "
            "Exit codes: 0 success, 2 bad input or configuration, 1 failure (also an "
            "unreachable scheduler or Prefect API)."),
        epilog=(
            "CONFIG.toml tables and keys (all optional; see muflow/config.py): "
            "[data] path (file, directory, glob, list or URL), format, label_column, "
            "feature_columns, storage_options, test_path, n_features, test_size, seed, timeout; "
            "[grid] C, kernels; [sweep] folds, solver, tol, max_iter, seed, n_jobs, cache_size, on_cluster, path, intercept, halving, halving_min_iter (with halving), time_limit; "
            "[cluster] scheduler, workers, timeout; [gram] cache_dir, storage_options (of a URL "
            "cache_dir; default none). Prefect: set "
            "PREFECT_API_URL to run against a server, otherwise a temporary local one is used."),
    )
    p.add_argument("config", nargs="?", metavar="CONFIG.toml",
                   help="run configuration (TOML); default: the embedded default")
    add_cluster_options(p, scheduler_note="overrides cluster.scheduler")
    add_data_options(p, required=False, run=True)
    p.add_argument("--out", metavar="DIR",
                   help="run directory (default: a new folder under ./muflow-runs/); must be new "
                        "or empty unless --resume (one holding only run.log, a run stopped before "
                        "it wrote config.json, counts as empty)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out DIR: finished stages are not recomputed, the "
                        "sweep resumes its finished kernel settings")
    p.add_argument("--verbose", action="store_true",
                   help="Prefect's and Dask's own log messages on stderr, tracebacks included "
                        "(default: into DIR/run.log; Prefect's progress lines on stdout)")
    return p


def _out_path(args) -> Path:
    """``--out``, or a new folder under ``./muflow-runs/``: an absolute path, taken in the
    working directory, since the Dask workers that write into it (the Gram stores) may run
    in another."""
    if args.resume and not args.out:
        raise MuflowInputError("--resume needs --out DIR, the run directory to continue")
    if args.out:
        return Path(args.out).absolute()
    out = Path("muflow-runs").absolute() / datetime.now().strftime("run-%Y%m%d-%H%M%S")
    while out.exists():
        out = out.with_name(out.name + "-1")
    return out


def _check_run_dir(args, out: Path, cfg):
    """Refuse a run directory that this run cannot write into, before anything is written
    (its lock is held: no other run changes it meanwhile).

    A directory holding nothing but the lock and ``run.log`` is a run stopped (killed)
    before its flow wrote ``config.json``: nothing of it is kept, so a new run takes it
    as empty, and ``--resume``, with nothing to continue, says to run without it (as
    ``fit`` and ``sweep`` do).
    """
    if args.resume:
        config = out / "config.json"
        if not config.is_file():
            fix = ("run without --resume to start it from the beginning" if _holds_no_output(out)
                   else "check --out")
            raise MuflowInputError(
                f"--out {str(out)!r} holds no muflow run to resume (no config.json); {fix}")
        from muflow.run_directory import config_matches, other_configuration

        if not config_matches(out, cfg):
            raise MuflowInputError(
                f"--out {str(out)!r} holds a run of another configuration "
                f"({other_configuration(out, cfg)}); resume it with the configuration it was "
                "started with, or choose a new --out")
        from muflow.run_data import check_source_unchanged

        check_source_unchanged(cfg, out)  # never resumed on changed data
        return
    if (out / "config.json").is_file():
        from muflow.run_directory import config_matches, other_configuration

        if not config_matches(out, cfg):  # --resume would be refused as well
            raise MuflowInputError(
                f"--out {str(out)!r} holds a run of another configuration "
                f"({other_configuration(out, cfg)}); choose a new directory, or resume that "
                "run with the configuration it was started with")
    if out.exists() and (not out.is_dir() or not _holds_no_output(out)):
        raise MuflowInputError(
            f"--out {str(out)!r} exists and is not empty; add --resume to continue that run "
            "or choose a new directory")


def _holds_no_output(out: Path) -> bool:
    """Whether directory ``out`` holds nothing but its lock and ``run.log`` (what a run
    writes before its flow records its configuration)."""
    from muflow.runlock import is_lock_file

    return all(is_lock_file(p) or p.name == RUN_LOG for p in out.iterdir())


def _has_finished_stage(out: Path) -> bool:
    from muflow.run_directory import stage_log

    return bool(stage_log(out))


def run(args) -> int:
    # no telemetry from a library command
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from muflow.flows.temporary_server import launch_server, stop_server

    # The temporary Prefect server starts first: its own start (seconds) overlaps the
    # imports, the configuration's checks and the import of Prefect and the flows here.
    # Stopped unused when the settings name a server, and on every other way out.
    launched = None if os.environ.get("PREFECT_API_URL") else launch_server()
    try:
        return _run(args, launched)
    finally:
        if launched is not None:
            stop_server(launched[0])


def _run(args, launched) -> int:
    """The run: configuration, run directory and lock, then :func:`_run_held`."""
    from muflow.config import check_data_exists, default_config, load_config

    cfg = load_config(args.config) if args.config else default_config()
    if args.scheduler:
        from muflow.config import check_scheduler_address

        check_scheduler_address(args.scheduler, "scheduler")  # printed as --scheduler
        cfg = cfg.with_overrides(cluster={"scheduler": args.scheduler})
    if data_overrides(args):
        cfg = cfg.with_overrides(data=data_overrides(args))
    check_data_exists(cfg)
    out = _out_path(args)
    if not args.out:  # the command that continues the run names the folder chosen here
        args.argv = [*getattr(args, "argv", ["run"]), "--out", str(out)]
    if out.exists() and not out.is_dir():
        raise MuflowInputError(f"--out {str(out)!r} is a file; choose a directory")
    from muflow.atomic import check_writable

    check_writable(out, "--out", "the run directory", inside=True)
    created = not out.exists()
    from muflow.runlock import hold_run_dir

    with hold_run_dir(out):  # one writer: a second run on this --out is refused
        try:
            _check_run_dir(args, out, cfg)
            code = _run_held(args, cfg, out, created, launched)
        except BaseException:
            if created and out.exists() and not _has_finished_stage(out):
                shutil.rmtree(out, ignore_errors=True)  # nothing finished: leave nothing behind
            raise
        if code and created and out.exists() and not _has_finished_stage(out):
            shutil.rmtree(out, ignore_errors=True)
        return code


def _scheduler_lost(cfg, exc) -> bool:
    """Whether the run's own scheduler (``cluster.scheduler``) went away under it: a task
    raised for it, or raised something else and the scheduler no longer answers."""
    from muflow.dask.cluster import SchedulerUnreachableError, connect
    from muflow.exceptions import SchedulerLostError

    if not cfg.cluster.scheduler:
        return False  # a LocalCluster of the run's own: it ends with the run
    if isinstance(exc, (SchedulerLostError, SchedulerUnreachableError)):
        return True
    if isinstance(exc, MuflowInputError):
        return False
    try:
        connect(cfg.cluster.scheduler, timeout=min(cfg.cluster.timeout, 5.0)).close()
    except SchedulerUnreachableError:
        return True
    return False


def _run_held(args, cfg, out: Path, created: bool, launched=None) -> int:
    """The run, with ``out``'s lock held (:mod:`muflow.runlock`), against the temporary
    Prefect server ``launched`` ahead (:func:`run`) unless the settings name one."""
    from muflow.dask.cluster import SchedulerUnreachableError, connect
    from muflow.flows.temporary_server import temporary_prefect_server

    if cfg.cluster.scheduler:
        try:
            connect(cfg.cluster.scheduler, timeout=cfg.cluster.timeout).close()
        except SchedulerUnreachableError as exc:
            print(f"muflow run: error: {exc}", file=sys.stderr)
            return EXIT_FAILURE

    from muflow.flows.pipeline import check_prefect_api, pipeline

    problem = check_prefect_api()
    if problem:
        print(f"muflow run: error: {problem}", file=sys.stderr)
        return EXIT_FAILURE
    # the console keeps the stages' progress (stdout) and the failure's one line (stderr)
    log_to_file(out / RUN_LOG, verbose=args.verbose)
    if args.resume:
        from muflow.cut_sweep import reopen_cut_sweep

        if reopen_cut_sweep(out):  # a sweep cut at sweep.time_limit goes on from where it stopped
            print(f"muflow run: the sweep in {out} was cut at sweep.time_limit: resuming it",
                  flush=True)

    print(f"muflow run: run directory {out}", flush=True)
    t0 = time.perf_counter()
    try:
        with temporary_prefect_server(launched):
            result = pipeline.with_options(flow_run_name=f"muflow-run-{out.name}")(
                config=cfg.to_dict(), out_dir=str(out), resume_command=rerun_command(args))
    except BaseException as exc:
        finished = out.exists() and _has_finished_stage(out)
        if created and out.exists() and not finished:
            shutil.rmtree(out, ignore_errors=True)  # nothing finished: leave nothing behind
        kept = (None if not out.exists() else f"the finished stages are kept in {out}"
                if finished else f"{out} is kept")
        if isinstance(exc, Exception) and _scheduler_lost(cfg, exc):
            from muflow.exceptions import lost_scheduler_error

            log = f" (Prefect's and Dask's log: {out / RUN_LOG})" if out.exists() else ""
            raise lost_scheduler_error(cfg.cluster.scheduler, work="the run", next_step=(
                f"start the scheduler and its workers again; {continue_hint(args, kept)}{log}")
            ) from None
        if kept and not isinstance(exc, MuflowInputError):
            # the one line the command prints names the command that continues the work
            set_hint(exc, continue_hint(args, kept))
        if isinstance(exc, SchedulerUnreachableError):
            print(f"muflow run: error: {one_line(exc)}", file=sys.stderr)
            return EXIT_FAILURE
        raise
    seconds = time.perf_counter() - t0

    from rich.console import Console
    from rich.table import Table

    table = Table(title="muflow run")
    table.add_column("item")
    table.add_column("value")
    for k, v in result["summary"]:
        table.add_row(k, v)
    table.add_row("wall time (s)", f"{seconds:.1f}")
    console = Console()
    console.print(table)
    console.print(f"report: {result['report']}")
    return 0
