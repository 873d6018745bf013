"""``python -m muflow sweep``: cross-validate a grid of kernels x parameters x C values."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from muflow.commands._common import (add_data_options, add_store_options, parse_C, parse_gamma,
                                     read_as_trained, read_from_args, source_from_args,
                                     store_options_from_args, with_names)
from muflow.exceptions import MuflowInputError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "sweep",
        help="model selection: cross-validate kernels x kernel parameters x C, refit the best",
        description=(
            "Cross-validate every configuration of a grid (kernels and their parameters x C "
            "values) on stratified, seeded folds. For one kernel setting, every (C, fold, "
            "class) problem is a column of one batch over the same Gram matrix: held-out "
            "samples are pinned at zero, not copied out. Writes into --out: results.csv (one "
            "row per configuration), best.json, best_model/ (refitted on all data, readable "
            "by `predict`), test_metrics.json (with --test-data), heatmap_<kernel>.png and "
            "convergence.png. The grid comes from the options below or from --config "
            "grid.toml (options given on the command line win)."),
    )
    add_data_options(p, required=True)
    p.add_argument("--config", metavar="TOML",
                   help="grid and options from a run configuration file (the schema of `run`): "
                        "its [grid], [sweep] and [gram] tables; [data] and [cluster] belong to "
                        "`run` (here: --data, --scheduler)")
    p.add_argument("--kernel", help="comma-separated kernels, e.g. rbf,poly (default: rbf); "
                                    "replaces the kernels of --config")
    p.add_argument("--gamma", help="comma-separated gamma values (numbers, 'scale', 'auto'); "
                                   "set on every kernel that takes gamma (those of --kernel, "
                                   "else of --config, whose other parameters stay)")
    p.add_argument("--degree", help="comma-separated degrees, set on every poly kernel (as --gamma)")
    p.add_argument("--coef0", help="comma-separated coef0 values, set on every poly and sigmoid "
                                    "kernel (as --gamma)")
    p.add_argument("--C", help="comma-separated positive finite C values, e.g. 0.01,0.1,1,10 "
                               "(default: 1)")
    p.add_argument("--folds", type=int, help="stratified folds (default: 5)")
    p.add_argument("--seed", type=int, help="seed of the fold shuffle (default: 0)")
    p.add_argument("--solver", help="solver name, or auto (default: SMO with continuation along C "
                                    "when K is in memory, a multiplicative solver on a cluster)")
    p.add_argument("--path", choices=("auto", "batched", "continuation", "compare"),
                   help="batched: all C in one solve; continuation: ascending C with warm "
                        "starts; compare: time both on the first kernel setting and keep the "
                        "faster (default: auto)")
    p.add_argument("--intercept", choices=("exact", "regularized", "none"), help="default: exact")
    p.add_argument("--tol", type=float, help="KKT tolerance of every problem (default: 1e-3)")
    p.add_argument("--max-iter", type=int,
                   help="iteration budget per solve, in the unit of `fit --max-iter` and the "
                        "model's n_iter_ (SMO: libsvm's pair steps; multiplicative solvers: "
                        "passes), so the best model's n_iter_ <= it (default: -1, no limit, as fit's)")
    p.add_argument("--halving", type=int, metavar="ETA",
                   help="successive halving with factor ETA >= 2 (batched path; off by default)")
    p.add_argument("--halving-min-iter", dest="halving_min_iter", type=int, metavar="N",
                   help="with --halving: iterations of the first rung; rung r runs "
                        "N * ETA**r, the configurations left after each rung going on "
                        "(default: 10)")
    p.add_argument("--n-jobs", dest="n_jobs", type=int,
                   help="threads the sweep uses, forked fold chains included (default: every "
                        "core this process may use, at most MUFLOW_NUM_THREADS; -1: the same)")
    p.add_argument("--cache-size", dest="cache_size", type=float, metavar="MB",
                   help="megabytes of kernel rows each solve caches where rows are computed on "
                        "demand (above the sweep's stored-K size: every fold's solve and the "
                        "refit; each worker's with --scheduler), as SVC's cache_size "
                        "(default: 256)")
    p.add_argument("--time-limit", dest="time_limit", type=float, metavar="SECONDS",
                   help="stop the sweep after SECONDS: running solves stop with their best "
                        "iterates, settings not started are skipped, unfinished configurations "
                        "say finished=False in results.csv; `sweep --resume` completes them "
                        "(default: no limit; [sweep] time_limit in --config)")
    p.add_argument("--test-data", metavar="PATH", help="test set, same format as --data")
    p.add_argument("--out", required=True, metavar="DIR", help="run directory")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted sweep in DIR: finished kernel settings are not redone")
    p.add_argument("--cache-dir", metavar="DIR", help="Gram store cache (see `gram --help`)")
    add_store_options(p)
    p.add_argument("--scheduler", metavar="ADDR",
                   help="address of a running Dask scheduler (tcp://host:8786): its workers read "
                        "--data (X never enters this process) and the working-set solver runs "
                        "there (with --solver m3, munk or another multiplicative solver, on "
                        "kernel panels computed there); its dashboard link is printed; default: "
                        "everything in this process")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for --scheduler to answer (default: 10)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--verbose", action="store_true",
                   help="with --scheduler: Dask's own log messages on stderr (default: into "
                        "DIR/distributed.log)")
    return p


def _split(text):
    return [t.strip() for t in str(text).split(",") if t.strip()]


def _numbers(text, name, convert=float):
    out = []
    for t in _split(text):
        try:
            out.append(convert(t))
        except ValueError:
            raise MuflowInputError(f"--{name} must be comma-separated numbers, got {t!r}") from None
    return out


def grid_from_args(args):
    """The grid and options from --config and the command line (the command line wins)."""
    from dataclasses import replace

    from muflow.config import load_grid_toml, takes_storage_options

    options = {}
    grid = None
    if args.config:
        grid, options = load_grid_toml(args.config)
    grid = _kernels_from_args(args, grid)
    if args.C:
        grid = replace(grid, C=[parse_C(t, finite=True) for t in _split(args.C)])
        if not grid.C:
            raise MuflowInputError("--C is empty; give e.g. --C 0.1,1,10")
    for key in ("folds", "seed", "solver", "path", "intercept", "tol", "max_iter", "halving",
                "halving_min_iter", "cache_dir", "n_jobs", "time_limit", "cache_size"):
        value = getattr(args, key)
        if value is not None:
            options[key] = value
    if args.cache_dir is not None and not takes_storage_options(args.cache_dir):
        options.pop("storage_options", None)  # --config's gram.storage_options: of its URL
    store_options = store_options_from_args(args, options.get("cache_dir"))
    if store_options is not None:  # the command line's win over --config's
        options["storage_options"] = store_options
    if options.get("halving") is None:
        if args.halving_min_iter is not None:
            raise MuflowInputError("--halving-min-iter sets the first rung of successive "
                                   "halving, which is off; add --halving ETA (e.g. --halving 3)")
        if args.config:
            from muflow.config import check_halving_min_iter
            check_halving_min_iter(options, f"{args.config}: ")
    if options.get("cache_size") is not None and not options["cache_size"] > 0:
        raise MuflowInputError(f"--cache-size must be a positive number of MB, got {options['cache_size']:g}")
    if args.time_limit is not None:  # named as written here: run_sweep's words are Python's
        from muflow.time_limit import check_time_limit

        check_time_limit(args.time_limit, "--time-limit")
    return grid.validate(), options


def _kernels_from_args(args, grid):
    """The grid with the command line's kernels and kernel parameters: ``--kernel``
    replaces the kernels (of ``--config``, or the default rbf); ``--gamma``, ``--degree``
    and ``--coef0`` set that parameter on every kernel that takes it, and are refused
    when none does."""
    from muflow.kernels import KERNEL_PARAMETERS
    from muflow.selection import SweepGrid

    given = {}
    if args.gamma:
        given["gamma"] = [parse_gamma(t) for t in _split(args.gamma)]
    if args.degree:
        given["degree"] = _numbers(args.degree, "degree", int)
    if args.coef0:
        given["coef0"] = _numbers(args.coef0, "coef0")
    if grid is not None and args.kernel is None and not given:
        return grid
    if args.kernel is not None or grid is None:  # --kernel '' is refused, not taken as rbf
        kernels = _split("rbf" if args.kernel is None else args.kernel)
        if not kernels:
            raise MuflowInputError("--kernel is empty; give e.g. --kernel rbf,poly")
        specs, where = [{"kernel": k} for k in kernels], ""
    else:
        specs, where = [dict(spec) for spec in grid.kernels], f" of {args.config}"
    names = ", ".join(str(spec["kernel"]) for spec in specs)
    for key, values in given.items():
        taking = [spec for spec in specs if key in KERNEL_PARAMETERS.get(spec["kernel"], ())]
        if not taking:
            raise MuflowInputError(f"--{key} is given but none of the kernels ({names}){where} "
                                   f"takes {key}")
        for spec in taking:
            spec[key] = values
    return SweepGrid(kernels=specs, C=grid.C if grid is not None else [1.0])


def run(args) -> int:
    from muflow.atomic import check_writable
    from muflow.commands._cluster import hint_when_interrupted
    from muflow.runlock import hold_run_dir, is_lock_file

    out = Path(args.out)
    check_writable(out, "--out", "the sweep's run directory", inside=True)
    made = not os.path.lexists(out)

    def kept():
        kernels = out / "kernels"
        done = kernels.is_dir() and any(kernels.iterdir())
        return f"its finished kernel settings are kept in {args.out}" if done else None

    try:
        # one sweep writes a directory; an interrupted one says what it kept
        with hold_run_dir(out, command="muflow sweep"), hint_when_interrupted(args, kept):
            return _run(args)
    finally:  # a sweep refused before it wrote anything leaves no directory behind
        if made and out.is_dir() and all(is_lock_file(p) for p in out.iterdir()):
            shutil.rmtree(out, ignore_errors=True)


def _as_read(layout) -> dict:
    """How --data was read, which the best model keeps for ``predict``: its columns' names
    (the workers' X has none) and an svmlight file's indexing."""
    return {"feature_names": layout.feature_names, "svmlight_zero_based": layout.zero_based}


def _test_set(args, layout, *, dense=False) -> dict:
    """``{"X_test", "y_test"}`` of --test-data read as --data was (``layout``): its columns
    by name where both files name them, else by position, an svmlight file with --data's
    indexing; ``dense`` where the model is fitted on dense X (the workers densify an
    svmlight file: a model fitted on dense X refuses sparse input). Empty without it."""
    if not args.test_data:
        return {}
    X_test, y_test, _ = read_as_trained(args, path=args.test_data, names=layout.feature_names,
                                        zero_based=layout.zero_based, trained_on="--data")
    if dense and hasattr(X_test, "toarray"):
        X_test = X_test.toarray()
    return {"X_test": X_test, "y_test": y_test}


def _run(args) -> int:
    from muflow.selection import run_sweep

    if args.resume and not (Path(args.out) / "sweep.json").is_file():
        raise MuflowInputError(f"--resume: {args.out} holds no sweep to resume (no sweep.json); "
                               "check --out, or run without --resume")

    grid, options = grid_from_args(args)
    if args.cache_dir is not None:
        from muflow.gram.store import check_directory

        check_directory(args.cache_dir, "--cache-dir")
    if args.scheduler:  # the workers read --data; its layout is checked here first
        from muflow.data.tabular import inspect

        layout = inspect(source_from_args(args), whole_files=False)
    else:
        X, y, layout = read_from_args(args, classes=True)
        X = with_names(X, layout.feature_names)  # kept by the best model, matched by predict
        options.update(_as_read(layout))
        test = _test_set(args, layout)
    options.setdefault("folds", 5)
    from muflow.commands._cluster import rerun_command

    options["resume_command"] = rerun_command(args)  # what a cut sweep's messages name
    if args.scheduler:
        from muflow.dask.cluster import connect, print_dashboard
        from muflow.commands._cluster import log_to_file, one_line_if_scheduler_lost

        log_file = Path(args.out) / "distributed.log"
        log_to_file(log_file, verbose=args.verbose)
        client = connect(args.scheduler, timeout=args.timeout)
        print_dashboard(client)
        try:
            from muflow.data.workers import read_on_workers

            # X stays there, dense; the layout says how an svmlight file's indices were read
            X, y, layout = read_on_workers(source_from_args(args), client, even=True)
            options.update(_as_read(layout))
            test = _test_set(args, layout, dense=True)
            with client.as_current(), one_line_if_scheduler_lost(
                    client, args, work="the sweep", log_file=log_file,
                    kept=lambda: f"its finished kernel settings are kept in {args.out}"):
                result = run_sweep(X, y, grid, out_dir=args.out, client=client,
                                   resume=args.resume, progress=not args.no_progress, **test,
                                   **options)
        finally:
            client.close()
    else:
        result = run_sweep(X, y, grid, out_dir=args.out, resume=args.resume,
                           progress=not args.no_progress, **test, **options)
    best = result.best
    params = ", ".join(f"{k}={v}" for k, v in best.items() if k not in ("cv_accuracy", "cv_accuracy_std"))
    print(f"best: {params}  CV accuracy {best['cv_accuracy']:.4f} (+/- {best['cv_accuracy_std']:.4f})")
    if result.test_metrics:
        print(f"test accuracy {result.test_metrics['accuracy']:.4f} on {result.test_metrics['n_samples']} samples")
    t = result.timings
    unfinished = sum(not row.finished for row in result.table)
    if unfinished:
        from muflow.selection.timeout import continuation, made_progress

        advice = continuation(args.out, options["resume_command"],
                              progressed=made_progress(result.table, result.counts))
        print(f"time limit reached: {unfinished} of {len(result.table)} configurations not "
              f"finished (finished=False in results.csv); {advice}")
    print(f"{len(result.table)} configurations; {result.counts['grams_built']} Gram builds, "
          f"{result.counts['kernels_resumed']} kernel settings resumed; time {t['total']:.1f} s "
          f"(Gram {t['gram']:.1f} s, solve {t['solve']:.1f} s, refit {t['refit']:.1f} s, "
          f"other {t['overhead']:.1f} s)")
    per_c = [(k[len("solve C="):], v) for k, v in t.items() if k.startswith("solve C=")]
    print("  solve by C: " + ", ".join(f"C={c} {v:.1f} s" for c, v in per_c))
    from muflow.routing import PATH_LABELS
    from muflow.selection.grid import setting_label

    for k in result.path_report.get("settings", []):  # which path each setting took, and why
        print(f"  {setting_label(k['setting'])}: {PATH_LABELS.get(k['gram'], k['gram'])}, "
              f"{k['solver']}: {k['reason']}")
    if "compare" in result.path_report:
        c = result.path_report["compare"]
        print(f"paths on the first kernel setting ({c['solver']}): batched {c['batched_seconds']:.2f} s, "
              f"continuation {c['continuation_seconds']:.2f} s -> {c['faster']}")
    for name, path in result.paths.items():
        print(f"  {name}: {path}")
    return 0
