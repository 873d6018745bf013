"""The working-set loop on the device home, run under NumPy, against the in-process home on
the same kernel values: the same iterations, objective to 1e-9 relative, the same
predictions (a8a and 4 classes). On a GPU only the two raw kernels and the GEMMs change
(tests/device/test_gpu.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file, make_classification

import muflow.device.arrays as arrays
from muflow import SVC
from muflow.device.home import DeviceHome
from muflow.device.rows import DeviceRows
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.solvers import DualProblem
from muflow.solvers.working_set import solve_working_set
from tests.conftest import shared_data

RTOL = 1e-9


@pytest.fixture(scope="module")
def a8a_part():
    """The first 4,000 rows of a8a and the first 2,000 of a8a.t."""
    X, y = load_svmlight_file(str(shared_data("a8a")), n_features=123)
    Xt, yt = load_svmlight_file(str(shared_data("a8a.t")), n_features=123)
    return X[:4000], y[:4000], Xt[:2000], yt[:2000]


@pytest.fixture
def numpy_as_the_device(monkeypatch):
    """device="cuda" resolved to NumPy: the device code paths of SVC, run in this process."""
    monkeypatch.setattr(arrays, "_cupy_or_reason", lambda: (np, None))


def _problem(operator, y, *, C=1.0, equality=True):
    Y = np.asarray(y, dtype=float)[:, None]
    return DualProblem(operator, Y, upper=np.full_like(Y, C), linear=-np.ones_like(Y),
                       equality=equality)


def _same(device, cpu):
    np.testing.assert_allclose(device.objective_curve[-1], cpu.objective_curve[-1], rtol=RTOL)
    assert device.n_iter == cpu.n_iter
    np.testing.assert_allclose(device.bias, cpu.bias, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(device.alpha, cpu.alpha, rtol=0, atol=1e-7)


@pytest.mark.parametrize("equality", [True, False], ids=["exact_bias", "no_bias"])
def test_the_device_home_under_numpy_solves_a8a_as_the_in_process_home(a8a_part, equality):
    n = 4000 if equality else 2000  # without the bias the loop takes more iterations
    X, y = a8a_part[0][:n], a8a_part[1][:n]
    kernel = Kernel("rbf", gamma=0.05)
    # a cache of 600 rows: rows are evicted and fetched again
    cache_mb = 600 * n * 8 / 2**20
    cpu = solve_working_set(_problem(KernelRows(X, kernel, dtype="float64"), y, equality=equality),
                            tol=1e-3, cache_mb=cache_mb)
    device = solve_working_set(_problem(DeviceRows(X, kernel, np), y, equality=equality),
                               tol=1e-3, cache_mb=cache_mb)
    _same(device, cpu)
    assert device.timings["rows_fetched"] == cpu.timings["rows_fetched"] > 600
    assert device.timings["second_order_sides"] == cpu.timings["second_order_sides"]
    assert device.kkt_violation[0] <= 1e-3


def test_a_warm_start_takes_its_product_on_the_device_and_ends_where_the_cpu_ends(a8a_part):
    X, y = a8a_part[:2]
    X, y = X[:1500], y[:1500]
    kernel = Kernel("rbf", gamma=0.05)
    cpu_op, dev_op = KernelRows(X, kernel, dtype="float64"), DeviceRows(X, kernel, np)
    start = solve_working_set(_problem(cpu_op, y, C=0.5), tol=1e-3).alpha  # no gradient carried
    cpu = solve_working_set(_problem(cpu_op, y, C=2.0), init=start, tol=1e-3)
    device = solve_working_set(_problem(dev_op, y, C=2.0), init=start, tol=1e-3)
    _same(device, cpu)
    assert device.timings["full_gradient"] > 0
    np.testing.assert_allclose(device.gradient, cpu.gradient, rtol=0, atol=1e-9)


def test_svc_on_the_device_path_fits_and_predicts_a8a_as_the_cpu(a8a_part, numpy_as_the_device):
    X, y, Xt, _ = a8a_part
    params = dict(gamma=0.05, C=1.0, gram_dtype="float64", cache_size=40)
    cpu = SVC(gram="rows", **params).fit(X, y)
    device = SVC(device="cuda", **params).fit(X, y)
    assert device.solver_ == cpu.solver_ == "working_set"
    np.testing.assert_allclose(device.objective_, cpu.objective_, rtol=RTOL)
    np.testing.assert_array_equal(device.support_, cpu.support_)
    np.testing.assert_array_equal(device.predict(Xt), cpu.predict(Xt))
    np.testing.assert_allclose(device.decision_function(Xt), cpu.decision_function(Xt),
                               rtol=0, atol=1e-5)


def test_svc_on_the_device_path_fits_four_classes_as_the_cpu(numpy_as_the_device):
    X, y = make_classification(2400, 12, n_informative=8, n_classes=4, random_state=0)
    Xt, y_test = X[1600:], y[1600:]
    X, y = X[:1600], y[:1600]
    params = dict(gamma=0.05, C=2.0, gram_dtype="float64")
    cpu = SVC(gram="rows", **params).fit(X, y)
    device = SVC(device="cuda", **params).fit(X, y)
    assert device.objective_.shape == (6,)  # one-vs-one, each pair on its own samples
    np.testing.assert_allclose(device.objective_, cpu.objective_, rtol=RTOL)
    np.testing.assert_array_equal(device.predict(Xt), cpu.predict(Xt))
    assert device.score(Xt, y_test) > 0.5


def test_the_home_lowers_q_to_the_rows_its_cache_holds():
    X = np.random.default_rng(0).normal(size=(500, 4))
    home = DeviceHome(DeviceRows(X, Kernel("rbf", gamma=0.5), np), cache_mb=10 * 500 * 8 / 2**20)
    assert home.cache.slots == 10
    assert home.q_limit(64) == 10
    assert type(home.cache.data) is np.ndarray and home.cache.data.shape == (10, 500)


@pytest.mark.parametrize("resident", [False, True], ids=["streamed", "resident"])
def test_a_product_solver_on_the_device_path_ends_as_on_the_cpu(numpy_as_the_device, monkeypatch,
                                                                resident):
    import muflow.device.rows as rows

    if resident:  # as on a GPU for a product solver: K kept on the device
        monkeypatch.setattr(rows, "resident_bytes", lambda xp: 10**9)
    X, y = make_classification(600, 8, random_state=1)
    params = dict(gamma=0.1, solver="munk", intercept="regularized", max_iter=30)
    with pytest.warns(Warning):  # stopped at max_iter, both
        device = SVC(device="cuda", **params).fit(X, y)
        cpu = SVC(device="cpu", **params).fit(X, y)
    np.testing.assert_allclose(device.objective_, cpu.objective_, rtol=RTOL)
    np.testing.assert_array_equal(device.predict(X), cpu.predict(X))


def test_a_sweep_on_the_device_path_scores_as_on_the_cpu(a8a_part, numpy_as_the_device, tmp_path):
    from muflow.selection import SweepGrid, run_sweep

    X, y = a8a_part[0][:1000], a8a_part[1][:1000]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.01, 0.05]}], C=[1.0])
    device = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "d", progress=False, device="cuda")
    cpu = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "c", progress=False, device="cpu")
    assert (device.best["gamma"], device.best["C"]) == (cpu.best["gamma"], cpu.best["C"])
    assert abs(device.best["cv_accuracy"] - cpu.best["cv_accuracy"]) <= 0.005


def test_solves_over_an_operator_that_keeps_its_cache_reuse_the_rows_on_the_device(a8a_part):
    from muflow.solvers.rowcache import keep_row_cache

    X, y = a8a_part[0][:1500], a8a_part[1][:1500]
    op = keep_row_cache(DeviceRows(X, Kernel("rbf", gamma=0.05), np))
    first = solve_working_set(_problem(op, y, C=1.0), tol=1e-3)
    second = solve_working_set(_problem(op, y, C=1.0), init=first, tol=1e-3)
    assert first.timings["rows_fetched"] > 0
    assert second.timings["rows_fetched"] == 0  # every row it reads, the first left cached
    assert len(op.kept_row_caches) == 1 and op.kept_row_caches[256.0].data.shape[0] > 0
