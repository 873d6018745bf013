"""Contenders timed in fresh processes, round after round, the order rotated each round (the
first process after a pause finds its memory pages cold on a virtual machine)."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def rotated_rounds(contenders, repeat, run_one):
    """``run_one(contender, out_path) -> record`` for every contender ``repeat`` times.

    A record holds ``fit_s`` and ``process_s``, or ``{"skipped": why}`` (a skipped contender
    is not run again). Returns ``(results, times)``: each contender's last record, its
    ``fit_s`` the median of its runs and ``fit_runs`` every run; ``times`` the runs.
    """
    results, times = {}, {c: [] for c in contenders}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(repeat):
            order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
            for contender in order:
                if "skipped" in results.get(contender, {}):
                    continue
                rec = run_one(contender, Path(tmp) / f"{contender}-{r}.json")
                results[contender] = rec
                if "skipped" not in rec:
                    times[contender].append(rec["fit_s"])
                print(f"  run {r + 1} {contender}: " + (rec["skipped"] if "skipped" in rec else
                      f"fit {rec['fit_s']:.2f} s (process {rec['process_s']:.1f} s)"), flush=True)
    for contender, rec in results.items():
        if "skipped" not in rec:
            rec["fit_s"] = float(np.median(times[contender]))
            rec["fit_runs"] = times[contender]
    return results, times


def run_child(script, args, out: Path, env=None) -> dict:
    """``python script *args`` in a fresh process that writes its record to ``out``: the
    record with "process_s" (the process's wall time), or ``{"skipped": why}``."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script), *args, "--out", str(out)],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not out.exists():
        return {"skipped": f"failed: {proc.stderr.strip()[-400:]}"}
    record = json.loads(out.read_text())
    record["process_s"] = wall
    return record


def table_rows(results, contenders, width):
    """``(contender, record, time / muflow's)`` of each contender that ran, in order; a
    skipped one is printed as such (``width``: the table's first column)."""
    base = results.get("muflow", {})
    for contender in contenders:
        rec = results[contender]
        if "skipped" in rec:
            print(f"{contender:<{width}} skipped: {rec['skipped']}")
            continue
        yield contender, rec, rec["fit_s"] / base["fit_s"] if "fit_s" in base else float("nan")


def timed_fit(make, X_train, y_train, X_test, y_test, out):
    """In a child: ``make()`` an estimator and fit it; the record's common part (fit seconds,
    test accuracy, peak RSS) and the fitted estimator, or None when ``make`` cannot import
    its package (then ``out`` says skipped)."""
    try:
        est = make()
    except ImportError as exc:
        Path(out).write_text(json.dumps({"skipped": f"{type(exc).__name__}: {exc}"}))
        return None, None
    t0 = time.perf_counter()
    est.fit(X_train, y_train)
    fit_s = time.perf_counter() - t0
    return est, {"fit_s": fit_s, "accuracy": float(np.mean(est.predict(X_test) == y_test)),
                 "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def add_round_options(parser) -> None:
    """The options every side-by-side fit benchmark takes: ``--skip``, ``--repeat`` and the
    child process's own ``--child`` and ``--out``."""
    parser.add_argument("--skip", default="", help="comma-separated contenders to leave out")
    parser.add_argument("--repeat", type=int, default=1,
                        help="fits per contender, in rotated order; the median is reported "
                             "(default: 1)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
