"""``python -m muflow run`` on data sources, in a subprocess.

- ``run --resume`` after the data file changed is refused in one line, exit code 2, and
  reuses nothing (it used to reuse every stage of the old data and exit 0).
- Bad sources are one line and exit code 2 with nothing written: a missing URL, no label
  column, files of different schemas (checked from metadata before the run starts), NaN
  values (found when the data stage reads them).
- A test set (``data.test_path``) whose columns have names is matched to the training set
  by name, whatever their order (it was matched by position: a test CSV with its columns
  in another order was scored on scrambled features); one lacking a training column is
  refused naming it; one without names keeps the positional match.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from muflow.config import from_dict
from muflow.exceptions import MuflowInputError
from muflow.pipeline import load_split, prepare_data, start_run
from test_run_command import muflow

SMALL_RUN = """
[grid]
C = [1.0]
kernels = [{ kernel = "rbf", gamma = [0.5] }]
[sweep]
folds = 2
"""


def write_frame(path, seed=0, n=80, **kwargs):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df["label"] = np.where(X[:, 0] > 0, 1, 0)
    for key, value in kwargs.items():
        df[key] = value
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    else:
        df.to_parquet(path, index=False)
    return df


def _stderr_line(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.slow
def test_resume_on_changed_data_is_refused(tmp_path):
    write_frame(tmp_path / "train.csv")
    cfg = tmp_path / "run.toml"
    cfg.write_text('[data]\npath = "train.csv"\nlabel_column = "label"\n' + SMALL_RUN)
    out = tmp_path / "run"
    first = muflow("run", str(cfg), "--out", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    log = (out / "stages.log").read_text()
    time.sleep(0.01)
    write_frame(tmp_path / "train.csv", seed=1)  # same name, new rows
    res = muflow("run", str(cfg), "--out", str(out), "--resume", cwd=tmp_path)
    assert res.returncode == 2, res.stdout[-2000:]
    line = _stderr_line(res)
    assert "the data changed" in line and "train.csv was modified" in line
    assert (out / "stages.log").read_text() == log  # nothing reused, nothing recomputed


def test_a_missing_url_exits_2_with_nothing_written(tmp_path):
    res = muflow("run", "--data", (tmp_path / "gone").as_uri() + "/", "--out", str(tmp_path / "run"),
                 cwd=tmp_path, timeout=120)
    assert res.returncode == 2
    assert "does not exist" in _stderr_line(res)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("case", ["no-label", "schemas"])
def test_a_bad_layout_exits_2_before_the_run_starts(tmp_path, case):
    folder = tmp_path / "pq"
    folder.mkdir()
    write_frame(folder / "part-0.parquet")
    if case == "schemas":
        write_frame(folder / "part-1.parquet", seed=1, extra=1.0)
    args = ["--label-column", "target"] if case == "no-label" else []
    res = muflow("run", "--data", str(folder), *args, "--out", str(tmp_path / "run"), cwd=tmp_path,
                 timeout=120)
    assert res.returncode == 2
    expected = {"no-label": "no label column 'target'", "schemas": "schemas differ"}[case]
    assert expected in _stderr_line(res)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_nan_values_exit_2_with_nothing_written(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    df = write_frame(folder / "part-0.parquet")
    df.loc[3, "b"] = np.nan
    df.to_parquet(folder / "part-1.parquet", index=False)
    cfg = tmp_path / "run.toml"
    cfg.write_text('[data]\npath = "pq"\n' + SMALL_RUN)
    res = muflow("run", str(cfg), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert res.returncode == 2, res.stdout[-2000:]
    assert "1 NaN or infinite value" in res.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def _write(df, path, **kwargs):
    if path.suffix == ".csv":
        df.to_csv(path, index=False, float_format="%.17g", **kwargs)
    else:
        df.to_parquet(path, index=False)
    return path


def _test_set_run(tmp_path, train, test, **data):
    cfg = from_dict({"data": {"path": str(train), "test_path": str(test), "label_column": "label",
                              **data}})
    prepare_data(cfg, start_run(cfg, tmp_path / "run"))
    return load_split(tmp_path / "run")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_test_set_with_its_columns_in_another_order_is_read_by_name(tmp_path, suffix):
    write_frame(tmp_path / f"train{suffix}", seed=0)  # columns a, b, c, label
    test = write_frame(tmp_path / "unused.csv", seed=1, id=np.arange(80))
    reordered = _write(test[["id", "label", "c", "a", "b"]], tmp_path / f"test{suffix}")
    _, X_test, _, y_test = _test_set_run(tmp_path, tmp_path / f"train{suffix}", reordered)
    np.testing.assert_array_equal(X_test, test[["a", "b", "c"]].to_numpy())
    np.testing.assert_array_equal(y_test, test["label"].to_numpy())


def test_a_test_set_lacking_training_columns_is_refused_naming_them(tmp_path):
    """By the data stage, and before the run starts (:func:`muflow.config.check_data_exists`)."""
    from muflow.config import check_data_exists

    write_frame(tmp_path / "train.csv")
    test = write_frame(tmp_path / "unused.csv", seed=1)
    _write(test[["label", "c", "a"]].rename(columns={"a": "A"}), tmp_path / "test.csv")
    message = (r"^data.test_path '.*test.csv' lacks the columns a, b of data.path '.*train.csv'; "
               r"give a test set with the training set's columns")
    with pytest.raises(MuflowInputError, match=message):
        _test_set_run(tmp_path, tmp_path / "train.csv", tmp_path / "test.csv")
    assert not (tmp_path / "run" / "data.json").exists()
    with pytest.raises(MuflowInputError, match=message):
        check_data_exists(from_dict({"data": {"path": str(tmp_path / "train.csv"),
                                              "test_path": str(tmp_path / "test.csv"),
                                              "label_column": "label"}}))


def test_a_test_set_without_names_is_matched_by_position(tmp_path):
    write_frame(tmp_path / "train.csv")
    test = write_frame(tmp_path / "unused.csv", seed=1)
    _write(test, tmp_path / "test.csv", header=False)
    _, X_test, _, y_test = _test_set_run(tmp_path, tmp_path / "train.csv", tmp_path / "test.csv",
                                         label_column=3)
    np.testing.assert_array_equal(X_test, test[["a", "b", "c"]].to_numpy())
    np.testing.assert_array_equal(y_test, test["label"].to_numpy())


def test_svmlight_files_of_different_widths_are_told_to_set_n_features(tmp_path):
    """An svmlight file has as many features as its largest index: a test file whose last
    feature is non-zero somewhere is wider. The fix is data.n_features, and it works."""
    (tmp_path / "train.svm").write_text("".join(f"{i % 2} 1:{i} 3:1\n" for i in range(40)))
    (tmp_path / "test.svm").write_text("".join(f"{i % 2} 2:{i} 4:1\n" for i in range(10)))
    with pytest.raises(MuflowInputError, match=r"^data.test_path has 4 features and data.path 3 "
                                               r"\(an svmlight file has as many as its largest "
                                               r"index\); set data.n_features = 4"):
        _test_set_run(tmp_path, tmp_path / "train.svm", tmp_path / "test.svm", label_column=None)
    X_train, X_test, _, _ = _test_set_run(tmp_path, tmp_path / "train.svm", tmp_path / "test.svm",
                                          label_column=None, n_features=4)
    assert X_train.shape == (40, 4) and X_test.shape == (10, 4)


def test_a_test_set_without_column_names_takes_no_column_options(tmp_path):
    """label_column and feature_columns name data.path's columns: an npz test set (X and y,
    no names) is read by position, not refused for them, neither before the run starts
    (:func:`muflow.config.check_data_exists`) nor by the data stage."""
    from muflow.config import check_data_exists

    write_frame(tmp_path / "train.csv")
    test = write_frame(tmp_path / "unused.csv", seed=1)
    np.savez(tmp_path / "test.npz", X=test[["c", "a"]].to_numpy(), y=test["label"].to_numpy())
    check_data_exists(from_dict({"data": {"path": str(tmp_path / "train.csv"),
                                          "test_path": str(tmp_path / "test.npz"),
                                          "label_column": "label"}}))
    _, X_test, _, y_test = _test_set_run(tmp_path, tmp_path / "train.csv", tmp_path / "test.npz",
                                         feature_columns=["c", "a"])
    np.testing.assert_array_equal(X_test, test[["c", "a"]].to_numpy())
    np.testing.assert_array_equal(y_test, test["label"].to_numpy())


def test_an_svmlight_test_set_is_read_with_the_training_files_indexing(tmp_path):
    """A zero-based test file that never uses feature 0, read on its own, is guessed
    one-based: every column one to the left, silently (data.n_features keeps the widths
    equal). The data stage reads it with data.path's indexing."""
    from tests.conftest import zero_based_svmlight_pair

    X_test, y_test = zero_based_svmlight_pair(tmp_path, n_train=40, n_test=10)
    _, X_read, _, y_read = _test_set_run(tmp_path, tmp_path / "train.svm", tmp_path / "test.svm",
                                         label_column=None, n_features=5)
    np.testing.assert_allclose(X_read.toarray(), X_test)  # svmlight is read as CSR
    np.testing.assert_array_equal(y_read, y_test)
