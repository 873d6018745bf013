"""The sweep's best model reads data as its training data were read.

- ``run_sweep`` on a DataFrame keeps its column names on the best model
  (``feature_names_in_``, as ``SVC.fit`` does) and picks a test frame's columns by name.
- ``python -m muflow sweep`` on a file with named columns saves them with ``best_model/``,
  and reads ``--test-data`` by name; on an svmlight file it records the file's indexing.
  Before, the best model had no names and ``--test-data`` was matched by position: a test
  file with its columns in another order was scored on scrambled features, and ``predict``
  with ``best_model/`` read such a file by position, with exit 0.
- The run's ``model/`` keeps the training file's names too (the sweep there reads arrays).
- ``best_model/`` is saved once, holding the names and the indexing from the start.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from muflow.cli import main
from muflow.exceptions import MuflowInputError
from muflow.selection import SweepGrid, run_sweep

pd = pytest.importorskip("pandas")

COLUMNS = ["a", "b", "c"]


def _frames(n=150, seed=0):
    """Training and test frames of three features: the label follows a and b, never c,
    so that scrambled columns score visibly worse."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, "pos", "neg")
    frame = pd.DataFrame(X, columns=COLUMNS).assign(label=y)
    return frame.iloc[:100].reset_index(drop=True), frame.iloc[100:].reset_index(drop=True)


def _grid():
    return SweepGrid(C=[1.0, 10.0], kernels=[{"kernel": "linear"}])


def test_run_sweep_keeps_a_frames_names_and_reads_the_test_frame_by_name(tmp_path):
    train, test = _frames()
    X, y = train[COLUMNS], train["label"]
    ordered = run_sweep(X, y, _grid(), folds=3, out_dir=tmp_path / "ordered", progress=False,
                        X_test=test[COLUMNS], y_test=test["label"])
    assert list(ordered.best_model.feature_names_in_) == COLUMNS
    reordered = run_sweep(X, y, _grid(), folds=3, out_dir=tmp_path / "reordered", progress=False,
                          X_test=test[["c", "a", "b"]], y_test=test["label"])
    assert reordered.test_metrics["accuracy"] == ordered.test_metrics["accuracy"] > 0.9
    import muflow

    saved = muflow.load(tmp_path / "ordered" / "best_model")
    assert list(saved.feature_names_in_) == COLUMNS
    np.testing.assert_array_equal(saved.predict(test[["b", "c", "a"]][COLUMNS]),
                                  ordered.best_model.predict(test[COLUMNS]))
    with pytest.raises(MuflowInputError, match="^X_test lacks the columns b of X; give a test set "
                                               "with X's columns"):
        run_sweep(X, y, _grid(), folds=3, out_dir=tmp_path / "narrow", progress=False,
                  X_test=test[["a", "c"]].assign(d=1.0), y_test=test["label"])
    # arrays keep the positional match, and the model has no names
    plain = run_sweep(X.to_numpy(), y, _grid(), folds=3, out_dir=tmp_path / "plain",
                      progress=False, X_test=test[COLUMNS].to_numpy(), y_test=test["label"])
    assert getattr(plain.best_model, "feature_names_in_", None) is None
    assert plain.test_metrics["accuracy"] == ordered.test_metrics["accuracy"]


def test_run_sweep_keeps_the_names_and_the_indexing_of_the_file_an_array_was_read_from(tmp_path):
    """``feature_names`` name an array X's columns (a DataFrame's own names win) and
    ``svmlight_zero_based`` is saved with the best model; names that do not fit X are refused."""
    import muflow

    train, _ = _frames()
    X, y = train[COLUMNS], train["label"]
    result = run_sweep(X.to_numpy(), y, _grid(), folds=3, out_dir=tmp_path / "array",
                       progress=False, feature_names=COLUMNS, svmlight_zero_based=False)
    assert list(result.best_model.feature_names_in_) == COLUMNS
    saved = muflow.load(tmp_path / "array" / "best_model")
    assert list(saved.feature_names_in_) == COLUMNS and saved._svmlight_zero_based is False
    own = run_sweep(X, y, _grid(), folds=3, out_dir=tmp_path / "frame", progress=False,
                    feature_names=["x", "y", "z"])
    assert list(own.best_model.feature_names_in_) == COLUMNS
    with pytest.raises(MuflowInputError, match=r"^feature_names must be 3 strings, one per "
                                               r"column of X, got \['a', 'b'\]$"):
        run_sweep(X.to_numpy(), y, _grid(), folds=3, out_dir=tmp_path / "short", progress=False,
                  feature_names=["a", "b"])


def _sweep(tmp_path, out, *args):
    return main(["sweep", "--data", str(tmp_path / "train.csv"), "--label-column", "label",
                 "--kernel", "linear", "--C", "1,10", "--folds", "3", "--out", str(tmp_path / out),
                 "--no-progress", *args])


def test_the_sweep_command_keeps_named_columns_and_reads_the_test_file_by_name(tmp_path, capsys):
    import muflow

    train, test = _frames()
    train.to_csv(tmp_path / "train.csv", index=False)
    test.to_csv(tmp_path / "test.csv", index=False)
    test[["label", "c", "b", "a"]].assign(extra=1.0).to_csv(tmp_path / "reordered.csv", index=False)
    assert _sweep(tmp_path, "ordered", "--test-data", str(tmp_path / "test.csv")) == 0
    assert _sweep(tmp_path, "reordered", "--test-data", str(tmp_path / "reordered.csv")) == 0
    accuracy = [json.loads((tmp_path / out / "test_metrics.json").read_text())["accuracy"]
                for out in ("ordered", "reordered")]
    assert accuracy[0] == accuracy[1] > 0.9
    model = tmp_path / "ordered" / "best_model"
    assert list(muflow.load(model).feature_names_in_) == COLUMNS
    expected = muflow.load(model).predict(test[COLUMNS])
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(tmp_path / "reordered.csv"),
                 "--label-column", "label"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split() == list(expected), captured.err
    assert "feature names" not in captured.err
    # a test file lacking a training column is refused in one line naming it
    test[["label", "a"]].to_csv(tmp_path / "narrow.csv", index=False)
    assert _sweep(tmp_path, "narrow", "--test-data", str(tmp_path / "narrow.csv")) == 2
    err = capsys.readouterr().err
    assert "lacks --data's feature columns b, c (--data has a, b, c)" in err, err


def test_the_sweep_command_records_an_svmlight_files_indexing(tmp_path, capsys):
    """A zero-based test file that never uses feature 0 is read as the training file was,
    by --test-data and by predict with the sweep's best model."""
    import muflow

    from tests.conftest import zero_based_svmlight_pair

    X_test, y_test = zero_based_svmlight_pair(tmp_path, n_train=60, n_test=30)
    assert main(["sweep", "--data", str(tmp_path / "train.svm"), "--kernel", "linear",
                 "--C", "1", "--folds", "3", "--out", str(tmp_path / "sweep"), "--no-progress",
                 "--test-data", str(tmp_path / "test.svm"), "--n-features", "5"]) == 0
    model = muflow.load(tmp_path / "sweep" / "best_model")
    assert model._svmlight_zero_based is True
    expected = model.predict(X_test)
    metrics = json.loads((tmp_path / "sweep" / "test_metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(np.mean(expected == y_test))
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "sweep" / "best_model"), "--data",
                 str(tmp_path / "test.svm"), "--n-features", "5"]) == 0
    assert [int(p) for p in capsys.readouterr().out.split()] == list(expected)


def _saves(monkeypatch) -> list:
    """The directories ``muflow.save`` writes from now on, by either of its names (the real
    save runs)."""
    from pathlib import Path

    import muflow
    import muflow.persistence

    real, saved = muflow.persistence.save, []

    def save(model, path, **kwargs):
        saved.append(Path(path))
        return real(model, path, **kwargs)

    monkeypatch.setattr(muflow.persistence, "save", save)
    monkeypatch.setattr(muflow, "save", save, raising=False)
    return saved


def test_the_sweep_command_saves_the_best_model_once_with_an_svmlight_files_indexing(
        tmp_path, monkeypatch):
    """One save of ``best_model/``, the indexing in it: the command saved the model again
    after the sweep had, and between the two saves the directory held a model without it."""
    import muflow

    from tests.conftest import zero_based_svmlight_pair

    zero_based_svmlight_pair(tmp_path, n_train=60)
    saved = _saves(monkeypatch)
    assert main(["sweep", "--data", str(tmp_path / "train.svm"), "--kernel", "linear",
                 "--C", "1", "--folds", "3", "--out", str(tmp_path / "sweep"), "--no-progress",
                 "--n-features", "5"]) == 0
    assert saved == [tmp_path / "sweep" / "best_model"]
    assert muflow.load(saved[0])._svmlight_zero_based is True


def test_a_sweep_whose_workers_read_a_named_file_saves_the_best_model_once_with_its_names(
        tmp_path, monkeypatch):
    """``--scheduler``: the workers read the CSV file (X an array there, without names);
    the file's names reach the one save of ``best_model/``. ``--verbose``: the command
    leaves this process's logging as it is."""
    import muflow
    from distributed import LocalCluster

    train, _ = _frames()
    train.to_csv(tmp_path / "train.csv", index=False)
    saved = _saves(monkeypatch)
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None,
                      memory_limit="1GiB") as cluster:
        assert _sweep(tmp_path, "sweep", "--scheduler", cluster.scheduler_address,
                      "--verbose") == 0
    assert saved == [tmp_path / "sweep" / "best_model"]
    assert list(muflow.load(saved[0]).feature_names_in_) == COLUMNS


def test_a_sweep_whose_workers_read_an_svmlight_file_keeps_its_indexing(tmp_path, capsys):
    """``--scheduler`` on a zero-based svmlight file: the worker that reads it says how it
    read its indices, the best model keeps that, and --test-data (a zero-based file that
    never uses feature 0) is read the same way, not guessed one column to the left."""
    import muflow
    from distributed import LocalCluster

    from tests.conftest import zero_based_svmlight_pair

    X_test, y_test = zero_based_svmlight_pair(tmp_path, n_train=60, n_test=30)
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None,
                      memory_limit="1GiB") as cluster:
        assert main(["sweep", "--data", str(tmp_path / "train.svm"), "--kernel", "linear",
                     "--C", "1", "--folds", "3", "--out", str(tmp_path / "sweep"),
                     "--no-progress", "--test-data", str(tmp_path / "test.svm"),
                     "--n-features", "5", "--scheduler", cluster.scheduler_address,
                     "--verbose"]) == 0
    model = muflow.load(tmp_path / "sweep" / "best_model")
    assert model._svmlight_zero_based is True
    metrics = json.loads((tmp_path / "sweep" / "test_metrics.json").read_text())
    assert metrics["accuracy"] == pytest.approx(np.mean(model.predict(X_test) == y_test))


@pytest.mark.slow
def test_the_runs_model_keeps_the_training_files_names(tmp_path):
    import muflow
    from tests.test_run_data_sources import SMALL_RUN
    from tests.test_run_command import muflow as run_muflow

    train, test = _frames()
    train.to_csv(tmp_path / "train.csv", index=False)
    cfg = tmp_path / "run.toml"
    cfg.write_text('[data]\npath = "train.csv"\nlabel_column = "label"\n' + SMALL_RUN)
    res = run_muflow("run", str(cfg), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "feature names" not in res.stderr
    model = muflow.load(tmp_path / "run" / "model")
    assert list(model.feature_names_in_) == COLUMNS
    assert list(muflow.load(tmp_path / "run" / "sweep" / "best_model").feature_names_in_) == COLUMNS
    data = json.loads((tmp_path / "run" / "data.json").read_text())
    assert data["feature_names"] == COLUMNS and data["svmlight_zero_based"] is None
