"""The distributed Gram operator on a real 2-worker LocalCluster.

The solvers run unchanged against :class:`muflow.dask.store_operator.DaskGram`; their fits must
equal the in-memory fits (:class:`muflow.operators.DenseGram` over the same float32 K):
objective within 1e-6 relative and the same support set, also when a worker is killed in
the middle of a fit.
"""


import numpy as np
import pytest

from dask_cluster import KillAt, breast_cancer, local_client
from muflow.backends import operator_for
from muflow.dask.store_operator import DaskGram
from muflow.gram import ensure_gram, numpy_gram
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers import DualProblem
from muflow.solvers.registry import SOLVERS

MULTIPLICATIVE = ("m3", "m3_flipped", "munk", "musik", "seminmf")
SUPPORT_THRESHOLD = 1e-8  # as muflow.model: alpha below this fraction of the largest is not support
ITERATIONS = 100


@pytest.fixture(scope="module")
def bc_data():
    X, y = breast_cancer()
    return X[:400], y[:400]


@pytest.fixture(scope="module")
def rbf_store(client, bc_data, tmp_path_factory):
    X, _ = bc_data
    gram, _ = ensure_gram(X, Kernel("rbf", gamma=1.0), client=client,
                          store=str(tmp_path_factory.mktemp("gram") / "K.zarr"), tile=128)
    return gram


@pytest.fixture(scope="module")
def distributed_rbf(client, rbf_store):
    with DaskGram(rbf_store, client) as op:
        yield op


@pytest.fixture(scope="module")
def dense_rbf(rbf_store):
    return DenseGram(rbf_store.read())


def support(alpha):
    return frozenset(np.flatnonzero((alpha > SUPPORT_THRESHOLD * alpha.max(axis=0)).any(axis=1)))


def assert_same_fit(a, b):
    fa, fb = a.objective_curve[-1], b.objective_curve[-1]
    np.testing.assert_allclose(fa, fb, rtol=1e-6)
    assert support(a.alpha) == support(b.alpha)


def assert_same_predictions(a, b, Y, dense):
    """The two solutions classify every training sample alike (decision values K(Y a) + b)."""
    fa = dense.matmul(Y * a.alpha) + np.asarray(a.bias)[None, :]
    fb = dense.matmul(Y * b.alpha) + np.asarray(b.bias)[None, :]
    np.testing.assert_array_equal(np.sign(fa), np.sign(fb))


def test_products_equal_the_in_memory_operator(distributed_rbf, dense_rbf):
    rng = np.random.default_rng(0)
    V = rng.random((distributed_rbf.n, 5))
    assert distributed_rbf.resident and distributed_rbf.nonnegative
    assert len({address for _, address, _ in distributed_rbf.info()}) == 2
    np.testing.assert_allclose(distributed_rbf.matmul(V), dense_rbf.matmul(V), rtol=1e-6)
    idx = np.array([0, 7, 250, 399, 128])
    np.testing.assert_array_equal(distributed_rbf.rows(idx), dense_rbf.rows(idx))
    np.testing.assert_array_equal(distributed_rbf.diagonal(), dense_rbf.diagonal())


def test_signed_kernel_parts(client, bc_data, tmp_path):
    X, _ = bc_data
    kernel = Kernel("sigmoid", gamma=0.5, coef0=-1.0)
    op = operator_for(X, kernel, client=client, store=str(tmp_path / "S.zarr"), tile=128)
    dense = DenseGram(numpy_gram(X, kernel))
    assert not op.nonnegative and not dense.nonnegative
    V = np.random.default_rng(1).random((len(X), 3))
    for got, want in zip(op.matmul_parts(V), dense.matmul_parts(V)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    op.close()


SOLVER_CASES = list(MULTIPLICATIVE) + ["hybrid"]


@pytest.mark.parametrize("name", SOLVER_CASES)
def test_distributed_fit_equals_in_memory_fit(name, distributed_rbf, dense_rbf, bc_data):
    if name not in SOLVERS:
        pytest.skip(f"solver {name!r} is not registered in muflow.solvers.registry yet")
    _, y = bc_data
    solve = SOLVERS[name].solve
    # two problems in one batch: exact intercept with C=1, and C=10
    Y = np.column_stack([y, y])
    upper = np.column_stack([np.full(len(y), 1.0), np.full(len(y), 10.0)])
    if name == "hybrid":
        # run to a tolerance it reaches: its subset phase sums exact gradients in another
        # order on the workers (BLAS over blocks) than in memory, so the step on which it
        # stops may differ; the solution it stops at may not
        kwargs = dict(tol=1e-6, max_iter=100_000)
    else:
        # an unreachable tolerance: both run exactly ITERATIONS passes and are compared there
        kwargs = dict(tol=1e-12, max_iter=ITERATIONS)
    local = solve(DualProblem(dense_rbf, Y, upper=upper, equality=True), **kwargs)
    remote = solve(DualProblem(distributed_rbf, Y, upper=upper, equality=True), **kwargs)
    if name == "hybrid":
        assert local.converged.all() and remote.converged.all()
        assert remote.kkt_violation.max() <= 1e-6 and local.kkt_violation.max() <= 1e-6
    else:
        assert remote.n_iter == local.n_iter == ITERATIONS
    assert_same_fit(remote, local)
    assert_same_predictions(remote, local, Y, dense_rbf)


def _worker_pid_of_first_shard(op):
    shard = min(op._actors)
    actor = op._actors[shard][1]
    return actor.info().result()["pid"]


def test_worker_killed_mid_fit_the_fit_completes_with_the_same_result(client, rbf_store, dense_rbf, bc_data):
    _, y = bc_data
    solve = SOLVERS["m3"].solve
    kwargs = dict(tol=1e-12, max_iter=ITERATIONS)
    local = solve(DualProblem(dense_rbf, y, upper=1.0, equality=True), **kwargs)
    with DaskGram(rbf_store, client) as op:
        kill = KillAt(_worker_pid_of_first_shard(op), 40)
        remote = solve(DualProblem(op, y, upper=1.0, equality=True), callback=kill, **kwargs)
        assert kill.killed and op.recoveries >= 1
        assert all(address in client.scheduler_info(n_workers=-1)["workers"]
                   for _, address, _ in op.info())
    assert remote.n_iter == local.n_iter == ITERATIONS  # tol=1e-12 is out of reach: both capped
    assert_same_fit(remote, local)


def test_fit_interrupted_and_resumed_from_checkpoint_on_the_cluster(distributed_rbf, dense_rbf, bc_data, tmp_path):
    from muflow.checkpoint import Checkpointer, load_checkpoint

    _, y = bc_data
    solve = SOLVERS["munk"].solve
    problem = DualProblem(distributed_rbf, y, upper=1.0)
    total = 200
    full = solve(DualProblem(dense_rbf, y, upper=1.0), tol=1e-12, max_iter=total)
    run_dir = str(tmp_path / "run")
    first = Checkpointer(run_dir, every=25, problem=problem, stop_after=60)
    solve(problem, tol=1e-12, max_iter=total, callback=first)  # "interrupted" at 60
    ckpt = load_checkpoint(run_dir, n=problem.n, m=problem.m)
    assert ckpt.iteration == 50 and not ckpt.finished
    second = Checkpointer(run_dir, every=25, problem=problem, resume=ckpt)
    resumed = solve(problem, init=ckpt.init, tol=1e-12, max_iter=total - ckpt.iteration,
                    callback=second)
    second.finish(resumed)
    assert ckpt.iteration + resumed.n_iter == full.n_iter == total
    assert_same_fit(resumed, full)
    assert load_checkpoint(run_dir).finished and load_checkpoint(run_dir).iteration == total


# -- out of core: worker memory limits smaller than K ------------------------------------

@pytest.fixture(scope="module")
def small_memory_client():
    import dask

    # a memory limit only as a number muflow plans with: no pausing, spilling or killing of
    # the (far larger) worker processes
    with dask.config.set({"distributed.worker.memory.target": False,
                          "distributed.worker.memory.spill": False,
                          "distributed.worker.memory.pause": False,
                          "distributed.worker.memory.terminate": False}):
        with local_client(2, memory_limit="450kB") as c:
            yield c


def test_memory_smaller_than_k_trains_out_of_core_to_the_same_solution(small_memory_client, rbf_store, dense_rbf, bc_data):
    _, y = bc_data
    assert rbf_store.nbytes > 2 * 450_000 * 0.5  # K does not fit in the workers' share
    with DaskGram(rbf_store, small_memory_client) as op:
        assert not op.resident
        assert all(not resident for _, _, resident in op.info())
        solve = SOLVERS["musik"].solve
        kwargs = dict(tol=1e-12, max_iter=60)
        remote = solve(DualProblem(op, y, upper=1.0, equality=True), **kwargs)
        local = solve(DualProblem(dense_rbf, y, upper=1.0, equality=True), **kwargs)
        assert_same_fit(remote, local)
        idx = np.array([3, 200, 399])
        np.testing.assert_array_equal(op.rows(idx), dense_rbf.rows(idx))
        np.testing.assert_array_equal(op.diagonal(), dense_rbf.diagonal())


def test_memory_too_small_for_one_panel_is_refused(small_memory_client, client, bc_data, tmp_path):
    from muflow.exceptions import MuflowInputError

    X, _ = bc_data
    gram, _ = ensure_gram(X, Kernel("rbf", gamma=1.0), client=client,
                          store=str(tmp_path / "big-tiles.zarr"), tile=400)
    with pytest.raises(MuflowInputError, match="too small for one panel.*smaller --tile"):
        DaskGram(gram, small_memory_client)


def test_incomplete_store_is_refused(client, bc_data, tmp_path):
    from muflow.exceptions import MuflowInputError

    X, _ = bc_data
    gram, _ = ensure_gram(X, Kernel("rbf", gamma=1.0), client=client,
                          store=str(tmp_path / "K.zarr"), tile=128)
    gram.record_tiles(set(list(gram.recorded_tiles())[:3]))
    with pytest.raises(MuflowInputError, match="incomplete.*build it first"):
        DaskGram(gram, client)


def test_map_rows_computes_blockwise_on_the_cluster(client):
    import dask.array as da

    from muflow.dask.predict import is_dask_array, map_rows

    X = np.random.default_rng(2).normal(size=(500, 6))
    Xd = da.from_array(X, chunks=(128, 3))
    sv = X[:7]
    kernel = Kernel("rbf", gamma=0.3)
    scores = map_rows(lambda b: kernel.block(b, sv) @ np.arange(7.0), Xd)
    both = map_rows(lambda b: kernel.block(b, sv)[:, :2], Xd, n_outputs=2)
    assert is_dask_array(scores) and not is_dask_array(X)
    np.testing.assert_allclose(client.compute(scores).result(), kernel.block(X, sv) @ np.arange(7.0))
    np.testing.assert_allclose(client.compute(both).result(), kernel.block(X, sv)[:, :2])


def test_the_stored_gram_is_exactly_symmetric(rbf_store):
    # the panel servers answer rows of K from its columns: K must equal K' bit for bit,
    # float32 diagonal tiles included (sgemm's A A' is symmetric only up to round-off)
    K = rbf_store.read()
    np.testing.assert_array_equal(K, K.T)
