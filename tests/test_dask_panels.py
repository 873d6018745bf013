"""The multiplicative solvers on the working-set solver's row partitions (muflow.dask.panels)
on a real 2-worker LocalCluster: the in-process iterate, every column of a batch in one round
trip a pass, a lost worker's panel rebuilt from its source."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_classification
from sklearn.exceptions import ConvergenceWarning

import muflow
import muflow.routing
from muflow.dask.panels import DaskRowPanels
from muflow.routing import panel_bytes, panels_fit
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel
from muflow.multiclass import binary_problems
from muflow.operators import DenseGram
from muflow.solvers import DualProblem
from muflow.solvers.registry import SOLVERS
from tests.dask_cluster import kill_first_partition_at
from tests.test_dask_working_set import as_form

OBJECTIVE_RTOL = 1e-5
#: Passes of each fit: a fixed budget, so that both sides stop at the same pass.
PASSES = 120


@pytest.fixture(autouse=True)
def iterate_on_the_workers(monkeypatch, tmp_path):
    """These problems would be fitted whole on one worker as one task
    (muflow.routing.ONE_TASK_MAX_SAMPLES): this module tests the per-pass path. A Gram store
    would be built in the cache: it must stay empty."""
    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)
    monkeypatch.setenv("MUFLOW_CACHE_DIR", str(tmp_path / "gram-cache"))


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=600, n_features=12, n_informative=6, flip_y=0.05,
                               random_state=0)
    return X, y


def _stores(tmp_path):
    return list((tmp_path / "gram-cache").glob("*.zarr"))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("form", ["numpy", "csr", "dask.array", "dask.csr"])
@pytest.mark.parametrize("solver", ["m3", "munk", "musik"])
def test_multiplicative_fits_on_the_panels_equal_the_in_process_fit(client, data, solver, form,
                                                                   tmp_path):
    X, y = data
    params = dict(kernel="rbf", gamma=0.1, C=1.0, solver=solver, max_iter=PASSES, tol=1e-12)
    local = muflow.SVC(**params).fit(X, y)
    remote = muflow.SVC(client=client, **params).fit(as_form(X, form), y)
    assert remote.solver_ == solver and remote.n_iter_.max() == local.n_iter_.max() == PASSES
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=OBJECTIVE_RTOL)
    np.testing.assert_array_equal(remote.support_, local.support_)
    assert not _stores(tmp_path)  # no Gram store: the panels served every pass


def test_a_one_vs_one_batch_is_one_round_trip_a_pass(client):
    """Six pair columns (12 columns of V, the class split of M3 eq. (5)): every product is
    one call per actor carrying all of them."""
    X, y = make_blobs(n_samples=500, centers=4, cluster_std=2.5, random_state=0)
    Y, member = binary_problems(y, 4, "ovo")
    kernel = Kernel("rbf", gamma=0.1)
    m = Y.shape[1]
    reference = SOLVERS["m3"].solve(DualProblem(DenseGram(kernel.block(X)), Y, upper=1.0 * member,
                                                equality=True), tol=1e-12, max_iter=PASSES)
    with DaskRowPanels(X, kernel, client) as panels:
        sol = SOLVERS["m3"].solve(DualProblem(panels, Y, upper=1.0 * member, equality=True),
                                  tol=1e-12, max_iter=PASSES)
        infos = [actor.info().result() for actor in panels.actors]
        products = panels.products
    np.testing.assert_allclose(sol.objective, reference.objective, rtol=OBJECTIVE_RTOL)
    assert m == 6 and sol.n_iter == PASSES
    # a pass is one product (plus one per safeguard line search)
    assert sol.n_iter + 1 <= products <= sol.n_iter + 1 + 2 * sol.timings["safeguard_passes"]
    for info in infos:  # one call per actor per product, every column in it
        assert info["widths"] == {2 * m: products}
        assert info["products"] == 0  # no rows of X were sent for a product


def test_the_panels_answer_every_product_as_the_kernel(client):
    X, _ = make_classification(n_samples=300, n_features=5, random_state=2)
    rng = np.random.default_rng(0)
    V = rng.normal(size=(300, 3))
    for kernel in (Kernel("rbf", gamma=0.2), Kernel("poly", gamma=0.5, coef0=-1.0, degree=3)):
        K = kernel.block(X)
        with DaskRowPanels(X, kernel, client) as panels:
            assert panels.nonnegative == bool(K.min() >= 0)
            np.testing.assert_allclose(panels.matmul(V), K @ V, atol=1e-10)
            np.testing.assert_allclose(panels.matmul(V[:, 0]), K @ V[:, 0], atol=1e-10)
            np.testing.assert_allclose(panels.matmul_precise(V), K @ V, atol=1e-10)
            pos, neg = panels.matmul_parts(V)
            np.testing.assert_allclose(pos, np.maximum(K, 0) @ V, atol=1e-10)
            np.testing.assert_allclose(neg, np.maximum(-K, 0) @ V, atol=1e-10)
    with DaskRowPanels(X, Kernel("rbf", gamma=0.2), client, gram_dtype="float32") as panels:
        assert panels.dtype == np.float32
        np.testing.assert_allclose(panels.matmul(V), Kernel("rbf", gamma=0.2).block(X) @ V,
                                   rtol=1e-5, atol=1e-4)


def test_panels_that_do_not_fit_take_the_gram_store(client, data, monkeypatch, tmp_path):
    """The rule: an even share of K within PANEL_FRACTION of the smallest worker's memory
    limit (2 GiB here); otherwise the Gram store, which a dask collection cannot take."""
    X, y = data
    assert panel_bytes(600, 2, np.float64) == 300 * 600 * 8
    assert panels_fit(600, client, np.float64)
    assert not panels_fit(40_000, client, np.float32)  # 20,000 x 40,000 x 4 B = 3.0 GiB
    monkeypatch.setattr(muflow.routing, "PANEL_FRACTION", 0.0)
    params = dict(kernel="rbf", gamma=0.1, C=1.0, solver="m3", max_iter=5)
    with pytest.warns(ConvergenceWarning):
        muflow.SVC(client=client, **params).fit(X, y)
    assert len(_stores(tmp_path)) == 1
    with pytest.raises(MuflowInputError, match="do not fit in the workers' memory"):
        muflow.SVC(client=client, **params).fit(as_form(X, "dask.array"), y)


@pytest.mark.parametrize("form", ["numpy", "dask.array"])
def test_a_worker_killed_mid_fit_the_fit_completes_with_the_same_objective(client, data, form):
    X, y = data
    y = np.where(y > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=0.1)
    reference = SOLVERS["m3"].solve(DualProblem(DenseGram(kernel.block(X)), y, upper=1.0,
                                                equality=True), tol=1e-12, max_iter=PASSES)
    panels = DaskRowPanels(as_form(X, form), kernel, client)
    kill = kill_first_partition_at(client, panels, 5)
    try:
        sol = SOLVERS["m3"].solve(DualProblem(panels, y, upper=1.0, equality=True), tol=1e-12,
                                  max_iter=PASSES, callback=kill)
        assert kill.killed and panels.recoveries >= 1
    finally:
        panels.close()
    assert sol.n_iter == PASSES
    np.testing.assert_allclose(sol.objective, reference.objective, rtol=OBJECTIVE_RTOL)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_row_chunk_of_no_rows_is_skipped_on_the_panels(client, data):
    """An empty row chunk made a panel of no rows, which refused to start."""
    import dask.array as da

    X, y = data
    params = dict(kernel="rbf", C=1.0, solver="m3", max_iter=PASSES, tol=1e-12)
    local = muflow.SVC(**params).fit(X, y)
    gappy = da.from_array(X, chunks=((300, 0, 300), (X.shape[1],)))
    remote = muflow.SVC(client=client, **params).fit(gappy, y)
    assert remote.solver_ == "m3" and remote.n_iter_.max() == PASSES
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=OBJECTIVE_RTOL)
