"""A sweep's run directory read back on resume is checked (issue 33, item 1)."""

from __future__ import annotations

import numpy as np
import pytest

import muflow
from muflow.exceptions import MuflowInputError
from muflow.selection import SweepGrid, run_sweep


def test_a_resumed_sweep_refuses_a_kernel_record_holding_nan(tmp_path):
    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 120, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    run = tmp_path / "run"
    run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False)
    kdir = run / "kernels" / "000-rbf"
    with np.load(kdir / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["alpha_full"] = arrays["alpha_full"].copy()
    arrays["alpha_full"][:5] = np.nan
    np.savez(kdir / "arrays.npz", **arrays)
    with pytest.raises(MuflowInputError) as err:
        run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False, resume=True)
    assert str(err.value) == (f"sweep record {kdir} is damaged (alpha_full NaN or inf); delete "
                              f"{kdir} and resume: that kernel setting is solved again")


def test_a_resumed_sweep_solves_again_a_kernel_record_cut_short(tmp_path):
    """A record's arrays.npz cut short (a disk that failed, a copy interrupted) is read as
    absent, as a damaged kernel.json is: that setting is solved again, to the same results."""
    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 120, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    run = tmp_path / "run"
    first = run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False)
    arrays = run / "kernels" / "000-rbf" / "arrays.npz"
    arrays.write_bytes(arrays.read_bytes()[:100])
    again = run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False, resume=True)
    assert again.counts["kernels_resumed"] == 0 and again.counts["kernels_solved"] == 1
    assert again.best == first.best


def _model_and_row():
    """A small fitted model and one results row, for write_outputs."""
    from muflow.selection.records import ConfigurationRow

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    model = muflow.SVC().fit(X, (X[:, 0] > 0).astype(int))
    row = ConfigurationRow(kernel="rbf", gamma=1.0, degree=None, coef0=None, C=1.0,
                           mean_cv_accuracy=0.9, std_cv_accuracy=0.0, n_iter=1, n_support=3,
                           time_s=0.1, stopped_early=False, solver="smo", path="continuation",
                           split_accuracies=(0.9, 0.9))
    return model, row


@pytest.mark.parametrize("fails_at", ["best.json", "best_model"])
def test_a_full_disk_keeps_no_best_json_without_its_model(tmp_path, monkeypatch, fails_at):
    """The sweep's outputs appear as a set or not at all (issue 38): a full disk while
    writing them left best.json and results.csv beside no best_model/."""
    import errno

    import muflow.selection.rundir as rundir_module
    model, row = _model_and_row()

    def full_disk(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if fails_at == "best.json":
        monkeypatch.setattr(rundir_module, "write_json", full_disk)
    else:
        monkeypatch.setattr("muflow.persistence.save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        rundir_module.write_outputs(tmp_path, [row], 2, {"kernel": "rbf"}, model, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_earlier_best_json_never_names_a_model_removed_after_a_failure(tmp_path, monkeypatch):
    """A resumed sweep's outputs written over an earlier call's: a failure (an interrupt, a
    full disk) after the new best_model/ removed it, and the earlier best.json stayed,
    naming a model that was not there. It goes first now."""
    import errno

    import muflow.selection.rundir as rundir_module
    model, row = _model_and_row()
    rundir_module.write_outputs(tmp_path, [row], 2, {"kernel": "rbf"}, model, None)

    def full_disk(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir_module, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left"):
        rundir_module.write_outputs(tmp_path, [row], 2, {"kernel": "rbf", "C": 2.0}, model, None)
    assert not (tmp_path / "best_model").exists()
    assert not (tmp_path / "best.json").exists()


def test_a_fresh_sweep_leaves_nothing_of_an_earlier_one_and_refuses_a_run_directory(tmp_path):
    """A fresh sweep into a directory of an earlier one removes that sweep's outputs first
    (its test_metrics.json and a kernel's heatmap stayed beside the new results); a `muflow
    run` directory is refused, not mixed with."""
    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(1).choice(len(y), 120, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    out = tmp_path / "sweep"
    run_sweep(X, y, SweepGrid([{"kernel": "rbf", "gamma": [0.5]}, {"kernel": "linear"}],
                              C=[1.0]), folds=3, out_dir=out, solver="smo", progress=False,
              X_test=X[:30], y_test=y[:30])
    assert (out / "test_metrics.json").exists() and (out / "heatmap_linear.png").exists()
    (out / "notes.txt").write_text("mine")
    run_sweep(X, y, SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[1.0]), folds=3,
              out_dir=out, solver="smo", progress=False)
    assert not (out / "test_metrics.json").exists() and not (out / "heatmap_linear.png").exists()
    assert [p.name for p in (out / "kernels").iterdir()] == ["000-rbf"]
    assert (out / "notes.txt").read_text() == "mine"  # not the sweep's: kept
    run = tmp_path / "run"
    run.mkdir()
    (run / "stages.log").write_text("data computed 0.1\n")
    with pytest.raises(MuflowInputError, match="is a `muflow run` directory"):
        run_sweep(X, y, SweepGrid([{"kernel": "linear"}], C=[1.0]), folds=3, out_dir=run,
                  progress=False)


@pytest.mark.parametrize("resume", [False, True])
def test_a_sweep_leaves_files_no_sweep_wrote_untouched(tmp_path, capsys, resume):
    """`sweep --out DIR` into a directory of one's own (no sweep.json) that holds a
    results.csv or a kernels/ folder deleted them and wrote its own in their place."""
    from muflow.cli import main

    data = tmp_path / "train.csv"
    X, y = muflow.datasets.load_breast_cancer()
    rows = [",".join(f"{v:g}" for v in x) + f",{c}" for x, c in zip(X[:80] / 10.0, y[:80])]
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "project"
    (out / "kernels").mkdir(parents=True)
    (out / "kernels" / "mine.txt").write_text("mine")
    (out / "results.csv").write_text("my,results\n")
    if resume:  # the library's resume of a directory that holds no sweep
        with pytest.raises(MuflowInputError, match="no sweep wrote there"):
            run_sweep(X[:80] / 10.0, y[:80], SweepGrid([{"kernel": "linear"}], C=[1.0]),
                      folds=2, out_dir=out, progress=False, resume=True)
    else:
        assert main(["sweep", "--data", str(data), "--kernel", "linear", "--folds", "2",
                     "--out", str(out), "--no-progress"]) == 2
        assert capsys.readouterr().err.strip() == (
            f"muflow sweep: error: {out} holds kernels, results.csv, which no sweep wrote there "
            "(it has no sweep.json) and a sweep would replace; give the sweep a new or empty "
            "directory (--out), or move them away")
    assert (out / "kernels" / "mine.txt").read_text() == "mine"
    assert (out / "results.csv").read_text() == "my,results\n"
    from muflow.runlock import is_lock_file

    assert sorted(p.name for p in out.iterdir() if not is_lock_file(p)) == ["kernels", "results.csv"]


def test_the_sweep_command_holds_its_directory(tmp_path, capsys):
    """Two sweeps on one --out at once: the second is refused in one line while the first
    holds the directory (both wrote, and the second's outputs replaced the first's)."""
    import fcntl
    import os

    from muflow.cli import main
    from muflow.runlock import LOCK_NAME

    data = tmp_path / "d.npz"
    X, y = muflow.datasets.load_breast_cancer()
    np.savez(data, X=X[:100], y=y[:100])
    out = tmp_path / "sweep"
    out.mkdir()
    fd = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # another process's flock (the
    try:  # lock held by this call stack is taken again: a command holding it calls a flow)
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert main(["sweep", "--data", str(data), "--kernel", "linear", "--C", "1",
                     "--folds", "3", "--out", str(out), "--no-progress"]) == 2
    finally:
        os.close(fd)
    assert "is in use by another `muflow sweep`" in capsys.readouterr().err
    afile = tmp_path / "file.csv"
    afile.write_text("x\n")
    assert main(["sweep", "--data", str(data), "--kernel", "linear", "--C", "1",
                 "--folds", "3", "--out", str(afile), "--no-progress"]) == 2
    assert "is a file, not a directory" in capsys.readouterr().err


def test_sweep_resume_needs_a_sweep_to_resume(tmp_path, capsys):
    """``sweep --resume`` into a directory without a sweep started afresh without a word
    (a mistyped --out); it is refused, as ``fit --resume`` and ``run --resume`` are."""
    from muflow.cli import main

    data = tmp_path / "d.npz"
    X, y = muflow.datasets.load_breast_cancer()
    np.savez(data, X=X[:100], y=y[:100])
    out = tmp_path / "typo"
    assert main(["sweep", "--data", str(data), "--kernel", "linear", "--C", "1", "--folds",
                 "3", "--out", str(out), "--no-progress", "--resume"]) == 2
    assert "holds no sweep to resume" in capsys.readouterr().err and not out.exists()

def test_a_resumed_sweep_without_a_test_set_leaves_no_earlier_test_metrics(tmp_path):
    """``sweep --resume`` without --test-data after a sweep with one rewrote best.json and
    best_model/ and kept the earlier test_metrics.json, which described another model.
    Outputs written together now never leave one from an earlier call."""
    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 160, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    run = tmp_path / "run"
    first = run_sweep(X[:120], y[:120], grid, folds=3, out_dir=run, solver="smo", progress=False,
                      X_test=X[120:], y_test=y[120:])
    assert (run / "test_metrics.json").exists() and "test_metrics" in first.paths
    again = run_sweep(X[:120], y[:120], grid, folds=3, out_dir=run, solver="smo", progress=False,
                      resume=True)
    assert again.counts["kernels_resumed"] == 1
    assert "test_metrics" not in again.paths and again.test_metrics is None
    assert not (run / "test_metrics.json").exists()
    assert (run / "best.json").exists() and (run / "best_model").is_dir()
