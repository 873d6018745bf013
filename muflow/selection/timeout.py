"""A sweep's ``time_limit``: which configurations it did not finish, and how they show.

:func:`muflow.selection.run_sweep` starts a :class:`muflow.time_limit.Deadline` and hands
its solve paths a solver bounded by it (:func:`muflow.time_limit.bounded`): the solves
running at the limit stop with their best iterates. The kernel setting they belong to
is *cut*: its rows say ``finished=False`` and it is not recorded as done, so
``sweep --resume`` solves it again. The settings after it are *not started*: a row per
configuration with NaN scores, ``finished=False``. The best model comes from finished
configurations when any finished.
"""

from __future__ import annotations

import dataclasses
import warnings

from sklearn.exceptions import ConvergenceWarning

from muflow.exceptions import MuflowError
from muflow.selection.grid import PARAM_ORDER
from muflow.selection.records import ConfigurationRow


def mark_unfinished(rows) -> list[ConfigurationRow]:
    """The rows of a kernel setting whose solves the time limit cut."""
    return [dataclasses.replace(r, finished=False) for r in rows]


def not_started_rows(setting, Cs, folds, info, path) -> list[ConfigurationRow]:
    """One row per C of a kernel setting the time limit left unstarted: NaN scores."""
    nan = float("nan")
    params = {k: setting.get(k) for k in PARAM_ORDER}
    return [ConfigurationRow(kernel=setting["kernel"], **params, C=float(C), mean_cv_accuracy=nan,
                             std_cv_accuracy=nan, n_iter=0, n_support=nan, time_s=0.0,
                             stopped_early=False, solver=info.name, path=str(path),
                             split_accuracies=(nan,) * folds, finished=False, converged=False,
                             kkt_violation=nan)
            for C in Cs]


def rows_to_choose_from(records, out_dir, resume_command: str | None = None) -> list[list]:
    """Each record's rows for :func:`muflow.selection.scoring.best_index`: the unfinished
    ones left out (as empty lists, keeping the indices) when any setting finished. With no
    record at all, the error names the command that continues the sweep
    (:func:`continue_command`)."""
    if not records:
        raise MuflowError("the sweep's time_limit passed before any kernel setting was solved: "
                          + continuation(out_dir, resume_command, progressed=False))
    finished = [all(r.finished for r in rec.rows) for rec in records]
    if not any(finished):
        return [rec.rows for rec in records]
    return [rec.rows if done else [] for rec, done in zip(records, finished)]


def warn_unfinished(table, deadline, out_dir, resume_command: str | None = None,
                    counts: dict | None = None) -> int:
    """Warn how many configurations the time limit left unfinished, and how to continue
    them (:func:`continuation`; ``counts``, the sweep's, tell whether this run finished a
    setting); returns that count."""
    unfinished = sum(not r.finished for r in table)
    if unfinished:
        progressed = counts is None or made_progress(table, counts)
        warnings.warn(
            f"the sweep stopped at time_limit={deadline.seconds:g} s (after {deadline.elapsed:.2f} s): "
            f"{unfinished} of {len(table)} configurations are not finished (finished=False in "
            f"{out_dir}/results.csv); {continuation(out_dir, resume_command, progressed=progressed)}",
            ConvergenceWarning, stacklevel=3)
    return unfinished


def made_progress(table, counts: dict) -> bool:
    """Whether this run of a sweep finished a kernel setting of its own: more finished
    settings in ``table`` (each setting is one row per C, all finished or none) than
    ``counts["kernels_resumed"]`` read back from an earlier run."""
    n_C = len({row.C for row in table}) or 1
    return sum(row.finished for row in table) > counts.get("kernels_resumed", 0) * n_C


def continuation(out_dir, resume_command: str | None = None, *, progressed: bool = True) -> str:
    """How to continue a sweep the time limit cut: the command (:func:`continue_command`);
    where this run finished no setting, the time limit raised first. A cut setting is
    solved again from its start, so the same limit would cut it again, and again."""
    command = continue_command(out_dir, resume_command)
    if progressed:
        return f"continue with `{command}`"
    return ("no kernel setting finished within the time limit in this run, and a cut one is "
            f"solved again from its start: raise the time limit, then continue with `{command}`")


def continue_command(out_dir, resume_command: str | None = None) -> str:
    """The command that continues a sweep the time limit cut: ``resume_command``, the
    caller's own (the ``run`` command's: the sweep alone would skip the run's later
    stages), by default the ``sweep`` command's."""
    return resume_command or f"sweep --resume --out {out_dir}"
