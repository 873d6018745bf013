"""Data sources read in this process (:mod:`muflow.data.source`, ``tabular``, ``local``).

- The same rows from a Parquet directory, a glob, a ``file://`` URL, a list of files, a
  zarr group and one CSV file; the format inferred from the suffix.
- The fingerprint lists files, sizes and modification times: rewriting a file changes it.
- Each bad source gives one line naming the problem: a missing path or URL, a glob that
  matches nothing, no label column, a non-numeric feature column, NaN or infinite values,
  files of different schemas, an empty file, an endpoint that does not answer (within the
  timeout, not a hang), a literal credential in the configuration, an unset variable.
"""

from __future__ import annotations

import socket
import time

import numpy as np
import pandas as pd
import pytest

from muflow.config import from_dict
from muflow.data.local import load_source
from muflow.data.source import DataSource, parse_storage_options
from muflow.exceptions import DataFileError, MuflowInputError

N, D = 120, 4


def frame(seed=0, n=N):
    """n rows: D numeric features f0.. and an integer label column."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(D)])
    df["label"] = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
    return df


def write_parquet_dir(folder, df, parts=3):
    folder.mkdir()
    bounds = np.linspace(0, len(df), parts + 1).astype(int)
    for i in range(parts):
        df.iloc[bounds[i]:bounds[i + 1]].to_parquet(folder / f"part-{i}.parquet", index=False)
    return folder


@pytest.fixture
def data(tmp_path):
    df = frame()
    write_parquet_dir(tmp_path / "pq", df)
    df.to_csv(tmp_path / "one.csv", index=False, float_format="%.17g")
    import zarr

    group = zarr.open_group(str(tmp_path / "set.zarr"), mode="w")
    group.create_array("X", data=df[[f"f{j}" for j in range(D)]].to_numpy(), chunks=(50, D))
    group.create_array("y", data=df["label"].to_numpy(), chunks=(50,))
    return tmp_path, df


def test_every_kind_of_path_reads_the_same_rows(data):
    root, df = data
    X_ref, y_ref = df.iloc[:, :D].to_numpy(), df["label"].to_numpy()
    paths = [str(root / "pq"), str(root / "pq" / "*.parquet"), (root / "pq").as_uri(),
             (str(root / "pq" / "part-0.parquet"), str(root / "pq" / "part-1.parquet"),
              str(root / "pq" / "part-2.parquet")),
             str(root / "set.zarr"), str(root / "one.csv")]
    formats = []
    for path in paths:
        X, y, layout = load_source(DataSource(path=path))
        np.testing.assert_array_equal(X, X_ref)
        np.testing.assert_array_equal(y, y_ref)
        formats.append(layout.format)
    assert formats == ["parquet"] * 4 + ["zarr", "csv"]


def test_feature_columns_and_label_by_name(data):
    root, df = data
    X, y, layout = load_source(DataSource(path=str(root / "pq"), label_column="f0",
                                          feature_columns=("f2", "f3")))
    np.testing.assert_array_equal(X, df[["f2", "f3"]].to_numpy())
    np.testing.assert_array_equal(y, df["f0"].to_numpy())
    assert layout.label == "f0" and layout.features == ("f2", "f3")


def test_the_default_features_are_the_numeric_columns_but_the_label(tmp_path):
    df = frame()
    df.insert(1, "city", ["a", "b"] * (N // 2))
    df.to_parquet(tmp_path / "x.parquet", index=False)
    X, _, layout = load_source(DataSource(path=str(tmp_path / "x.parquet")))
    assert layout.features == tuple(f"f{j}" for j in range(D)) and X.shape == (N, D)


def test_the_fingerprint_changes_when_a_file_is_rewritten(data):
    root, df = data
    source = DataSource(path=str(root / "pq"))
    before = source.fingerprint()
    assert [f["path"] for f in before["files"]] == [(root / "pq" / f"part-{i}.parquet").as_uri()
                                                    for i in range(3)]
    assert all(f["size"] > 0 and f["modified"] for f in before["files"])
    assert source.fingerprint() == before
    time.sleep(0.01)
    df.iloc[:10].to_parquet(root / "pq" / "part-1.parquet", index=False)
    after = source.fingerprint()
    assert after["files"][0] == before["files"][0] and after["files"][1] != before["files"][1]


def one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_missing_path_names_it(tmp_path):
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(tmp_path / "nothing.parquet")))
    assert "does not exist" in one_line(exc) and "nothing.parquet" in one_line(exc)
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=(tmp_path / "gone").as_uri() + "/"))
    assert "does not exist" in one_line(exc)


def test_a_glob_that_matches_nothing(tmp_path):
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(tmp_path / "part-*.parquet")))
    assert "matches no file" in one_line(exc)


def test_no_label_column(data):
    root, _ = data
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(root / "pq"), label_column="target"))
    assert "no label column 'target'" in one_line(exc) and "f0, f1" in one_line(exc)


def test_a_non_numeric_feature_column(tmp_path):
    df = frame()
    df["city"] = ["a", "b"] * (N // 2)
    df.to_parquet(tmp_path / "x.parquet", index=False)
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(tmp_path / "x.parquet"), label_column="label",
                               feature_columns=("f0", "city")))
    assert "feature column 'city' is not numeric" in one_line(exc)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_infinite_values(tmp_path, bad):
    df = frame()
    df.loc[7, "f2"] = bad
    write_parquet_dir(tmp_path / "pq", df)
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(tmp_path / "pq")))
    assert "1 NaN or infinite value" in one_line(exc)


def test_files_of_different_schemas(tmp_path):
    folder = write_parquet_dir(tmp_path / "pq", frame(), parts=2)
    frame(1).rename(columns={"f3": "g3"}).to_parquet(folder / "part-9.parquet", index=False)
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(folder)))
    assert "schemas differ" in one_line(exc) and "part-9.parquet has (f0: double" in one_line(exc)


def test_an_empty_file(tmp_path):
    folder = write_parquet_dir(tmp_path / "pq", frame(), parts=2)
    frame().iloc[:0].to_parquet(folder / "part-5.parquet", index=False)
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(folder)))
    assert "part-5.parquet holds no rows (an empty partition)" in one_line(exc)


def test_an_endpoint_that_does_not_answer_times_out(monkeypatch):
    """A server that accepts connections and never answers: the listing gives up at the
    source's timeout with one line, where an unbounded client would wait."""
    pytest.importorskip("s3fs")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        source = DataSource(path="s3://bucket/train/", storage_options={"endpoint_url": url},
                            timeout=1.5)
        t0 = time.perf_counter()
        with pytest.raises(DataFileError) as exc:
            load_source(source)
        waited = time.perf_counter() - t0
    assert "did not answer within 1.5 s" in one_line(exc) and "s3://bucket/train/" in one_line(exc)
    assert waited < 10


def test_credentials_name_environment_variables(monkeypatch):
    with pytest.raises(MuflowInputError) as exc:
        from_dict({"data": {"path": "s3://b/x/", "storage_options": {"secret": "hunter2"}}})
    assert "data.storage_options.secret holds a literal credential" in one_line(exc)
    with pytest.raises(MuflowInputError) as exc:
        parse_storage_options('{"client_kwargs": {"aws_secret_access_key": "abc"}}')
    assert "literal credential" in one_line(exc)
    cfg = from_dict({"data": {"path": "s3://b/x/", "storage_options": {"secret": "${MY_SECRET}"}}})
    assert cfg.to_dict()["data"]["storage_options"] == {"secret": "${MY_SECRET}"}
    monkeypatch.delenv("MY_SECRET", raising=False)
    with pytest.raises(MuflowInputError) as exc:
        cfg.data.source().options()
    assert "names the environment variable MY_SECRET, which is not set" in one_line(exc)
    monkeypatch.setenv("MY_SECRET", "s3cr3t")
    assert cfg.data.source().options() == {"secret": "s3cr3t"}


def test_config_keys_of_the_data_table():
    cfg = from_dict({"data": {"path": ["a.parquet", "b.parquet"], "format": "parquet",
                              "feature_columns": ["x", "y"], "test_path": "s3://b/test/"}})
    assert cfg.data.path == ("a.parquet", "b.parquet") and cfg.data.feature_columns == ("x", "y")
    assert cfg.data.source(test=True).path == "s3://b/test/"
    with pytest.raises(MuflowInputError, match="data.format"):
        from_dict({"data": {"path": "a", "format": "excel"}})
    with pytest.raises(MuflowInputError, match="data.feature_columns must be a list"):
        from_dict({"data": {"path": "a", "feature_columns": "x"}})


def test_fit_and_sweep_take_a_parquet_directory(data, tmp_path):
    """``fit`` and ``sweep`` read the same sources (``--data``, ``--label-column``); a bad
    one is one line, exit code 2, nothing written."""
    import subprocess
    import sys

    root, _ = data

    def muflow(*args):
        return subprocess.run([sys.executable, "-m", "muflow", *args], capture_output=True, text=True,
                              timeout=120)

    res = muflow("fit", "--data", str(root / "pq"), "--label-column", "label", "--out",
                 str(tmp_path / "model"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "model").is_dir()
    res = muflow("sweep", "--data", str(root / "pq"), "--label-column", "target", "--out",
                 str(tmp_path / "sweep"))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "no label column 'target'" in res.stderr
    assert not (tmp_path / "sweep").exists()


@pytest.fixture
def with_id(tmp_path):
    """The frame with a leading sample-id column and a text column, as one CSV file, two CSV
    parts (a glob and a list) and one Parquet file."""
    df = frame()
    df.insert(0, "id", np.arange(1000, 1000 + N))
    df.insert(3, "city", ["a", "b"] * (N // 2))
    df.to_csv(tmp_path / "one.csv", index=False, float_format="%.17g")
    (tmp_path / "parts").mkdir()
    df.iloc[:50].to_csv(tmp_path / "parts" / "part-0.csv", index=False, float_format="%.17g")
    df.iloc[50:].to_csv(tmp_path / "parts" / "part-1.csv", index=False, float_format="%.17g")
    df.to_parquet(tmp_path / "one.parquet", index=False)
    paths = [str(tmp_path / "one.csv"), str(tmp_path / "parts" / "part-*.csv"),
             (str(tmp_path / "parts" / "part-0.csv"), str(tmp_path / "parts" / "part-1.csv")),
             str(tmp_path / "one.parquet")]
    return paths, df


def test_feature_columns_are_honoured_on_every_path(with_id):
    """A single CSV file read whole was given every column (feature_columns ignored)."""
    paths, df = with_id
    for path in paths:
        X, y, layout = load_source(DataSource(path=path, label_column="label",
                                              feature_columns=("f3", "f1")))
        np.testing.assert_array_equal(X, df[["f3", "f1"]].to_numpy())
        np.testing.assert_array_equal(y, df["label"].to_numpy())
        assert layout.features == ("f3", "f1") and layout.label == "label"


def test_the_default_features_are_the_same_on_every_path(with_id):
    """Every numeric column but the label and a leading sample id: the CSV file loader
    dropped the ``id`` column and refused the text column; Parquet and CSV parts kept the id."""
    paths, df = with_id
    for path in paths:
        X, _, layout = load_source(DataSource(path=path, label_column="label"))
        assert layout.features == tuple(f"f{j}" for j in range(D)), path
        np.testing.assert_array_equal(X, df[[f"f{j}" for j in range(D)]].to_numpy())


@pytest.mark.parametrize("columns, message", [
    (("f1", "zz"), "no feature column 'zz'; the columns are id, f0, f1, city"),
    (("f1", "city"), "feature column 'city' is not numeric"),
])
def test_a_bad_feature_column_is_refused_on_every_path(with_id, columns, message):
    """Refused before anything is read (the run's check) and by the read itself."""
    from muflow.config import check_data_exists

    paths, _ = with_id
    for path in paths:
        with pytest.raises(DataFileError) as exc:
            load_source(DataSource(path=path, label_column="label", feature_columns=columns))
        assert message in one_line(exc), path
        cfg = from_dict({"data": {"path": path if isinstance(path, str) else list(path),
                                  "label_column": "label", "feature_columns": list(columns)}})
        with pytest.raises(DataFileError, match=message.split(";")[0]):
            check_data_exists(cfg)


def test_feature_columns_of_files_without_column_names_are_refused(tmp_path, data):
    """An npz, svmlight file or zarr group has no column names: feature_columns were ignored."""
    from sklearn.datasets import dump_svmlight_file

    root, df = data
    X, y = df.iloc[:, :D].to_numpy(), df["label"].to_numpy()
    np.savez(tmp_path / "d.npz", X=X, y=y)
    dump_svmlight_file(X, y, str(tmp_path / "d.svm"))
    for path, kind in ((tmp_path / "d.npz", "an npz file"), (tmp_path / "d.svm", "a svmlight file"),
                       (root / "set.zarr", "a zarr group")):
        with pytest.raises(DataFileError) as exc:
            load_source(DataSource(path=str(path), feature_columns=("f0",)))
        assert f"{kind} has no column names" in one_line(exc)
        assert "drop feature_columns" in one_line(exc)


def test_a_label_column_of_files_without_column_names_is_refused(tmp_path, data):
    """``--label-column`` or ``data.label_column`` on an npz, svmlight file or zarr group
    was ignored and the run went on with the file's own labels; it is refused as
    feature_columns is, before the run starts. No labels (``label_column=False``, predict
    --no-labels) is still taken."""
    from sklearn.datasets import dump_svmlight_file

    from muflow.config import check_data_exists
    from muflow.data.files import load_data

    root, df = data
    X, y = df.iloc[:, :D].to_numpy(), df["label"].to_numpy()
    np.savez(tmp_path / "d.npz", X=X, y=y)
    dump_svmlight_file(X, y, str(tmp_path / "d.svm"))
    for path, kind, labels in ((tmp_path / "d.npz", "an npz file", "its array 'y'"),
                               (tmp_path / "d.svm", "a svmlight file", "each line's first number"),
                               (root / "set.zarr", "a zarr group", "its array 'y'")):
        for column in ("class", 0):
            with pytest.raises(DataFileError) as exc:
                load_source(DataSource(path=str(path), label_column=column))
            assert (f"{kind} has no column names, so label_column cannot choose among them; "
                    f"drop label_column (--label-column): the labels are {labels}") in one_line(exc)
        cfg = from_dict({"data": {"path": str(path), "label_column": "class"}})
        with pytest.raises(DataFileError, match="label_column cannot choose"):
            check_data_exists(cfg)
    with pytest.raises(DataFileError, match="npz data have no column names, so label_column"):
        load_data(tmp_path / "d.npz", label_column="class")
    assert load_source(DataSource(path=str(tmp_path / "d.npz"), label_column=False))[1] is None


def test_a_whitespace_separated_file_is_read_whole_and_refused_by_a_glob(tmp_path):
    """Its columns are chosen from its first lines too: whitespace separated when read
    whole; a glob's files are read as comma separated, so it is refused there."""
    path = tmp_path / "d.txt"
    path.write_text("1 0.5 0.25\n0 0.75 0.125\n")
    X, y, layout = load_source(DataSource(path=str(path), label_column=0, feature_columns=("2",)))
    assert X.tolist() == [[0.25], [0.125]] and y.tolist() == [1, 0] and layout.whole
    with pytest.raises(DataFileError) as exc:
        load_source(DataSource(path=str(tmp_path / "d.t*t"), label_column=0))
    assert "d.txt is not comma separated" in one_line(exc)


def test_a_pandas_index_is_no_feature(tmp_path):
    """``DataFrame.to_csv`` writes the row index first, under an empty name, and
    ``to_parquet`` a column ``__index_level_0__``: both were read as a feature (the row
    number, which follows the file's order)."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(40, 3)), columns=["f0", "f1", "f2"])
    df["label"] = np.arange(40) % 2
    df.index = df.index + 100  # not a default RangeIndex: Parquet stores it as a column
    df.to_csv(tmp_path / "a.csv")
    df.to_csv(tmp_path / "part-1.csv")
    df.to_parquet(tmp_path / "a.parquet")
    for path in (str(tmp_path / "a.csv"), str(tmp_path / "part-*.csv"), str(tmp_path / "a.parquet")):
        X, y, layout = load_source(DataSource(path=path, label_column="label"))
        assert layout.features == ("f0", "f1", "f2"), path
        np.testing.assert_array_equal(X, df[["f0", "f1", "f2"]].to_numpy())


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    """A label or feature chosen by a name two columns share was the first of them."""
    (tmp_path / "d.csv").write_text("a,b,a,label\n1,2,3,0\n4,5,6,1\n")
    (tmp_path / "part-1.csv").write_text("a,b,a,label\n1,2,3,0\n4,5,6,1\n")
    for path in (tmp_path / "d.csv", tmp_path / "part-*.csv"):
        with pytest.raises(DataFileError) as exc:
            load_source(DataSource(path=str(path), label_column="label"))
        assert "the columns a are named more than once; give every column its own name" in one_line(exc)
