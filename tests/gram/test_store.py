"""The zarr Gram store without a cluster: content addressing, validation, damage, cache."""

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from muflow.exceptions import MuflowInputError
from muflow.gram import ensure_gram, fingerprint, numpy_gram
from muflow.gram.store import GramStore, StoreCorruptError, StoreMismatchError
from muflow.kernels import Kernel


@pytest.fixture
def data():
    return np.random.default_rng(3).normal(size=(300, 6))


@pytest.fixture
def rbf():
    return Kernel("rbf", gamma=0.2)


def test_fingerprint_depends_on_content_not_on_representation(data):
    assert fingerprint(data) == fingerprint(data.copy())
    assert fingerprint(data)["sha256"] != fingerprint(data[:-1])["sha256"]
    changed = data.copy()
    changed[5, 2] += 1e-9
    assert fingerprint(data)["sha256"] != fingerprint(changed)["sha256"]
    S = sp.random(50, 20, density=0.2, random_state=0, format="csr")
    assert fingerprint(S) == fingerprint(sp.csr_matrix(S.toarray()))
    assert fingerprint(S)["sha256"] != fingerprint(S.toarray())["sha256"]


def test_store_opens_with_plain_zarr_and_json_attributes(tmp_path, data, rbf):
    gram, report = ensure_gram(data, rbf, store=str(tmp_path / "K.zarr"), tile=128)
    assert len(report.computed) == report.total == 6
    array = zarr.open_array(str(tmp_path / "K.zarr"), mode="r")
    attrs = json.loads(json.dumps(dict(array.attrs)))
    assert attrs["kernel"] == rbf.to_dict() and attrs["dtype"] == "float32"
    assert attrs["fingerprint"] == fingerprint(data) and attrs["tile"] == 128
    assert len(attrs["tiles_complete"]) == 6 and attrs["muflow_version"]
    K = np.asarray(array[...])
    assert K.dtype == np.float32
    np.testing.assert_allclose(K, rbf.block(data), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(K, K.T)


def test_mismatched_store_is_refused_saying_which(tmp_path, data, rbf):
    path = str(tmp_path / "K.zarr")
    ensure_gram(data, rbf, store=path, tile=128)
    with pytest.raises(StoreMismatchError, match="the kernel differs.*gamma=0.2.*gamma=0.3"):
        ensure_gram(data, Kernel("rbf", gamma=0.3), store=path)
    with pytest.raises(StoreMismatchError, match="the data differ") as err:
        ensure_gram(data[:200], rbf, store=path)
    assert "kernel" not in str(err.value).split("does not match:")[1]
    with pytest.raises(StoreMismatchError, match="dtype differs"):
        ensure_gram(data, rbf, store=path, dtype="float64")


def test_reuse_computes_nothing_and_cache_dir_maps_data_and_kernel(tmp_path, data, rbf):
    cache = str(tmp_path / "cache")
    first, r1 = ensure_gram(data, rbf, cache_dir=cache, tile=128)
    second, r2 = ensure_gram(data, rbf, cache_dir=cache)
    assert r1.computed and r2.computed == [] and r2.reused
    assert second.url == first.url
    other, r3 = ensure_gram(data, Kernel("rbf", gamma=0.5), cache_dir=cache, tile=128)
    assert other.url != first.url and len(r3.computed) == r3.total
    # a store written elsewhere is found through the pointer the cache keeps
    elsewhere = str(tmp_path / "elsewhere.zarr")
    ensure_gram(data, Kernel("laplacian", gamma=0.1), store=elsewhere, cache_dir=cache, tile=128)
    found, r4 = ensure_gram(data, Kernel("laplacian", gamma=0.1), cache_dir=cache)
    assert found.url == elsewhere and r4.reused


def _chunk_file(path, i, j):
    return os.path.join(path, "c", str(i), str(j))


def test_missing_chunk_is_detected_and_only_its_tile_rebuilt(tmp_path, data, rbf):
    path = str(tmp_path / "K.zarr")
    ensure_gram(data, rbf, store=path, tile=128)
    os.remove(_chunk_file(path, 2, 0))  # the transposed half of tile (0, 2)
    gram = GramStore.open(path)
    assert gram.missing_tiles() == [(0, 2)]
    _, report = ensure_gram(data, rbf, store=path)
    assert report.computed == [(0, 2)]
    np.testing.assert_allclose(GramStore.open(path).read(), rbf.block(data), atol=1e-6)


def test_garbled_chunk_is_found_by_the_deep_check(tmp_path, data, rbf):
    path = str(tmp_path / "K.zarr")
    ensure_gram(data, rbf, store=path, tile=128)
    with open(_chunk_file(path, 1, 1), "wb") as fh:
        fh.write(b"not a chunk")
    gram = GramStore.open(path)
    assert gram.missing_tiles() == []  # present, so the quick check passes
    assert gram.missing_tiles(deep=True) == [(1, 1)]
    _, report = ensure_gram(data, rbf, store=path, deep_check=True)
    assert report.computed == [(1, 1)]
    np.testing.assert_allclose(GramStore.open(path).read(), rbf.block(data), atol=1e-6)


def test_partial_store_resumes_with_the_unrecorded_tiles(tmp_path, data, rbf):
    path = str(tmp_path / "K.zarr")
    gram, _ = ensure_gram(data, rbf, store=path, tile=64)
    recorded = sorted(gram.recorded_tiles())
    kept = set(recorded[:7])
    gram.record_tiles(kept)  # as if the build had stopped after 7 tiles
    _, report = ensure_gram(data, rbf, store=path)
    assert sorted(report.computed) == sorted(set(recorded) - kept)


def test_not_a_muflow_store_is_refused(tmp_path, data, rbf):
    path = str(tmp_path / "other.zarr")
    zarr.create_array(store=path, shape=(300, 300), chunks=(100, 100), dtype="f4")
    with pytest.raises(StoreCorruptError, match="not a muflow Gram store"):
        ensure_gram(data, rbf, store=path)
    with pytest.raises(MuflowInputError, match="float32 or float64"):
        ensure_gram(data, rbf, store=str(tmp_path / "x.zarr"), dtype="int8")


def test_float64_store_and_sparse_rows(tmp_path, rbf):
    X = sp.random(200, 30, density=0.1, random_state=1, format="csr")
    gram, _ = ensure_gram(X, rbf, store=str(tmp_path / "S.zarr"), dtype="float64", tile=64)
    K = gram.read()
    assert K.dtype == np.float64
    np.testing.assert_allclose(K, rbf.block(X), rtol=0, atol=1e-12)
    np.testing.assert_allclose(numpy_gram(X, rbf, dtype="float64", block_rows=50), K, atol=1e-12)


def test_fsspec_urls(tmp_path, data, rbf):
    gram, report = ensure_gram(data, rbf, store="memory://muflow-test/K.zarr", tile=128)
    assert len(report.computed) == 6 and gram.missing_tiles() == []
    _, again = ensure_gram(data, rbf, store="memory://muflow-test/K.zarr")
    assert again.reused
    url = "file://" + str(tmp_path / "F.zarr")
    gram, _ = ensure_gram(data, rbf, store=url, tile=128)
    assert gram.url == str(tmp_path / "F.zarr")
    np.testing.assert_allclose(zarr.open_array(gram.url)[...], rbf.block(data), atol=1e-6)
