"""SVC(client=...): the Gram store built on the cluster, every iteration served there."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from dask_cluster import breast_cancer

import muflow
import muflow.dask.fitting
import muflow.routing


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    path = str(tmp_path / "gram-cache")
    monkeypatch.setenv("MUFLOW_CACHE_DIR", path)
    return path


def test_svc_on_the_cluster_matches_the_in_process_fit(client, cache_dir, monkeypatch):
    # 300 samples would be fitted whole on one worker: this test serves every pass there,
    # from the Gram store (kernel panels that do not fit, muflow.routing.panels_fit)
    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)
    monkeypatch.setattr(muflow.routing, "PANEL_FRACTION", 0.0)
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


def test_a_dask_precomputed_kernel_is_refused_naming_the_kernel_not_the_client(client):
    """A client and solver='auto' were given: the message names what is wrong, a
    precomputed kernel's K given as a dask collection, and the fix, K as a NumPy array."""
    import dask.array as da

    from muflow.exceptions import MuflowInputError

    X, y = breast_cancer()
    K = da.from_array(X[:200] @ X[:200].T, chunks=100)
    with pytest.raises(MuflowInputError, match="precomputed") as refused:
        muflow.SVC(kernel="precomputed", client=client).fit(K, y[:200])
    assert "NumPy array" in str(refused.value)
    assert "client=" not in str(refused.value)


def test_a_client_that_is_not_the_default_keeps_its_fitter(client):
    """A client made with set_as_default=False (as muflow.dask.cluster.connect makes them) beside
    the default one: its actor once went through the default client while nothing kept it,
    was freed on its worker, and the next call waited forever."""
    from distributed import Client

    X, y = breast_cancer()
    X, y = X[:200], y[:200]
    params = dict(kernel="rbf", gamma=1.0, solver="smo", max_iter=300)
    local = muflow.SVC(**params).fit(X, y)
    with Client(client.scheduler.address, set_as_default=False) as other:
        for _ in range(3):  # the first fit leaves time for a freed actor to be gone
            remote = muflow.SVC(client=other, **params).fit(X, y)
            np.testing.assert_allclose(remote.objective_, local.objective_, rtol=1e-9)
        assert muflow.dask.fitting._FITTERS[other].actor._client is other
    muflow.dask.fitting._fitter_on(client)  # drops the closed client's
    assert other not in muflow.dask.fitting._FITTERS


def test_a_lost_fitter_call_is_made_again_on_a_new_actor(client, monkeypatch):
    """A call that never reaches the worker (as when distributed's Actor drops the error of
    a call to a freed actor) is told from a fit at work and made again, not waited on."""
    monkeypatch.setattr(muflow.dask.fitting, "FITTER_POLL_S", 0.2)
    monkeypatch.setattr(muflow.dask.fitting, "FITTER_LOST_S", 1.0)

    class Mute:
        def __init__(self, actor):
            self.calls_on = actor

        @property
        def calls(self):
            return self.calls_on.calls

        def fit(self, *args):
            return self

        def result(self, timeout):
            time.sleep(timeout)
            raise TimeoutError

    X, y = breast_cancer()
    X, y = X[:200], y[:200]
    lost = muflow.dask.fitting._fitter_on(client)
    lost.actor = Mute(lost.actor)
    t0 = time.perf_counter()
    remote = muflow.SVC(client=client, solver="smo", max_iter=300).fit(X, y)
    assert time.perf_counter() - t0 < 10
    assert muflow.dask.fitting._FITTERS[client] is not lost
    local = muflow.SVC(solver="smo", max_iter=300).fit(X, y)
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=1e-9)


def test_fits_from_a_process_without_a_default_client(client, tmp_path):
    """`muflow fit --scheduler` and SVC(client="tcp://...") in a fresh process: no default
    client there, where every muflow actor (the small fit's, the working-set partitions',
    the Gram panels') once had no client to call through."""
    script = (
        "import json, sys, numpy as np, muflow, muflow.routing\n"
        "sys.path.insert(0, 'tests')\n"
        "from dask_cluster import breast_cancer\n"
        "X, y = breast_cancer()\n"
        "m = muflow.SVC(client=sys.argv[1], solver='smo', max_iter=300).fit(X[:200], y[:200])\n"
        "assert m.timings_['one_task'] > 0\n"
        "muflow.routing.ONE_TASK_MAX_SAMPLES = 0\n"
        "for solver in ('working_set', 'm3'):\n"
        "    o = muflow.SVC(client=sys.argv[1], solver=solver, max_iter=20).fit(X[:200], y[:200])\n"
        "    assert np.all(np.isfinite(o.objective_)) and 'one_task' not in o.timings_\n"
        "print(json.dumps(m.objective_.tolist()))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", script, client.scheduler.address],
                         capture_output=True, text=True, timeout=120, cwd=root,
                         env=dict(os.environ, MUFLOW_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr[-3000:]
    X, y = breast_cancer()
    local = muflow.SVC(solver="smo", max_iter=300).fit(X[:200], y[:200])
    np.testing.assert_allclose(json.loads(out.stdout.splitlines()[-1]), local.objective_, rtol=1e-9)


def test_a_model_fitted_with_a_client_object_pickles_with_its_address(client):
    """A Client does not pickle (sockets, an event loop): the model pickles with the
    scheduler's address in its place and predicts as before."""
    import pickle

    X, y = breast_cancer()
    model = muflow.SVC(gamma=0.5, client=client).fit(X, y)
    again = pickle.loads(pickle.dumps(model))
    assert again.client == client.scheduler.address and model.client is client
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def test_grid_search_over_an_svc_given_a_client_object(client):
    """clone shares the Client (it does not deep-copy); GridSearchCV then fits every
    candidate on the cluster, and with n_jobs=2 its workers get the model pickled with the
    scheduler's address."""
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    X, y = breast_cancer()
    model = muflow.SVC(gamma=0.5, client=client)
    twin = clone(model)
    assert twin.client is client and twin.get_params()["gamma"] == 0.5
    for n_jobs in (1, 2):
        search = GridSearchCV(model, {"C": [0.5, 2.0]}, cv=3, n_jobs=n_jobs).fit(X, y)
        local = GridSearchCV(muflow.SVC(gamma=0.5), {"C": [0.5, 2.0]}, cv=3).fit(X, y)
        np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                                   local.cv_results_["mean_test_score"], atol=1e-9)


def test_prediction_on_blocks_of_no_rows_is_the_in_process_prediction(client):
    """A dask array with an empty row chunk and a filtered dask DataFrame with empty
    partitions: the empty blocks give empty results (the in-memory method refused them,
    "Found array with 0 sample(s)", at compute)."""
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n_samples=300, centers=3, n_features=6, random_state=0)
    model = muflow.SVC(gamma=0.1, probability=True, random_state=0).fit(X, y)
    gappy = da.from_array(X, chunks=((100, 0, 200), (6,)))
    frame = pd.DataFrame(X).assign(row=np.arange(len(X)))
    kept = dd.from_pandas(frame, npartitions=4)
    kept = kept[kept["row"] < 120].drop(columns="row")
    assert 0 in kept.map_partitions(len).compute().tolist()
    for method in ("predict", "decision_function", "predict_proba"):
        expected = getattr(model, method)(X)
        got = client.compute(getattr(model, method)(gappy)).result()
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
        got = client.compute(getattr(model, method)(kept)).result()
        np.testing.assert_allclose(got, expected[:120], rtol=1e-12, atol=1e-14)
