"""Gram stores under an fsspec URL whose file system needs options (an S3-compatible store
behind its ``endpoint_url``): every open and create of a store, in this process and on the
Dask workers that write its tiles and serve its panels, is given the storage options. The
workers opened the store by its URL alone and failed (or, on AWS S3 with a MinIO endpoint,
reached another store). No network: ``tests/gram_store_fs.py`` is local files behind a URL."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.gram import ensure_gram, numpy_gram
from muflow.kernels import Kernel
from tests.gram_store_fs import OPTIONS, register, url

RBF = Kernel("rbf", gamma=0.2)


@pytest.fixture(autouse=True)
def _registered():
    register()


@pytest.fixture
def X():
    return np.random.default_rng(7).normal(size=(48, 3))


def test_a_store_under_a_url_is_built_and_reused_with_its_storage_options(tmp_path, X):
    cache = url(tmp_path / "gram")
    gram, report = ensure_gram(X, RBF, cache_dir=cache, dtype="float64", tile=16,
                               storage_options=OPTIONS)
    assert gram.url.startswith(cache) and gram.storage_options == OPTIONS
    assert len(report.computed) == report.total == 6  # 3 x 3 tiles, the upper triangle
    (store,) = (tmp_path / "gram").glob("gram-*.zarr")  # on the disk behind the URL
    assert len(list(store.glob("c/*/*"))) == 9
    again, report = ensure_gram(X, RBF, cache_dir=cache, dtype="float64", storage_options=OPTIONS)
    assert report.reused and again.url == gram.url
    np.testing.assert_allclose(again.read(), numpy_gram(X, RBF, dtype="float64"), rtol=1e-12)


def test_a_url_that_needs_options_is_not_reached_without_them(tmp_path, X):
    with pytest.raises(ValueError, match="opens with endpoint_url="):
        ensure_gram(X, RBF, cache_dir=url(tmp_path / "gram"), dtype="float64")


def test_the_workers_write_the_tiles_and_serve_the_panels_with_the_options(client, tmp_path, X):
    """The tiles written by the workers (:func:`muflow.gram.build.compute_tile`) and the
    panels their actors load (:class:`muflow.dask.store_operator.PanelServer`) open the
    store with its options, in other processes."""
    from muflow.dask.operators import cluster_store_operator

    client.run(register)
    operator = cluster_store_operator(X, RBF, client=client, cache_dir=url(tmp_path / "gram"),
                                      dtype="float64", tile=16, storage_options=OPTIONS)
    try:
        V = np.random.default_rng(1).normal(size=(48, 2))
        np.testing.assert_allclose(operator.matmul(V), numpy_gram(X, RBF, dtype="float64") @ V,
                                   rtol=1e-10)
    finally:
        operator.close()
    (store,) = (tmp_path / "gram").glob("gram-*.zarr")
    assert len(list(store.glob("c/*/*"))) == 9


def test_the_gram_and_sweep_commands_take_the_stores_options(client, tmp_path, X, monkeypatch,
                                                             capsys):
    """`gram --out URL` and `sweep --cache-dir URL` open their stores with --store-options
    (a "${NAME}" value from the environment); without them the URL is not reached, and
    beside a local path they are refused naming the fix. The gram command opened and built
    its store by the URL alone: no option reached it."""
    from muflow.cli import main
    from tests.gram_store_fs import ENDPOINT

    client.run(register)
    monkeypatch.setenv("MUFLOW_TEST_GRAM_ENDPOINT", ENDPOINT)
    np.savez(tmp_path / "d.npz", X=X, y=(X[:, 0] > 0).astype(int))
    store = url(tmp_path / "K.zarr")
    args = ["gram", "--data", str(tmp_path / "d.npz"), "--kernel", "rbf", "--gamma", "0.2",
            "--tile", "16", "--dtype", "float64", "--scheduler", client.scheduler.address]
    options = ["--store-options", '{"endpoint_url": "${MUFLOW_TEST_GRAM_ENDPOINT}"}']
    assert main(args + ["--out", store] + options) == 0
    assert "computed 6 of 6 tiles" in capsys.readouterr().out
    assert len(list((tmp_path / "K.zarr").glob("c/*/*"))) == 9  # on the disk behind the URL
    assert main(args + ["--out", store] + options) == 0
    assert "reused" in capsys.readouterr().out
    assert main(args + ["--out", store]) != 0
    assert "endpoint_url" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "local.zarr")] + options) == 2
    assert "--store-options are given, but" in capsys.readouterr().err

    from muflow.cli import build_parser
    from muflow.commands.sweep import grid_from_args

    sweep = build_parser().parse_args(["sweep", "--data", "d.npz", "--out", "o", "--cache-dir",
                                       url(tmp_path / "cache"), *options])
    assert grid_from_args(sweep)[1]["storage_options"] == OPTIONS  # to run_sweep's stores
