"""Damaged Gram stores never give wrong numbers: every chunk carries a CRC-32C checksum, a
damaged tile is named (store, tile, repair) when the data are not at hand and recomputed
when they are (issue 22)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr

from muflow.backends import gram_operator
from muflow.cli import main as cli_main
from muflow.gram import ensure_gram, numpy_gram
from muflow.gram.store import GramStore, StoreCorruptError, cache_path, fingerprint
from muflow.kernels import Kernel

KERNEL = Kernel("rbf", gamma=0.3)


@pytest.fixture
def X():
    return np.random.default_rng(4).normal(size=(100, 5))


def chunk_file(url, i, j) -> str:
    return os.path.join(url, "c", str(i), str(j))


def zero(path):  # the same number of bytes, all zero
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.write(bytes(size))


def truncate(path):
    with open(path, "r+b") as fh:
        fh.truncate(os.path.getsize(path) // 3)


DAMAGE = {"zeroed": zero, "truncated": truncate, "deleted": os.remove}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_tile_is_named_when_read_and_recomputed_by_a_deep_check(X, tmp_path, damage):
    url = str(tmp_path / "K.zarr")
    gram, _ = ensure_gram(X, KERNEL, store=url, tile=32, dtype="float64")
    clean = gram.read()
    DAMAGE[damage](chunk_file(url, 1, 2))
    with pytest.raises(StoreCorruptError) as err:
        GramStore.open(url, mode="r").read()
    message = str(err.value)
    assert url in message and "tile (1, 2)" in message and "--deep-check" in message
    # without reading every tile, only a deleted chunk is noticed; a deep check finds all
    gram, report = ensure_gram(X, KERNEL, store=url, dtype="float64", deep_check=True)
    assert report.computed == [(1, 2)]
    np.testing.assert_array_equal(gram.read(), clean)


def test_the_gram_command_deep_check_recomputes_a_zeroed_tile(tmp_path, capsys):
    data = tmp_path / "train.npz"
    X = np.random.default_rng(5).normal(size=(90, 4))
    np.savez(data, X=X, y=(X[:, 0] > 0).astype(int))
    out = str(tmp_path / "K.zarr")
    argv = ["gram", "--data", str(data), "--kernel", "rbf", "--gamma", "0.3", "--tile", "32",
            "--out", out, "--workers", "1"]
    assert cli_main(argv) == 0
    zero(chunk_file(out, 0, 2))
    capsys.readouterr()
    assert cli_main(argv + ["--deep-check"]) == 0
    printed = capsys.readouterr().out
    assert "reused" not in printed and "computed 1 of 6 tiles" in printed
    np.testing.assert_allclose(GramStore.open(out).read(), numpy_gram(X, Kernel("rbf", gamma=0.3), dtype="float32"),
                               rtol=0, atol=1e-6)


def test_a_cached_store_with_a_damaged_tile_is_recomputed_when_the_data_are_at_hand(X, tmp_path):
    cache = str(tmp_path / "cache")
    first = gram_operator(X, KERNEL, cache_dir=cache).dense.copy()
    url = cache_path(cache, fingerprint(X), KERNEL, "float64")
    chunks = sorted(os.listdir(os.path.join(url, "c", "0")))
    zero(os.path.join(url, "c", "0", chunks[-1]))
    again = gram_operator(X, KERNEL, cache_dir=cache).dense
    np.testing.assert_array_equal(again, first)


def test_a_store_without_checksums_is_refused_with_the_repair(X, tmp_path):
    url = str(tmp_path / "old.zarr")
    gram, _ = ensure_gram(X, KERNEL, store=url, tile=50)
    array = zarr.open_array(url, mode="r+")
    array.update_attributes({"muflow_format": 1})
    with pytest.raises(StoreCorruptError, match="older muflow, without tile checksums"):
        GramStore.open(url)


def test_on_a_cluster_a_damaged_tile_is_named_without_the_data_and_recomputed_with_them(X, tmp_path):
    from dask_cluster import local_client

    from muflow.backends import operator_for
    from muflow.dask.store_operator import DaskGram

    url = str(tmp_path / "K.zarr")
    with local_client(2) as client:
        gram, _ = ensure_gram(X, KERNEL, client=client, store=url, tile=32)
        clean = gram.read()
        zero(chunk_file(url, 3, 1))
        with pytest.raises(StoreCorruptError, match=r"tile \(3, 1\)"):
            DaskGram(url, client)
        operator = operator_for(X, KERNEL, client=client, store=url)
        try:
            V = np.random.default_rng(0).normal(size=(100, 2))
            np.testing.assert_allclose(operator.matmul(V), clean.astype(np.float64) @ V, rtol=1e-5)
        finally:
            operator.close()


def test_two_concurrent_builds_of_one_store_compute_each_tile_once(X, tmp_path):
    import threading

    url = str(tmp_path / "K.zarr")
    reports, errors = [], []

    def build():
        try:
            reports.append(ensure_gram(X, KERNEL, store=url, tile=20,
                                       on_tile=lambda i, j, k: __import__("time").sleep(0.01))[1])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    computed = sorted(len(r.computed) for r in reports)
    assert computed == [0, 15]  # 5 x 5 tiles, upper triangle: the second build reused them
    np.testing.assert_allclose(GramStore.open(url).read(), numpy_gram(X, KERNEL, dtype="float32"),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_well_formed_tile_holding_nan_or_inf_is_refused_naming_the_store(X, tmp_path, value):
    """Written through zarr, so its checksum holds: only the finiteness check catches it."""
    url = str(tmp_path / "K.zarr")
    ensure_gram(X, KERNEL, store=url, tile=32, dtype="float64")
    array = zarr.open_array(url, mode="r+")
    array[40, 70] = value  # tile (1, 2)
    with pytest.raises(StoreCorruptError) as err:
        GramStore.open(url, mode="r").read_block(32, 64)
    message = str(err.value)
    assert message.count("\n") == 0
    assert f"Gram store {url}: tile (1, 2) is damaged (it is missing or holds non-finite" in message
    assert "--deep-check" in message
