"""A test set whose labels are not the training classes, in the sweep and the run.

- Labels of another kind (text against numbers) are refused in one line before anything is
  solved: ``sweep --test-data`` failed after the whole sweep with exit 1 and scikit-learn's
  "Mix of label input types (string and number)".
- Labels that are none of the classes count as errors in the test accuracy, as ``predict``
  and the run count them, and are warned about and listed in ``test_metrics.json``: the
  sweep scored them without a word.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from muflow.cli import main
from muflow.exceptions import MuflowInputError
from muflow.selection import SweepGrid, run_sweep


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] > 0).astype(int)


GRID = SweepGrid([{"kernel": "linear"}], C=[1.0])


def test_run_sweep_refuses_test_labels_of_another_kind_and_counts_unseen_ones(tmp_path):
    X, y = _data()
    X_test, y_test = _data(40, seed=1)
    with pytest.raises(MuflowInputError, match=r"^y_test's labels are text \('cat', 'dog'\) and "
                                               r"y's are numbers \(0, 1\); give test labels"):
        run_sweep(X, y, GRID, folds=3, out_dir=tmp_path / "text", progress=False,
                  X_test=X_test, y_test=np.where(y_test == 1, "dog", "cat"))
    assert not (tmp_path / "text" / "results.csv").exists()  # refused before any solve
    shifted = np.where(y_test == 1, 2, 0)  # the class 1 is called 2 in the test set
    with pytest.warns(UserWarning, match=r"the test set holds classes the training data does "
                                         r"not: 2 \(\d+ rows\)"):
        result = run_sweep(X, y, GRID, folds=3, out_dir=tmp_path / "new", progress=False,
                           X_test=X_test, y_test=shifted)
    predicted = result.best_model.predict(X_test)
    assert result.test_metrics["accuracy"] == pytest.approx(np.mean(predicted == shifted))
    assert result.test_metrics["unseen_classes"] == {"2": int(np.sum(shifted == 2))}
    written = json.loads((tmp_path / "new" / "test_metrics.json").read_text())
    assert written["unseen_classes"] == {"2": int(np.sum(shifted == 2))}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the test set of the training classes
        same = run_sweep(X, y, GRID, folds=3, out_dir=tmp_path / "same", progress=False,
                         X_test=X_test, y_test=y_test)
    assert same.test_metrics["unseen_classes"] == {}


def _csv(path, X, labels):
    path.write_text("a,b,c,label\n" + "".join(f"{r[0]},{r[1]},{r[2]},{v}\n"
                                              for r, v in zip(X, labels)))
    return path


def test_run_sweep_refuses_a_test_set_with_nan_naming_x_test(tmp_path):
    """A NaN in X_test stopped run_sweep with scikit-learn's "Input X contains NaN.", which
    names X, not the test set; now it is refused before anything is solved, naming X_test
    and the fix, as a NaN in X is."""
    X, y = _data()
    X_test, y_test = _data(40, seed=1)
    X_test[3, 1] = np.nan
    with pytest.raises(MuflowInputError, match=r"^X_test contains 1 NaN or infinite value\(s\); "
                                               r"impute or drop them"):
        run_sweep(X, y, GRID, folds=3, out_dir=tmp_path / "nan", progress=False,
                  X_test=X_test, y_test=y_test)
    assert not (tmp_path / "nan" / "results.csv").exists()


def test_the_sweep_command_refuses_text_test_labels_in_one_line(tmp_path, capsys):
    X, y = _data()
    X_test, y_test = _data(40, seed=1)
    train = _csv(tmp_path / "train.csv", X, y)
    test = _csv(tmp_path / "test.csv", X_test, np.where(y_test == 1, "dog", "cat"))
    code = main(["sweep", "--data", str(train), "--test-data", str(test), "--kernel", "linear",
                 "--C", "1", "--folds", "3", "--out", str(tmp_path / "s"), "--no-progress"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1, err
    assert "y_test's labels are text ('cat', 'dog') and y's are numbers (0, 1)" in err[0]


def test_the_run_refuses_text_test_labels_in_its_data_stage(tmp_path):
    from muflow.config import from_dict
    from muflow.pipeline import prepare_data, start_run

    X, y = _data()
    X_test, y_test = _data(40, seed=1)
    train = _csv(tmp_path / "train.csv", X, y)
    test = _csv(tmp_path / "test.csv", X_test, np.where(y_test == 1, "dog", "cat"))
    cfg = from_dict({"data": {"path": str(train), "test_path": str(test), "label_column": "label"}})
    with pytest.raises(MuflowInputError, match=r"^data.test_path's labels are text \('cat', 'dog'\) "
                                               r"and data.path's are numbers \(0, 1\)"):
        prepare_data(cfg, start_run(cfg, tmp_path / "run"))
    assert not (tmp_path / "run" / "data.json").exists()
