"""``run --resume`` after a sweep that ``sweep.time_limit`` cut: the sweep is reopened.

The pipeline's stages are reused when their output exists (:mod:`muflow.pipeline`); a
sweep cut at its time limit writes its summary all the same (with ``"unfinished"``), so a
resumed run would reuse it, and the refit, evaluation and report built on it, as finished.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from muflow.run_directory import log_stage

#: The outputs that follow from the sweep's, last stage first, then the sweep's summary.
AFTER_CUT_SWEEP = ("summary.json", "report.md", "metrics.json", "objective.png", "model",
                   "refit.json", "sweep-summary.json")


def reopen_cut_sweep(run_dir) -> bool:
    """Before ``run --resume``: a sweep that ``sweep.time_limit`` cut (``"unfinished"`` in
    ``sweep-summary.json``) is not finished, so its summary and the outputs of the stages
    after it are removed (last stage first, the summary last: a resume stopped halfway does
    it again) and the run goes on from there: the sweep stage resumes (its finished kernel
    settings read back from ``sweep/kernels/``, the cut ones solved again) and the later
    stages run again on its result. Otherwise the stages would be reused as finished, the
    cut configurations with them. Returns whether it reopened the sweep."""
    run_dir = Path(run_dir)
    summary = run_dir / "sweep-summary.json"
    if not summary.exists() or not json.loads(summary.read_text()).get("unfinished"):
        return False
    for name in AFTER_CUT_SWEEP:
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    log_stage(run_dir, "sweep", "reopened")
    return True


__all__ = ["AFTER_CUT_SWEEP", "reopen_cut_sweep"]
