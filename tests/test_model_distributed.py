"""SVC(client=...): the Gram store built on the cluster, every iteration served there."""

import os

import numpy as np
import pytest

from dask_cluster import breast_cancer, local_client

import muflow
import muflow.dask_panels
import muflow.model


@pytest.fixture(scope="module")
def client():
    with local_client(2) as c:
        yield c


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = str(tmp_path / "gram-cache")
    monkeypatch.setenv("MUFLOW_CACHE_DIR", path)
    return path


def test_svc_on_the_cluster_matches_the_in_process_fit(client, cache_dir, monkeypatch):
    # 300 samples would be fitted whole on one worker: this test serves every pass there,
    # from the Gram store (kernel panels that do not fit, muflow.dask_panels.panels_fit)
    monkeypatch.setattr(muflow.model, "ONE_TASK_MAX_SAMPLES", 0)
    monkeypatch.setattr(muflow.dask_panels, "PANEL_FRACTION", 0.0)
    X, y = breast_cancer()
    X, y = X[:300], y[:300]
    params = dict(kernel="rbf", gamma=1.0, C=1.0, solver="m3", max_iter=80, tol=1e-12)
    local = muflow.SVC(**params).fit(X, y)
    remote = muflow.SVC(client=client, **params).fit(X, y)
    stores = [p for p in os.listdir(cache_dir) if p.endswith(".zarr")]
    assert len(stores) == 1  # built on the cluster, in the cache
    # float32 store against the float64 in-process K
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=1e-4)
    assert np.mean(remote.predict(X) == local.predict(X)) >= 0.99
    # a second fit reuses the store
    again = muflow.SVC(client=client.scheduler.address, **params).fit(X, y)
    assert sorted(p for p in os.listdir(cache_dir) if p.endswith(".zarr")) == stores
    np.testing.assert_allclose(again.objective_, remote.objective_, rtol=1e-9)


def test_predict_accepts_dask_arrays(client, cache_dir):
    import dask.array as da
    from sklearn.base import clone

    X, y = breast_cancer()
    model = muflow.SVC(kernel="rbf", gamma=1.0, max_iter=50).fit(X[:300], y[:300])
    Xd = da.from_array(X, chunks=(200, 9))
    scores = model.decision_function(Xd)
    labels = model.predict(Xd)
    assert isinstance(scores, da.Array) and isinstance(labels, da.Array)
    np.testing.assert_allclose(client.compute(scores).result(), model.decision_function(X))
    np.testing.assert_array_equal(client.compute(labels).result(), model.predict(X))
    # with an address rather than a Client object, sklearn's clone works
    cloned = clone(muflow.SVC(client=client.scheduler.address))
    assert cloned.client == client.scheduler.address


def test_a_small_problem_is_fitted_whole_on_one_worker(client, cache_dir):
    """Every registered solver: one task on a worker, the in-process answer, no store."""
    from muflow.solvers.registry import SOLVERS

    X, y = breast_cancer()
    X, y = X[:200], y[:200]
    for name in sorted(SOLVERS):
        intercept = "exact" if "exact" in SOLVERS[name].intercepts else "regularized"
        params = dict(kernel="rbf", gamma=1.0, C=1.0, solver=name, intercept=intercept, max_iter=300)
        local = muflow.SVC(**params).fit(X, y)
        remote = muflow.SVC(client=client.scheduler.address, **params).fit(X, y)
        assert remote.timings_["one_task"] > 0 and remote.solver_ == local.solver_
        np.testing.assert_allclose(remote.objective_, local.objective_, rtol=1e-9, err_msg=name)
        np.testing.assert_array_equal(remote.predict(X), local.predict(X))
        assert remote.client == client.scheduler.address
    assert not os.path.exists(cache_dir) or not [p for p in os.listdir(cache_dir) if p.endswith(".zarr")]


def test_one_task_errors_are_the_in_process_errors(client):
    X, y = breast_cancer()
    with pytest.raises(ValueError, match="NaN"):
        muflow.SVC(client=client).fit(np.where(X == X[0, 0], np.nan, X)[:100], y[:100])
