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
    with pytest.raises(DataFileError, match="no label column 'label'; the columns are a, b"):
        load_data(csv.with_name("h.csv").write_text("a,b\n1,2\n") and csv.with_name("h.csv"), label_column="label")


@pytest.mark.parametrize("text", [
    "f0,f1,label\n0.5,1e-3,1\n-2,3.25,0\n\n7,8,1\n",  # header, a blank line
    "id,a,b,y\n10,0.1,0.2,2.0\n11,0.3,0.4,3.0\n",  # a sample-id column
    "0.1 0.2 1.5\n0.3 0.4 -1\n",  # whitespace separated, float labels
])
def test_numeric_csv_fast_path_reads_what_the_row_reader_reads(tmp_path, monkeypatch, text):
    """The all-numeric fast path (np.loadtxt) returns the row-by-row reader's X and y, dtypes
    included."""
    from muflow.data import files as data  # the file loaders

    path = tmp_path / "d.csv"
    path.write_text(text)
    assert data._load_numeric_csv(path, None) is not None  # the fast path took it
    X_fast, y_fast = data.load_data(path)
    monkeypatch.setattr(data, "_load_numeric_csv", lambda *a: None)
    X_rows, y_rows = data.load_data(path)
    np.testing.assert_array_equal(X_fast, X_rows)
    np.testing.assert_array_equal(y_fast, y_rows)
    assert X_fast.dtype == X_rows.dtype and y_fast.dtype == y_rows.dtype


@pytest.mark.parametrize("text, match", [
    # still named after the fast path declines
    ("a,b,label\n1,2,0\n3,oops,1\n", "line 3: 'oops' is not a number"),
    # an empty label cell was read as a class of its own, ''
    ("a,b,label\n1,2,x\n3,4,\n5,6,y\n", "line 3: the label is missing"),
])
def test_a_bad_csv_row_is_named_by_its_line(tmp_path, text, match):
    path = tmp_path / "d.csv"
    path.write_text(text)
    with pytest.raises(DataFileError, match=match):
        load_data(path)


def test_a_csv_label_column_out_of_range_is_refused(tmp_path):
    """An index past the last column is an error (it wrapped around onto a feature)."""
    csv = tmp_path / "d.csv"
    csv.write_text("1,2,3\n4,5,6\n")
    for bad in (3, -4, "42"):
        with pytest.raises(DataFileError, match="out of range; the data have 3 columns"):
            load_data(csv, label_column=bad)
    X, y = load_data(csv, label_column=-3)
    assert y.tolist() == [1, 4] and X.tolist() == [[2, 3], [5, 6]]


def test_string_labels_from_a_table_column(tmp_path):
    """A pandas (Arrow) column of strings arrives as objects: the labels are those strings;
    a missing one is refused, not made a class."""
    pd = pytest.importorskip("pandas")
    from muflow.data.local import load_source
    from muflow.data.source import DataSource

    frame = pd.DataFrame({"a": [0.1, 0.2, 0.3, 0.4], "label": ["cat", "dog", "cat", "dog"]})
    frame.to_parquet(tmp_path / "d.parquet")
    X, y, _ = load_source(DataSource(path=str(tmp_path / "d.parquet")))
    assert y.tolist() == ["cat", "dog", "cat", "dog"] and X.shape == (4, 1)
    frame.loc[2, "label"] = None
    frame.to_parquet(tmp_path / "m.parquet")
    with pytest.raises(DataFileError, match="1 missing value"):
        load_source(DataSource(path=str(tmp_path / "m.parquet")))


@pytest.mark.parametrize("text, label_column, y", [
    ("0.1,0.2,R\n0.3,0.4,M\n0.5,0.6,R\n", None, ["R", "M", "R"]),  # no header, text labels
    ("R,0.1,0.2\nM,0.3,0.4\n", 0, ["R", "M"]),  # no header, the label first
    ("a,b,label\n0.1,0.2,R\n0.3,0.4,M\n", None, ["R", "M"]),  # a header
    ("a,b,label\n1,2,0\n3,4,1\n", None, [0, 1]),  # a header over numbers
    ("0.1,0.2,R\n", None, ["R"]),  # one line, data
    ("0.1,,R\n0.3,0.4,M\n", None, None),  # an empty cell is no header's name
])
def test_one_header_rule_for_a_file_a_glob_and_a_list(tmp_path, text, label_column, y):
    """A data line whose text label (or any text cell) made it a header lost that row on
    a glob or a list (and, label first, in the file loader too)."""
    from muflow.data.local import load_source
    from muflow.data.source import DataSource

    path = tmp_path / "d.csv"
    path.write_text(text)
    for source in (str(path), str(tmp_path / "d.c*v"), (str(path),)):
        if y is None:
            with pytest.raises(DataFileError, match="line 1: '' is not a number|1 NaN"):
                load_source(DataSource(path=source, label_column=label_column))
            continue
        X, labels, _ = load_source(DataSource(path=source, label_column=label_column))
        assert labels.tolist() == y and X.shape == (len(y), 2), source
    if y is not None:
        assert load_data(path, label_column=label_column)[1].tolist() == y


def test_a_header_alone_is_a_file_without_rows(tmp_path):
    from muflow.data.local import load_source
    from muflow.data.source import DataSource

    path = tmp_path / "d.csv"
    path.write_text("a,b,label\n")
    for source in (str(path), str(tmp_path / "d.c*v")):
        with pytest.raises(DataFileError, match="header but no (data )?rows"):
            load_source(DataSource(path=source))


def test_sonar_has_208_rows_on_every_path(tmp_path):
    """Headerless, labels "M" and "R": read whole, by a glob of the one file, and as a list
    of two parts (the parts' schemas were said to differ)."""
    from muflow.data.local import load_source
    from muflow.data.source import DataSource
    from muflow.datasets import data_path

    lines = data_path("sonar.csv").read_text().splitlines(keepends=True)
    (tmp_path / "sonar.csv").write_text("".join(lines))
    (tmp_path / "a.csv").write_text("".join(lines[:100]))
    (tmp_path / "b.csv").write_text("".join(lines[100:]))
    for source in (str(tmp_path / "sonar.csv"), str(tmp_path / "sonar.c*v"),
                   (str(tmp_path / "a.csv"), str(tmp_path / "b.csv"))):
        X, y, layout = load_source(DataSource(path=source))
        assert X.shape == (208, 60) and set(y) == {"M", "R"} and not layout.header, source


def test_the_file_loader_takes_feature_columns(tmp_path):
    """By header name, or by position in a file without a header; a leading id is no
    feature by default; an npz file has no column names to choose by."""
    path = tmp_path / "d.csv"
    path.write_text("id,a,b,c,label\n7,0.1,0.2,0.3,R\n8,0.4,0.5,0.6,M\n")
    assert load_data(path, feature_columns=["c", "a"])[0].tolist() == [[0.3, 0.1], [0.6, 0.4]]
    assert load_data(path)[0].tolist() == [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]
    with pytest.raises(DataFileError, match="no feature column 'zz'; the columns are id, a, b"):
        load_data(path, feature_columns=["a", "zz"])
    with pytest.raises(DataFileError, match="feature column 'label' is not numeric; drop it"):
        load_data(path, label_column="a", feature_columns=["label"])
    path.write_text("0.1,0.2,0.3,R\n0.4,0.5,0.6,M\n")
    assert load_data(path, feature_columns=["2", "0"])[0].tolist() == [[0.3, 0.1], [0.6, 0.4]]
    np.savez(tmp_path / "d.npz", X=np.ones((2, 2)), y=np.arange(2))
    with pytest.raises(DataFileError, match="npz data have no column names.*drop feature_columns"):
        load_data(tmp_path / "d.npz", feature_columns=["0"])


@pytest.mark.parametrize("index", [False, True])
def test_pandas_default_column_names_are_a_header(tmp_path, index):
    """``pandas.DataFrame(X).to_csv(index=False)`` writes the header 0, 1, ..., k-1 (and,
    with its index, an empty name first): read as data it made a spurious sample, with a
    one-sample class of its own, on every path."""
    pd = pytest.importorskip("pandas")
    from muflow.data.local import load_source
    from muflow.data.source import DataSource

    X = np.array([[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]])
    frame = pd.DataFrame(X)
    frame[3] = [1, 2]
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=index)
    assert load_data(path)[0].tolist() == X.tolist()
    assert load_data(path)[1].tolist() == [1, 2]
    for source in (str(path), str(tmp_path / "d.c*v")):
        X_read, y, layout = load_source(DataSource(path=source))
        assert X_read.tolist() == X.tolist() and y.tolist() == [1, 2] and layout.header, source
    # a data row of other numbers stays data
    path.write_text("0,1,3,1\n0.5,1.5,2.5,2\n")
    assert load_data(path)[1].tolist() == [1, 2]
