"""The report stage of the main job and the summaries it shows: ``report.md`` linking the
results table, the plots, the model and the metrics (:func:`write_report`), the rows of the
summary the command line prints (:func:`summary_rows`), and the tables and plot lists the
Prefect flows publish as artifacts. Everything here reads the records the earlier stages of
:mod:`muflow.pipeline` wrote into the run directory; nothing is computed again.
"""

from __future__ import annotations

from pathlib import Path

from muflow.atomic import write_text
from muflow.config import RunConfig
from muflow.data.test_labels import unseen_classes_note
from muflow.exceptions import MuflowInputError
from muflow.run_directory import log_stage, read_record, write_record


_SVC_KEYS = ("kernel", "C", "gamma", "degree", "coef0")


def best_params(sweep_info: dict) -> dict:
    """SVC keyword arguments of the sweep's best configuration (``sweep-summary.json``)."""
    best = sweep_info["best"]
    params = {k: best[k] for k in _SVC_KEYS if k in best and best[k] is not None}
    if "kernel" not in params:
        raise MuflowInputError(f"the sweep's best configuration names no kernel: {best}")
    return params


def _params_text(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def results_markdown(run_dir, *, max_rows: int = 50) -> str:
    """The sweep's results table (``results.csv``) as a Markdown table."""
    import csv

    info = read_record(Path(run_dir) / "sweep-summary.json")
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
    """``(item, value)`` rows of the run's summary (what the command line prints). The
    best configuration is the refit's (``refit.json``), or where no refit ran (the
    ``sweep`` flow) the sweep's own best (``sweep-summary.json``)."""
    run_dir = Path(run_dir)
    data = read_record(run_dir / "data.json")
    rows = [("data", f"{data['source']} ({data['n_samples']} x {data['n_features']}, "
                     f"{data['n_train']} train / {data['n_test']} test)")]
    sw = None
    if (run_dir / "sweep-summary.json").exists():
        sw = read_record(run_dir / "sweep-summary.json")
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
        rf = read_record(run_dir / "refit.json")
        rows += [("best configuration", _params_text(rf["params"])),
                 ("solver", rf["solver"]),
                 ("iterations", f"{rf['iterations']}" + (f" ({rf['iteration_unit']})"
                                                           if rf.get("iteration_unit") else "")),
                 ("support vectors", str(rf["support_vectors"]))]
        if rf.get("converged") is False:  # said wherever the summary shows, as SVC.fit warns
            from muflow.selection.convergence import advice, short_of_tol

            rows.append(("not converged", f"the model stopped at {rf['iterations']} iterations with "
                         f"{short_of_tol(rf['kkt_violation'], rf['tol'])}; "
                         f"{advice(max_iter='sweep.max_iter', tol='sweep.tol', solver='sweep.solver')}"
                         " and run again"))
    elif sw is not None:
        rows.append(("best configuration", _params_text(best_params(sw))))
    if (run_dir / "metrics.json").exists():
        m = read_record(run_dir / "metrics.json")
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
    write_record(run_dir / "summary.json", rows)
    lines = ["# muflow run", "", "| item | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", "## Files", ""]

    def rel(p):
        p = Path(p)
        try:
            return p.resolve().relative_to(run_dir.resolve()).as_posix()
        except ValueError:
            return p.as_posix()

    sw = read_record(run_dir / "sweep-summary.json") if (run_dir / "sweep-summary.json").exists() else None
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
    m = read_record(run_dir / "metrics.json")
    lines += ["## Test set", ""]
    if m.get("unseen_classes"):
        lines += [f"**Warning:** {unseen_classes_note(m['unseen_classes'])}.", ""]
    lines += [f"classes {m['classes']}, confusion matrix (rows: true, "
              f"columns: predicted): `{m['confusion_matrix']}`", "", "## Plots", ""]
    lines += [f"![{p.stem}]({rel(p)})" for p in plot_paths(run_dir)]
    write_text(done, "\n".join(lines) + "\n")
    log_stage(run_dir, "report", "computed")
    return done
