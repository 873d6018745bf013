"""A sweep cut by its ``time_limit`` says so, whichever process the cut happened in (issue 38,
item 1), and ``resume`` then finishes it as the undisturbed sweep would have.

The problem: 1,000 samples of ``make_classification`` with 5 features and a fifth of the
labels flipped, RBF gamma = 0.05 and C = 3000 at tol 1e-4: SMO needs close to a million pair
steps at the largest C, several times the limit given, so the limit always cuts it.
"""

from __future__ import annotations

import csv
import json
import warnings

import numpy as np
import pytest

import muflow
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning

from muflow.selection import SweepGrid, run_sweep

LIMIT = 0.15


@pytest.fixture(scope="module")
def slow():
    X, y = make_classification(n_samples=1000, n_features=5, n_informative=3, flip_y=0.2,
                               random_state=11)
    muflow.SVC(solver="smo").fit(X[:100], y[:100])  # compiled loops loaded before any clock
    return X, y


@pytest.fixture(scope="module")
def whole(slow, tmp_path_factory):
    """The undisturbed sweep: its results.csv rows and result."""
    out = tmp_path_factory.mktemp("whole")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        result = _sweep(*slow, out, n_jobs=1)
    return _rows(out), result


GRID = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[1.0, 3e3])


def _sweep(X, y, out, **kw):
    # max_iter counts SMO's pair steps (SVC's unit): C=3e3 on 500 noisy rows takes more than
    # the default 10,000 to reach tol, and the undisturbed sweep must converge
    return run_sweep(X, y, GRID, folds=2, out_dir=out, solver="smo", tol=1e-4,
                     max_iter=1_000_000, progress=False, **kw)


def _rows(out):
    with open(out / "results.csv") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("n_jobs", [2, 1], ids=["forked-chains", "stored-K-in-process"])
def test_a_cut_sweep_marks_its_configurations_unfinished_and_resume_finishes_them(
        slow, whole, tmp_path, n_jobs):
    X, y = slow
    with pytest.warns(ConvergenceWarning, match="configurations are not finished"):
        _sweep(X, y, tmp_path / "cut", n_jobs=n_jobs, time_limit=LIMIT)
    rows = _rows(tmp_path / "cut")
    assert [r["finished"] for r in rows] == ["False"] * 2
    best = json.loads((tmp_path / "cut" / "best.json").read_text())
    assert best["finished"] is False  # chosen among cut configurations, and says so

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        resumed = _sweep(X, y, tmp_path / "cut", n_jobs=n_jobs, resume=True)
    whole_rows, whole_result = whole
    assert resumed.counts["kernels_resumed"] == 0  # the cut setting was not kept as done
    for a, b in zip(_rows(tmp_path / "cut"), whole_rows):
        a, b = dict(a, time_s=None), dict(b, time_s=None)
        assert a == b and a["finished"] == "True"
    assert resumed.best == whole_result.best and "finished" not in resumed.best
    np.testing.assert_array_equal(resumed.best_model.dual_coef_, whole_result.best_model.dual_coef_)


def test_the_run_report_says_which_configurations_the_time_limit_cut(tmp_path):
    from muflow.pipeline import summary_rows

    (tmp_path / "data.json").write_text(json.dumps(
        {"source": "generated", "n_samples": 100, "n_features": 5, "n_train": 80, "n_test": 20}))
    summary = {"best": {"kernel": "rbf", "gamma": 0.05, "C": 1.0, "cv_accuracy": 0.8,
                        "cv_accuracy_std": 0.01, "finished": False},
               "n_configurations": 4, "counts": {"kernels_solved": 1}, "unfinished": 2,
               "paths": {}}
    (tmp_path / "sweep-summary.json").write_text(json.dumps(summary))
    rows = dict(summary_rows(tmp_path))
    assert rows["unfinished configurations"] == ("2 of 4: cut at sweep.time_limit "
                                                 "(finished=False in sweep/results.csv)")
    assert rows["best CV accuracy"].endswith("(not finished: cut at sweep.time_limit)")
    summary.update(unfinished=0, best=dict(summary["best"], finished=True))
    (tmp_path / "sweep-summary.json").write_text(json.dumps(summary))
    rows = dict(summary_rows(tmp_path))
    assert "unfinished configurations" not in rows and "cut" not in rows["best CV accuracy"]


def test_run_resume_reopens_a_sweep_the_time_limit_cut(tmp_path):
    """``run --resume`` after a cut sweep: the sweep stage and those after it run again
    (the finished kernel settings are read back), instead of being reused as finished."""
    from muflow.cut_sweep import AFTER_CUT_SWEEP, reopen_cut_sweep
    from muflow.pipeline import stage_log

    def run_dir(unfinished):
        folder = tmp_path / f"run-{unfinished}"
        (folder / "sweep" / "kernels" / "000-rbf").mkdir(parents=True)
        (folder / "model").mkdir()
        for name in AFTER_CUT_SWEEP + ("data.json", "gram.json"):
            if not (folder / name).exists():
                (folder / name).write_text("{}")
        (folder / "sweep-summary.json").write_text(json.dumps({"unfinished": unfinished}))
        return folder

    cut = run_dir(2)
    assert reopen_cut_sweep(cut)
    assert sorted(p.name for p in cut.iterdir()) == ["data.json", "gram.json", "stages.log", "sweep"]
    assert (cut / "sweep" / "kernels" / "000-rbf").is_dir() and stage_log(cut) == [("sweep", "reopened")]
    assert not reopen_cut_sweep(cut)  # nothing left to reopen
    whole = run_dir(0)
    assert not reopen_cut_sweep(whole)
    assert (whole / "report.md").exists() and (whole / "model").is_dir()


def test_the_cut_warning_names_the_command_that_continues_the_sweep(slow, tmp_path):
    """run_sweep's caller names its own continuation (the run: `python -m muflow run ...
    --resume`, which works; `sweep --resume --out DIR/sweep` needed --data and would have
    bypassed the run's later stages); the pipeline's sweep stage passes one naming the run."""
    import dataclasses

    from muflow.config import default_config
    from muflow.pipeline import sweep as sweep_stage

    X, y = slow
    command = "python -m muflow run c.toml --out /runs/r --resume"
    with pytest.warns(ConvergenceWarning, match=f"continue with `{command}`"):
        _sweep(X, y, tmp_path / "direct", n_jobs=1, time_limit=LIMIT, resume_command=command)

    # a limit that passes before any setting is solved: the error names the same command
    with pytest.raises(muflow.exceptions.MuflowError, match=f"continue with `{command}`"):
        _sweep(X, y, tmp_path / "none", n_jobs=1, time_limit=1e-9, resume_command=command)

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    np.savez(run_dir / "data.npz", X_train=X, X_test=X[:10], y_train=y, y_test=y[:10])
    # the data stage's record beside its split: how data.path was read (arrays: no names)
    (run_dir / "data.json").write_text('{"feature_names": null, "svmlight_zero_based": null}')
    cfg = default_config()
    cfg = dataclasses.replace(cfg, grid=GRID, sweep=dataclasses.replace(
        cfg.sweep, folds=2, solver="smo", tol=1e-4, max_iter=1_000_000, n_jobs=1, time_limit=LIMIT))
    with pytest.warns(ConvergenceWarning) as caught:
        sweep_stage(cfg, run_dir, progress=False)
    said = " ".join(str(w.message) for w in caught)
    assert f"continue with `python -m muflow run CONFIG.toml --out {run_dir} --resume`" in said
    assert "sweep --resume" not in said


def test_a_refit_cut_by_the_time_limit_leaves_its_setting_unfinished(slow, tmp_path, monkeypatch):
    """The folds' solves finished before the limit, the best C's refit ran into it: the
    setting was saved as done with that cut refit as the best model (best.json said nothing,
    --resume kept it). Now the setting is unfinished, and --resume refits it."""
    import time

    import muflow.selection.sweep as sweep_module

    X, y = slow
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[3e3])
    real_refit = sweep_module.refit_setting

    def refit_after_the_limit(*args, **kwargs):
        time.sleep(1.2)  # past the limit: the refit's first check stops it
        return real_refit(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "refit_setting", refit_after_the_limit)
    kw = dict(folds=2, solver="smo", tol=1e-4, progress=False, n_jobs=1)
    with pytest.warns(ConvergenceWarning, match="configurations are not finished"):
        run_sweep(X[:300], y[:300], grid, out_dir=tmp_path / "cut", time_limit=1.0, **kw)
    assert [r["finished"] for r in _rows(tmp_path / "cut")] == ["False"]
    assert json.loads((tmp_path / "cut" / "best.json").read_text())["finished"] is False
    monkeypatch.setattr(sweep_module, "refit_setting", real_refit)
    resumed = run_sweep(X[:300], y[:300], grid, out_dir=tmp_path / "cut", resume=True, **kw)
    assert resumed.counts["kernels_resumed"] == 0 and resumed.best_model.fit_status_ == 0
    whole = run_sweep(X[:300], y[:300], grid, out_dir=tmp_path / "whole", **kw)
    np.testing.assert_array_equal(resumed.best_model.dual_coef_, whole.best_model.dual_coef_)


def test_the_sweep_command_names_itself_as_the_continuation(tmp_path, capsys):
    """The sweep command's messages said `sweep --resume --out OUT` (not a command: no
    `python -m muflow`, no --data); they give the command as typed, --resume added, as an
    interrupted sweep's message does."""
    from muflow.cli import main

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    np.savez(tmp_path / "d.npz", X=X, y=(X[:, 0] > 0).astype(int))
    args = ["sweep", "--data", str(tmp_path / "d.npz"), "--C", "1", "--folds", "2",
            "--time-limit", "1e-9", "--out", str(tmp_path / "s"), "--no-progress"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"continue with `python -m muflow sweep --data {tmp_path / 'd.npz'} " in err, err
    assert err.strip().endswith("--no-progress --resume`"), err


def test_a_cut_run_that_finished_no_setting_says_to_raise_the_limit():
    """Continuing with the same time limit only helps where this run finished a setting: a
    cut setting is solved again from its start, so a run that finished none, given the
    same limit, is cut at the same place again (the advice repeated itself forever)."""
    from muflow.selection.records import ConfigurationRow
    from muflow.selection.timeout import continuation, made_progress

    def rows(gamma, finished):
        return [ConfigurationRow(kernel="rbf", gamma=gamma, degree=None, coef0=None, C=C,
                                 mean_cv_accuracy=0.9, std_cv_accuracy=0.0, n_iter=1,
                                 n_support=1, time_s=0.0, stopped_early=False, solver="smo",
                                 path="stored", split_accuracies=(0.9,), finished=finished,
                                 converged=finished, kkt_violation=0.0) for C in (1.0, 10.0)]

    resumed_one = {"grams_built": 1, "kernels_solved": 1, "kernels_resumed": 1}
    # the first setting read back, the second cut: nothing new finished
    assert not made_progress(rows(0.1, True) + rows(0.2, False), resumed_one)
    # the first read back, the second finished here, the third cut: progress
    assert made_progress(rows(0.1, True) + rows(0.2, True) + rows(0.3, False), resumed_one)
    assert made_progress(rows(0.1, True) + rows(0.2, False), {"kernels_resumed": 0})
    command = "python -m muflow sweep --data d.csv --time-limit 60 --resume"
    assert continuation("out", command) == f"continue with `{command}`"
    stuck = continuation("out", command, progressed=False)
    assert "raise the time limit, then continue with" in stuck and command in stuck
