import numpy as np
import pytest

from muflow import datasets
from muflow.data import load_data
from muflow.exceptions import DataFileError
from tests.conftest import shared_data


def test_bundled_data_sets_match_the_papers():
    X, y = datasets.load_breast_cancer()
    assert X.shape == (683, 9) and set(y) == {2, 4}
    X, y = datasets.load_sonar()
    assert X.shape == (208, 60) and set(y) == {"M", "R"}


def test_shared_formats_load():
    X, y = load_data(shared_data("a8a"), fmt="svmlight", n_features=123)
    assert X.shape == (22696, 123) and set(y) == {-1, 1}
    X, y = load_data(shared_data("zip01.train"), label_column=0)
    assert X.shape == (2199, 256) and set(y) == {0, 1}


def test_parse_errors_name_the_line(tmp_path):
    svm = tmp_path / "broken.svm"
    svm.write_text("1 1:0.5 2:1\n-1 1:zz\n")
    with pytest.raises(DataFileError, match="line 2"):
        load_data(svm)
    csv = tmp_path / "ragged.csv"
    csv.write_text("1,2,3\n4,5\n")
    with pytest.raises(DataFileError, match="line 2: 2 fields"):
        load_data(csv)
    npz = tmp_path / "nolabels.npz"
    np.savez(npz, X=np.ones((2, 2)))
    with pytest.raises(DataFileError, match="missing y"):
        load_data(npz)
    with pytest.raises(DataFileError, match="no column named 'label'"):
        load_data(csv.with_name("h.csv").write_text("a,b\n1,2\n") and csv.with_name("h.csv"), label_column="label")
