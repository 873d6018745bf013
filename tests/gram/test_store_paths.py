"""Where a Gram store may be written: what an --out or a cache directory already holds is
never replaced by a store, and a path that cannot hold one is named in one line."""

import os

import numpy as np
import pytest
import zarr

from muflow.cli import main
from muflow.exceptions import MuflowInputError
from muflow.gram import ensure_gram
from muflow.kernels import Kernel
from tests.read_only import read_only

RBF = Kernel("rbf", gamma=0.2)


@pytest.fixture
def X():
    return np.random.default_rng(5).normal(size=(60, 4))


@pytest.fixture
def csv_file(tmp_path):
    rng = np.random.default_rng(2)
    rows = [f"{a:.4f},{b:.4f},{int(a > 0)}" for a, b in rng.normal(size=(30, 2))]
    path = tmp_path / "train.csv"
    path.write_text("x1,x2,y\n" + "\n".join(rows) + "\n")
    return path


def _gram(csv_file, *options):
    return main(["gram", "--data", str(csv_file), "--gamma", "0.5", "--workers", "1", *options])


def _error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines()
           if not line.startswith("Dask dashboard:")]
    assert len(err) == 1, err
    return err[0]


def test_gram_out_onto_a_directory_of_other_files_is_refused_and_keeps_them(csv_file, tmp_path,
                                                                            capsys):
    results = tmp_path / "results"
    (results / "sub").mkdir(parents=True)
    (results / "notes.txt").write_text("mine")
    assert _gram(csv_file, "--out", str(results)) == 2
    line = _error_line(capsys)
    assert "holds other things (notes.txt, sub)" in line and "another --out" in line
    assert (results / "notes.txt").read_text() == "mine" and (results / "sub").is_dir()
    assert sorted(os.listdir(results)) == ["notes.txt", "sub"]


def test_gram_out_onto_a_zarr_group_of_data_is_refused_and_keeps_it(X, tmp_path, capsys):
    """``gram --data train.zarr --out train.zarr`` wiped the data set it read."""
    data = tmp_path / "train.zarr"
    group = zarr.open_group(str(data), mode="w")
    group.create_array("X", data=X)
    group.create_array("y", data=(X[:, 0] > 0).astype(int))
    assert main(["gram", "--data", str(data), "--gamma", "0.1", "--out", str(data),
                 "--workers", "1"]) == 2
    line = _error_line(capsys)
    assert f"{data} is a zarr group (X, y)" in line and "another --out" in line
    again = zarr.open_group(str(data), mode="r")
    np.testing.assert_array_equal(again["X"][...], X)


def test_gram_out_onto_a_store_with_damaged_metadata_says_it_is_damaged(csv_file, tmp_path,
                                                                          capsys):
    """A store whose zarr.json was cut short was called "a directory that holds other things
    (c, zarr.json), not a Gram store"; it is named damaged, with the fix, and kept."""
    store = tmp_path / "K.zarr"
    assert _gram(csv_file, "--out", str(store)) == 0
    capsys.readouterr()
    metadata = store / "zarr.json"
    metadata.write_bytes(metadata.read_bytes()[:50])
    assert _gram(csv_file, "--out", str(store)) == 2
    line = _error_line(capsys)
    assert (f"--out {store} is a zarr store whose metadata (zarr.json) cannot be read: it is "
            f"damaged; delete it (rm -r {store})") in line, line
    assert len(metadata.read_bytes()) == 50
    import shutil

    shutil.rmtree(store)  # the fix given works
    assert _gram(csv_file, "--out", str(store)) == 0


def test_gram_out_onto_a_file_is_refused_in_one_line(csv_file, tmp_path, capsys):
    target = tmp_path / "file.zarr"
    target.write_text("hello")
    assert _gram(csv_file, "--out", str(target)) == 2
    line = _error_line(capsys)
    assert f"--out {target} is a file" in line and "another --out" in line
    assert target.read_text() == "hello"


def test_ensure_gram_writes_a_store_only_into_nothing_an_empty_directory_or_a_store(X, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    gram, report = ensure_gram(X, RBF, store=str(empty), tile=32)
    assert len(report.computed) == report.total
    assert ensure_gram(X, RBF, store=str(empty))[1].reused  # its own store: reused
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("a")
    with pytest.raises(MuflowInputError, match="holds other things"):
        ensure_gram(X, RBF, store=str(other))
    assert os.listdir(other) == ["a.txt"]
    group = "memory://muflow-paths/group.zarr"
    zarr.open_group(group, mode="w").create_array("X", data=X)
    with pytest.raises(MuflowInputError, match="is a zarr group \\(X\\), not a Gram store"):
        ensure_gram(X, RBF, store=group)
    assert "X" in zarr.open_group(group, mode="r")


def test_a_refused_store_leaves_no_pointer_in_the_cache(X, tmp_path):
    """``gram --out S --cache-dir C`` refused (S holds another data's store) recorded a
    pointer C -> S anyway, and every later use of C on these data failed on S."""
    cache, S = tmp_path / "C", str(tmp_path / "S.zarr")
    ensure_gram(X[:40], RBF, store=S, tile=32)
    with pytest.raises(MuflowInputError, match="does not match"):
        ensure_gram(X, RBF, store=S, cache_dir=str(cache))
    assert not list(cache.glob("gram-*.json"))
    gram, report = ensure_gram(X, RBF, cache_dir=str(cache), tile=32)
    assert gram.url.startswith(str(cache)) and len(report.computed) == report.total


def test_a_pointer_to_a_store_rebuilt_for_other_data_is_ignored(X, tmp_path):
    cache, S = str(tmp_path / "C"), str(tmp_path / "S.zarr")
    ensure_gram(X, RBF, store=S, cache_dir=cache, tile=32)
    assert ensure_gram(X, RBF, cache_dir=cache)[0].url == S  # the pointer serves
    import shutil

    shutil.rmtree(S)
    other = X[::-1].copy()
    ensure_gram(other, RBF, store=S, tile=32)  # S now holds another data's K
    gram, report = ensure_gram(X, RBF, cache_dir=cache, tile=32)
    assert gram.url.startswith(cache) and len(report.computed) == report.total
    np.testing.assert_allclose(gram.read(), RBF.block(X), atol=1e-6)
    assert ensure_gram(other, RBF, store=S)[1].reused  # S untouched


def test_a_complete_store_in_a_read_only_cache_is_reused(X, tmp_path):
    """A shared, pre-built cache: reading it needs no write (a lock file beside the store
    was opened first, and the store opened for writing)."""
    cache = tmp_path / "cache"
    built, _ = ensure_gram(X, RBF, cache_dir=str(cache), tile=32)
    ensure_gram(X, RBF, cache_dir=str(cache), dtype="float64", tile=32)
    for lock in cache.glob(".*.lock"):
        lock.unlink()
    with read_only(cache):
        gram, report = ensure_gram(X, RBF, cache_dir=str(cache))
        assert gram.url == built.url and report.reused
        assert ensure_gram(X, RBF, cache_dir=str(cache), dtype="float64", deep_check=True)[1].reused
        np.testing.assert_allclose(gram.read(), RBF.block(X), atol=1e-6)
        with pytest.raises(MuflowInputError) as err:  # a kernel it does not hold: to be built
            ensure_gram(X, Kernel("rbf", gamma=0.7), cache_dir=str(cache))
    text = str(err.value)
    assert f"cannot write in {cache}" in text and "another cache directory (--cache-dir)" in text


@pytest.mark.parametrize("command, option, where", [
    ("gram", "--cache-dir", "afile"), ("gram", "--cache-dir", "afile/sub"),
    ("gram", "--out", "afile/K.zarr"), ("sweep", "--cache-dir", "afile")])
def test_a_file_where_a_directory_is_expected_is_named_in_one_line(csv_file, tmp_path, capsys,
                                                                  command, option, where):
    """It was a raw FileExistsError or NotADirectoryError."""
    afile = tmp_path / "afile"
    afile.write_text("mine")
    path = tmp_path / where
    extra = ["--workers", "1"] if command == "gram" else ["--folds", "2", "--out",
                                                          str(tmp_path / "sw"), "--no-progress"]
    assert main([command, "--data", str(csv_file), "--gamma", "0.5", option, str(path),
                 *extra]) == 2
    line = _error_line(capsys)
    said = f"{option} {path} is a file" if where == "afile" else f"{option} {path}: {afile} is a file"
    assert said in line and f"another {option}" in line, line
    assert afile.read_text() == "mine"


def test_a_cache_dir_that_is_a_file_is_refused_before_the_store_is_built(X, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    with pytest.raises(MuflowInputError, match="is a file, not a directory"):
        ensure_gram(X, RBF, store=str(tmp_path / "S.zarr"), cache_dir=str(afile))
    assert not (tmp_path / "S.zarr").exists()


def test_relative_store_and_cache_paths_reach_the_workers_absolute(X, tmp_path, monkeypatch):
    """Workers resolve a path against their own working directory, not this process's: a
    relative --out or --cache-dir is made absolute before the workers get it. The working
    directory changes after the cluster started, so that the two differ."""
    from dask_cluster import local_client

    with local_client(1) as client:
        monkeypatch.chdir(tmp_path)
        gram, _ = ensure_gram(X, RBF, client=client, store="K.zarr", tile=32)
        assert gram.url == str(tmp_path / "K.zarr")
        assert gram.missing_tiles() == []
        np.testing.assert_allclose(zarr.open_array(gram.url)[...], RBF.block(X), atol=1e-6)
        cached, _ = ensure_gram(X, Kernel("rbf", gamma=0.5), client=client, cache_dir="cache",
                                tile=32)
        assert os.path.isabs(cached.url) and cached.url.startswith(str(tmp_path / "cache"))
        assert cached.missing_tiles() == []
