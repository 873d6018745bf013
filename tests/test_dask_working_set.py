"""The working-set solver across Dask workers (muflow.dask.working_set) on a real 2-worker
LocalCluster: the same answer as in process, X kept on the workers, O(q d) per iteration."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import make_blobs, make_classification

import muflow
import muflow.routing
from muflow.dask.partitions import DaskRowPartitions
from muflow.dask.working_set import solve_working_set_dask
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers import DualProblem
from muflow.solvers.working_set import solve_working_set
from tests.dask_cluster import breast_cancer, kill_first_partition_at

OBJECTIVE_RTOL = 1e-5
#: Both solves run the one loop (muflow.solvers.working_set_loop); at a tight tol their
#: objectives agree to this (issue 29)
SAME_LOOP_RTOL = 1e-7


@pytest.fixture(autouse=True)
def iterate_on_the_workers(monkeypatch):
    """These problems are small enough to be fitted whole on one worker as one task
    (muflow.routing.ONE_TASK_MAX_SAMPLES): this module tests the per-iteration path."""
    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(n_samples=1500, n_features=20, n_informative=10, flip_y=0.05,
                               random_state=0)
    return X, y


def as_form(X, form):
    import dask.array as da

    if form == "numpy":
        return X
    if form == "csr":
        return sp.csr_matrix(X)
    if form == "dask.array":
        return da.from_array(X, chunks=(500, X.shape[1]))
    if form == "dask.csr":  # chunks that are CSR matrices
        return da.from_array(sp.csr_matrix(X), chunks=(500, X.shape[1]), asarray=False)
    import dask.dataframe as dd
    import pandas as pd

    return dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]), npartitions=3)


@pytest.mark.parametrize("form", ["numpy", "csr", "dask.array", "dask.csr", "dask.dataframe"])
@pytest.mark.parametrize("intercept", ["exact", "regularized", "none"])
def test_distributed_fit_equals_the_in_process_fit(client, data, intercept, form):
    X, y = data
    params = dict(kernel="rbf", gamma=0.05, C=1.0, intercept=intercept, tol=1e-6)
    local = muflow.SVC(solver="working_set", **params).fit(X, y)
    remote = muflow.SVC(client=client, **params).fit(as_form(X, form), y)
    assert remote.solver_ == "working_set" and remote.converged_.all()
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=SAME_LOOP_RTOL)
    assert remote.support_vectors_.shape[1] == X.shape[1]
    assert np.mean(remote.predict(X) == local.predict(X)) >= 0.995
    assert remote.timings_["round_trips"] >= remote.n_iter_.max()


def test_one_vs_one_on_the_workers_as_in_process(client):
    X, y = make_blobs(n_samples=900, centers=4, cluster_std=2.5, random_state=0)
    local = muflow.SVC(gamma=0.1, solver="working_set").fit(X, y)
    remote = muflow.SVC(gamma=0.1, client=client).fit(X, y)
    assert remote.objective_.shape == (6,)
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=OBJECTIVE_RTOL)
    np.testing.assert_array_equal(remote.n_support_.sum(), len(remote.support_))
    assert np.mean(remote.predict(X) == local.predict(X)) >= 0.995


def _solve_on_workers(client, X, y, C, copy_x=None, **kwargs):
    kernel = Kernel("rbf", gamma=0.05)
    parts = DaskRowPartitions(X, kernel, client, copy_x=copy_x)
    try:
        problem = DualProblem(parts, y, upper=C, equality=True)
        return solve_working_set_dask(problem, **kwargs), kernel
    finally:
        parts.close()


@pytest.mark.parametrize("n", [1000, 3000])
def test_the_transfer_per_iteration_is_o_q_d_whatever_n(client, n):
    X, y = make_classification(n_samples=n, n_features=16, flip_y=0.05, random_state=1)
    y = np.where(y > 0, 1.0, -1.0)
    q, d, workers = 64, X.shape[1], 2
    sol, _ = _solve_on_workers(client, X, y, 1.0, q=q)
    t = sol.timings
    trips = t["round_trips"]
    # sent: X_B and B to each worker, four vectors of B to the solver, its step to the other;
    # received: the step (q numbers) and at most 2q candidates of each side plus the
    # previous set from each worker, a row and 7 numbers each
    assert t["bytes_sent"] / trips <= workers * q * (d + 5) * 8
    assert t["bytes_received"] / trips <= workers * (3 * q * (d + 7) + q) * 8
    # one exchange an iteration, besides the calls without a step (the first candidates
    # and those after a reactivation)
    assert int(np.sum(sol.n_iter)) <= trips <= int(np.sum(sol.n_iter)) + 4
    assert sol.converged.all()


def test_rows_of_x_the_client_holds_do_not_travel(client):
    """A NumPy X that the client holds: the candidates come back without their rows (the
    client takes them from its X), with the iterates of the same X as a dask array on the
    workers, whose candidates bring their rows. Either way, without copies of X on the
    workers, each worker is sent only the rows of X_B that it does not hold."""
    import dask.array as da

    X, y = make_classification(n_samples=3000, n_features=16, flip_y=0.05, random_state=1)
    y = np.where(y > 0, 1.0, -1.0)
    q = 64
    here, _ = _solve_on_workers(client, X, y, 1.0, copy_x=False, q=q)
    there, _ = _solve_on_workers(client, da.from_array(X, chunks=(1500, X.shape[1])), y, 1.0,
                                 copy_x=False, q=q)
    np.testing.assert_array_equal(here.alpha, there.alpha)
    assert np.array_equal(here.n_iter, there.n_iter)
    t, u = here.timings, there.timings
    # no rows answered: 7 numbers a candidate (at most 3q of them a worker) and the step;
    # the dask array's candidates bring their rows (each once while it stays a candidate)
    assert t["bytes_received"] / t["round_trips"] <= 2 * (3 * q * 7 + q) * 8
    assert t["bytes_received"] < 0.8 * u["bytes_received"]
    # either way a worker is not sent its own rows of X_B: about half of B on two workers
    d = X.shape[1]
    assert t["bytes_sent"] == u["bytes_sent"]
    assert t["bytes_sent"] / t["round_trips"] < 0.85 * 2 * q * (d + 5) * 8


@pytest.mark.parametrize("form", ["numpy", "csr", "dask.array"])
def test_with_a_copy_of_x_on_every_worker_the_calls_carry_indices_and_the_solution_is_the_same(
        client, form):
    """Copies of X on the workers (muflow.dask.row_blocks): the same alpha to the bit as
    without, each iteration sending B's indices and vectors, no rows of X (O(q), not O(q d));
    the candidates come back without rows wherever the client holds X (NumPy, CSR). A warm
    start's product sends the support's indices too (the same start, hence the same
    solution)."""
    X, y = make_classification(n_samples=3000, n_features=16, flip_y=0.05, random_state=1)
    y = np.where(y > 0, 1.0, -1.0)
    q = 64
    parts = 2 if form != "dask.array" else 3000 // 500  # a partition a worker, or a block
    X = as_form(np.where(np.abs(X) > 0.5, X, 0.0), form)
    (rows, _), (copied, _) = (_solve_on_workers(client, X, y, 1.0, copy_x=c, q=q) for c in (False, True))
    np.testing.assert_array_equal(rows.alpha, copied.alpha)
    assert rows.n_iter == copied.n_iter
    t, u = copied.timings, rows.timings
    # B and four vectors of B to the solver, its step (B and three vectors) to the others
    assert t["bytes_sent"] / t["round_trips"] <= 8 * q * (5 + 4 * (parts - 1))
    assert t["bytes_sent"] < 0.5 * u["bytes_sent"]
    if form != "dask.array":  # no rows answered: 7 numbers a candidate and the step
        assert t["bytes_received"] / t["round_trips"] <= 2 * (3 * q * 7 + q) * 8
    warm = [_solve_on_workers(client, X, y, 2.0, copy_x=c, q=q, init=2.0 * rows.alpha)[0]
            for c in (False, True)]
    np.testing.assert_array_equal(warm[0].alpha, warm[1].alpha)


def test_x_is_copied_to_the_workers_where_it_takes_a_tenth_of_their_memory(client, monkeypatch):
    """The rule of muflow.dask.row_blocks.copy_fits on the test cluster's workers (their
    memory limit read from the scheduler), never with one partition nor with
    MUFLOW_DASK_COPY_X=0."""
    from muflow.dask.row_blocks import COPY_FRACTION, copy_fits
    from muflow.dask.scheduler_workers import scheduler_workers

    limit = min(int(w["memory_limit"]) for w in scheduler_workers(client).values())
    assert limit > 0
    assert copy_fits(client, int(COPY_FRACTION * limit), 2)
    assert not copy_fits(client, int(COPY_FRACTION * limit) + 1, 2)
    assert not copy_fits(client, 8, 1)
    monkeypatch.setenv("MUFLOW_DASK_COPY_X", "0")
    assert not copy_fits(client, 8, 2)
    monkeypatch.delenv("MUFLOW_DASK_COPY_X")
    X, y = make_classification(n_samples=600, n_features=8, random_state=0)
    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.05), client)
    try:
        assert parts.copied and len(parts.actors) == 2
    finally:
        parts.close()


def test_with_copies_each_partition_starts_where_its_block_is(client):
    """Every partition's task depends on all of X where the workers hold copies: each still
    starts on the worker that holds its own block (muflow.dask.row_blocks.homes), three
    blocks of a dask array on two workers as they lie."""
    import dask.array as da
    from distributed import wait

    X, _ = make_classification(n_samples=900, n_features=8, random_state=0)
    Xd = client.persist(da.from_array(X, chunks=(300, 8)))
    wait(Xd)
    holders = client.who_has(Xd)
    parts = DaskRowPartitions(Xd, Kernel("rbf", gamma=0.05), client, copy_x=True)
    try:
        blocks = parts._blocks_of
        assert [a._address for a in parts.actors] == parts._homes
        assert all(home in holders[block.key] for home, block in zip(parts._homes, blocks))
    finally:
        parts.close()


def test_candidates_rows_travel_once_while_they_stay_candidates(client):
    """X on the workers (a dask array): an answer leaves out the rows of candidates it sent
    in its last answers and the client puts them back (muflow.dask.answered_rows): the same
    solution to the bit as when every answer carries every row, with fewer bytes."""
    import dask.array as da

    X, y = make_classification(n_samples=3000, n_features=16, flip_y=0.05, random_state=1)
    y = np.where(y > 0, 1.0, -1.0)
    Xd = da.from_array(X, chunks=(1500, X.shape[1]))
    once, _ = _solve_on_workers(client, Xd, y, 1.0, copy_x=False, q=64)
    every = _every_row_answered(client, Xd, y)
    np.testing.assert_array_equal(once.alpha, every.alpha)
    assert once.n_iter == every.n_iter
    assert once.timings["bytes_received"] < 0.7 * every.timings["bytes_received"]


def _every_row_answered(client, X, y):
    """The solve with no answer leaving a row out: on each worker, SentRows told that it
    never sent one (put back after)."""
    def forget():
        from muflow.dask.answered_rows import SentRows

        SentRows.held_rows = SentRows.held
        SentRows.held = lambda self, ids: np.zeros(len(ids), dtype=bool)

    def restore():
        from muflow.dask.answered_rows import SentRows

        SentRows.held = SentRows.held_rows

    client.run(forget)
    try:
        return _solve_on_workers(client, X, y, 1.0, copy_x=False, q=64)[0]
    finally:
        client.run(restore)


def test_a_warm_start_reaches_the_cold_solution(client, data):
    X, y = data
    y = np.where(y > 0, 1.0, -1.0)
    cold, kernel = _solve_on_workers(client, X, y, 10.0)
    low, _ = _solve_on_workers(client, X, y, 1.0)
    warm, _ = _solve_on_workers(client, X, y, 10.0, init=low.alpha * 10.0)
    reference = solve_working_set(DualProblem(DenseGram(kernel.block(X)), y, upper=10.0, equality=True))
    np.testing.assert_allclose(cold.objective, reference.objective, rtol=OBJECTIVE_RTOL)
    np.testing.assert_allclose(warm.objective, reference.objective, rtol=OBJECTIVE_RTOL)


def test_the_partitions_answer_products_and_rows_as_the_kernel(client):
    X, _ = breast_cancer()
    kernel = Kernel("rbf", gamma=0.3)
    K = kernel.block(X)
    parts = DaskRowPartitions(X[:333], kernel, client)
    try:
        V = np.zeros((333, 2))
        V[[3, 100, 250], 0] = [1.0, -2.0, 0.5]
        V[7, 1] = 1.0
        np.testing.assert_allclose(parts.matmul(V), K[:333, :333] @ V, atol=1e-12)
        np.testing.assert_allclose(parts.rows(np.array([300, 5])), K[[300, 5], :333], atol=1e-12)
        np.testing.assert_allclose(parts.diagonal(), np.ones(333))
        np.testing.assert_array_equal(parts.take(np.array([200, 2, 170])), X[[200, 2, 170]])
    finally:
        parts.close()


def test_dask_input_needs_the_cluster_path(client, data):
    X, y = data
    Xd = as_form(X, "dask.array")
    with pytest.raises(MuflowInputError, match="client="):
        muflow.SVC().fit(Xd, y)
    with pytest.raises(MuflowInputError, match="solver='auto' or 'working_set'"):
        muflow.SVC(client=client, solver="smo").fit(Xd, y)


def test_non_finite_values_are_named_by_their_rows(client, data):
    X, y = data
    X = X.copy()
    X[1200, 3] = np.nan
    # a dask array is checked where its blocks are (NumPy input as in process, on the client)
    with pytest.raises(ValueError, match=r"NaN or infinity \(in rows 1000 to 1499\)"):
        muflow.SVC(client=client).fit(as_form(X, "dask.array"), y)


@pytest.mark.parametrize("form, copy_x", [("numpy", True), ("numpy", False), ("dask.array", True)])
def test_a_worker_killed_mid_fit_the_fit_completes_with_the_same_objective(client, data, form,
                                                                          copy_x):
    """Also with copies of X on the workers (the restarted worker gets its copy again)."""
    X, y = data
    y = np.where(y > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=0.05)
    reference = solve_working_set(DualProblem(DenseGram(kernel.block(X)), y, upper=1.0, equality=True))
    parts = DaskRowPartitions(as_form(X, form), kernel, client, copy_x=copy_x)
    assert parts.copied == copy_x
    kill = kill_first_partition_at(client, parts, 5)
    try:
        sol = solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True), q=64,
                                     callback=kill)
        assert kill.killed and parts.recoveries >= 1
    finally:
        parts.close()
    assert sol.converged.all()
    np.testing.assert_allclose(sol.objective, reference.objective, rtol=OBJECTIVE_RTOL)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker


def test_a_partition_answers_the_same_on_one_and_on_two_threads(monkeypatch):
    """A partition on a worker of two threads (rows split by columns, the gradient update and
    the candidate scan by ranges) answers what it answers on one thread, to the bit; run in
    this process with the worker's thread count set (no cluster needed)."""
    from muflow.dask import partitions as dask_partitions
    from muflow.solvers import _working_set_compiled

    monkeypatch.setattr(_working_set_compiled, "_SPLIT_MIN_WORK", 1)
    rng = np.random.default_rng(4)
    X = rng.standard_normal((3000, 12))
    y = np.where(X[:, 0] + 0.5 * rng.standard_normal(3000) > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=0.1).to_dict()
    B = np.sort(rng.choice(3000, 40, replace=False))
    coef = rng.standard_normal(40)
    answers = []
    for threads in (1, 2):
        monkeypatch.setattr(dask_partitions, "worker_threads", lambda t=threads: t)
        part = dask_partitions.RowPartition(X[1000:], 1000, kernel, 6000, cache_mb=4)
        assert part.n_threads == threads
        part.product_start(())
        part.begin(y[1000:], np.ones(2000), -np.ones(2000), np.zeros(2000), True)
        part.prefetch(X[B], B)
        first = part.iterate(B, coef, B, np.zeros(40), None, False, 16)
        part.prefetch(X[B[:10]], B[:10])
        second = part.iterate(B[:10], coef[:10], B, np.zeros(40), None, False, 16)
        answers.append((part.G.copy(), first, second))
    (G1, *one), (G2, *two) = answers
    assert np.array_equal(G1, G2) and np.any(G1 != -1.0)
    for a, b in zip(one, two):
        assert np.array_equal(a["idx"], b["idx"]) and np.array_equal(a["G"], b["G"])
        assert all(np.array_equal(s, t) for s, t in zip(a["scores"], b["scores"]))


def test_a_product_streamed_in_pieces_sums_the_chunks_of_one_call(monkeypatch):
    """The client sends a product's rows in pieces (DaskRowPartitions.product): the partition
    adds the same chunks in the same order as with every row at once, to the bit, whatever
    the pieces' sizes."""
    from muflow.dask import partitions as dask_partitions

    monkeypatch.setattr(dask_partitions, "BLOCK_BYTES", 8 * 2000 * 7)  # chunks of 7 rows
    rng = np.random.default_rng(6)
    X = rng.standard_normal((2500, 6))
    kernel = Kernel("rbf", gamma=0.2)
    part = dask_partitions.RowPartition(X[500:], 500, kernel.to_dict(), 2500, cache_mb=4)
    S = rng.choice(2500, 60, replace=False)
    coef = rng.standard_normal((60, 2))
    part.product_start((2,))
    part.product_add(X[S], coef)
    whole = part.product_end()
    part.product_start((2,))
    for a, b in ((0, 5), (5, 23), (23, 24), (24, 60)):
        part.product_add(X[S[a:b]], coef[a:b])
    assert np.array_equal(part.product_end(), whole)
    np.testing.assert_allclose(whole, kernel.block(X[500:], X[S]) @ coef, rtol=0, atol=1e-12)


def test_the_client_holds_no_q_by_q_block(client):
    """The subproblem goes to the first partition's worker with X_B: a solve with q = 1024
    (K_BB in float32: 4 MB) allocates far less than one K_BB in this process."""
    import tracemalloc

    X, y = make_classification(n_samples=6000, n_features=10, flip_y=0.05, random_state=2)
    y = np.where(y > 0, 1.0, -1.0)
    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.1), client)
    try:
        problem = DualProblem(parts, y, upper=1.0, equality=True)
        solve_working_set_dask(problem, q=1024, max_iter=3)  # what the solve loads, loaded
        tracemalloc.start()
        try:
            sol = solve_working_set_dask(problem, q=1024, max_iter=3)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    finally:
        parts.close()
    assert sol.timings["q"] == 1024 and sol.timings["subproblem_steps"] > 0
    assert peak < 1024 * 1024 * 4 / 2, f"the client allocated {peak / 1e6:.1f} MB"


def test_one_partition_solves_the_subproblem_for_all(client):
    """The subproblem is solved once an iteration, on the solver's worker; the other
    partition computes its rows of B meanwhile and applies the step it is sent; the fit
    reaches the in-process objective."""
    X, y = make_classification(n_samples=3000, n_features=10, flip_y=0.05, random_state=4)
    y = np.where(y > 0, 1.0, -1.0)
    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.1), client)
    try:
        assert parts.solver == 0
        sol = solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True), q=64)
        infos = parts.call("info")
    finally:
        parts.close()
    assert sol.converged.all() and int(np.sum(sol.n_iter)) > 5
    solver, other = (info["seconds"] for info in infos)
    assert solver["subproblem"] > 0.0 and other["subproblem"] == 0.0
    assert other["rows_behind"] > 0.0  # its rows of B, computed while the solver solved
    assert infos[1]["rows_computed"] > 0
    ref = solve_working_set(DualProblem(DenseGram(Kernel("rbf", gamma=0.1)(X, X)), y,
                                        upper=1.0, equality=True), q=64)
    np.testing.assert_allclose(sol.objective, ref.objective, rtol=1e-6)


def test_the_solver_partition_gets_fewer_rows_and_the_same_solution(client):
    """With ``subproblems`` the partition that solves the subproblems holds SOLVER_SHARE of
    the other's rows on these one-thread workers (muflow.dask.row_blocks), stays the solver,
    and the fit is the one on equal blocks: the same objective, the same predictions; the
    routing asks for it for the working-set solver alone."""
    from muflow.dask.operators import partitioned_operator
    from muflow.dask.row_blocks import SOLVER_SHARE
    from muflow.routing import KernelPlan

    X, y = make_classification(n_samples=3000, n_features=10, flip_y=0.05, random_state=4)
    y = np.where(y > 0, 1.0, -1.0)
    sols = []
    for subproblems in (False, True):
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.1), client, subproblems=subproblems)
        try:
            sizes = [hi - lo for lo, hi in parts.bounds]
            assert parts.solver == 0 and sum(sizes) == 3000
            share = SOLVER_SHARE if subproblems else 1.0
            assert abs(sizes[0] - share * sizes[1]) <= 2, sizes
            sols.append(solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True),
                                               q=64, tol=1e-6))
        finally:
            parts.close()
    equal, smaller = sols
    np.testing.assert_allclose(smaller.objective, equal.objective, rtol=SAME_LOOP_RTOL)
    np.testing.assert_allclose(smaller.alpha, equal.alpha, atol=1e-4)
    for solver, wanted in (("working_set", True), ("smo", False)):
        plan = KernelPlan(path="partitioned", reason="", solves=1, store=False, gram_bytes=0,
                          solver=solver)
        op = partitioned_operator(X, Kernel("rbf", gamma=0.1), plan, client)
        try:
            sizes = [hi - lo for lo, hi in op.bounds]
            assert (sizes[0] < sizes[1]) == wanted, (solver, sizes)
        finally:
            op.close()


def test_block_edges_split_every_row_and_leave_no_block_empty():
    """The blocks' edges: contiguous, every row once, none empty, the first the share asked
    of the others where the rows allow it, equal blocks (np.linspace's) at share 1."""
    from muflow.dask.row_blocks import block_edges, solver_share

    for n, parts, share in [(60000, 2, 0.8), (10, 3, 0.8), (2, 2, 0.8), (8, 8, 0.8),
                            (60000, 8, 0.9), (7, 3, 1.0), (5, 2, 1.0)]:
        edges = block_edges(n, parts, share)
        sizes = np.diff(edges)
        assert edges[0] == 0 and edges[-1] == n and len(sizes) == parts and sizes.min() >= 1
        if share == 1.0:
            np.testing.assert_array_equal(edges, np.linspace(0, n, parts + 1).astype(int))
        elif n >= 1000:
            assert abs(sizes[0] - share * sizes[1:].mean()) <= 2
    assert solver_share(1) < solver_share(2) < 1.0


def _partition(rng, n=3000, lo=1000):
    from muflow.dask import partitions as dask_partitions

    X = rng.standard_normal((n, 12))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    part = dask_partitions.RowPartition(X[lo:], lo, Kernel("rbf", gamma=0.1).to_dict(), n,
                                        cache_mb=4)
    part.product_start(())
    part.begin(y[lo:], np.ones(n - lo), -np.ones(n - lo), np.zeros(n - lo), True)
    return part, X, y


def test_rows_begun_behind_the_subproblem_are_those_the_step_reads():
    """A partition sent B with the subproblem (prefetch) begins its rows of B on its other
    threads; the step that follows reads them from the cache, computes no row, and updates
    G as K(X_B, X_p)' (y_B delta_B) does."""
    rng = np.random.default_rng(8)
    part, X, y = _partition(rng)
    B = np.sort(rng.choice(3000, 40, replace=False))
    coef = rng.standard_normal(40)
    part.prefetch(X[B], B)
    part.settle()
    assert part.offered.rows_computed == B.size and np.all(part.cache.slot_of[B] >= 0)
    part.iterate(B, coef, B, np.zeros(40), None, False, 16)
    assert part.offered.rows_computed == B.size  # the step computed none
    expected = y[1000:] * (Kernel("rbf", gamma=0.1).block(X[B], X[1000:]).T @ coef) - 1.0
    np.testing.assert_allclose(part.G, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_failure_of_rows_begun_before_the_subproblem_is_raised_by_the_step(monkeypatch, threads):
    """Rows begun on the other threads (prefetch) that fail there leave the cache, and
    their error reaches the client with the step that joins them, not lost with a thread."""
    rng = np.random.default_rng(9)
    part, X, y = _partition(rng)
    part.rows_op.n_threads = threads
    B = np.sort(rng.choice(3000, 20, replace=False))

    def fail(*args, **kwargs):
        raise MemoryError("no room for the rows")

    monkeypatch.setattr(part.rows_op, "_chunks_into", fail)
    part.prefetch(X[B], B)  # begun: nothing raised yet
    with pytest.raises(MemoryError, match="no room"):
        part.iterate(B, np.ones(20), B, np.zeros(20), None, False, 8)
    assert np.all(part.cache.slot_of[B] < 0)


def test_a_failed_solve_ends_the_rows_it_began(monkeypatch):
    """A subproblem that fails while the partition's rows of B are begun on its other
    threads joins them before the error goes back: no rows left running for a call that
    may never come, and BLAS's one-thread hold released."""
    from muflow.threads import blas_single_threaded

    rng = np.random.default_rng(11)
    part, X, y = _partition(rng)
    part.n_threads = part.rows_op.n_threads = 2
    B = np.sort(rng.choice(3000, 20, replace=False))

    def fail(*args, **kwargs):
        raise FloatingPointError("the subproblem failed")

    monkeypatch.setattr(part, "_solve", fail)
    with pytest.raises(FloatingPointError, match="subproblem failed"):
        part.solve(X[B], B, y[B], np.ones(20), np.zeros(20), -np.ones(20), True, 1.0, 1e-3,
                   np.float64)
    assert part._pending is None
    assert np.all(part.cache.slot_of[B] >= 0)  # the rows begun were finished and kept
    with blas_single_threaded().steady() as held_from:
        assert held_from is None  # nobody holds BLAS to one thread any more


def _two_partitions(rng, n=3000):
    """Partitions [0, n/2) and [n/2, n) of one column at alpha = 0, and the step's data."""
    from muflow.dask import partitions as dask_partitions

    X = rng.standard_normal((n, 12))
    y = np.where(X[:, 0] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    parts = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        part = dask_partitions.RowPartition(X[lo:hi], lo, Kernel("rbf", gamma=0.1).to_dict(), n,
                                            cache_mb=4)
        part.product_start(())
        part.begin(y[lo:hi], np.ones(hi - lo), -np.ones(hi - lo), np.zeros(hi - lo), True)
        parts.append(part)
    B = np.sort(np.concatenate([rng.choice(n // 2, 20, replace=False),
                                n // 2 + rng.choice(n // 2, 20, replace=False)]))
    step = (X[B], B, y[B], np.ones(B.size), np.zeros(B.size), -np.ones(B.size), True, 2.0, 1e-3,
            parts[0].dtype, None, 8)
    return parts, step


def _solve_and_step(part, step):
    """One outer iteration on a partition that solves for itself: the subproblem, then the
    step applied, as the client sends it (PartitionedState.solve_on)."""
    from muflow.solvers.working_set_loop import step_of

    XB, B, yB, UB, aB, GB, equality, gap, gap_tol, dtype, shrink_with, k = step
    new, change, steps = part.solve(XB, B, yB, UB, aB, GB, equality, gap, gap_tol, dtype)
    moved, coef = step_of(new, aB, yB)
    return (new, change, steps), part.iterate(B[moved], coef, B, new, shrink_with, False, k)


def test_the_solvers_step_is_applied_by_a_partition_that_computed_its_rows_meanwhile():
    """The partition that does not solve computes its rows of B while the solver solves
    (compute_rows); the solver's step, sent after, reads them from its cache and leaves
    its slice as solving the subproblem itself would have, to the bit."""
    from muflow.solvers.working_set_loop import step_of
    from muflow.threads import blas_single_threaded

    parts, step = _two_partitions(np.random.default_rng(11))
    reference, _ = _two_partitions(np.random.default_rng(11))
    (ref_new, _, _), ref_answer = _solve_and_step(reference[1], step)
    XB, B, yB, UB, aB, GB, equality, gap, gap_tol, dtype, shrink_with, k = step
    new, change, steps = parts[0].solve(XB, B, yB, UB, aB, GB, equality, gap, gap_tol, dtype)
    parts[1].compute_rows(XB, B)
    computed = parts[1].offered.rows_computed
    assert computed == B.size
    moved, coef = step_of(new, aB, yB)
    answer = parts[1].iterate(B[moved], coef, B, new, shrink_with, False, k)
    assert parts[1].offered.rows_computed == computed  # the step computed no row
    assert parts[1].seconds["subproblem"] == 0.0
    np.testing.assert_array_equal(new, ref_new)
    np.testing.assert_array_equal(parts[1].alpha, reference[1].alpha)
    np.testing.assert_array_equal(parts[1].G, reference[1].G)
    np.testing.assert_array_equal(answer["idx"], ref_answer["idx"])
    parts[0].step_solved(shrink_with, k)  # the solver's rows joined: no BLAS hold left behind
    with blas_single_threaded().steady() as held_from:
        assert held_from is None


def test_a_lone_partition_solves_and_steps_in_one_call():
    """solve_and_step (one call where a second would cost a round trip) answers what solve
    then step_solved answer, and leaves the partition as they do; a step with no solve
    before it is refused."""
    from muflow.exceptions import MuflowError
    from muflow.threads import blas_single_threaded

    parts, step = _two_partitions(np.random.default_rng(13))
    reference, _ = _two_partitions(np.random.default_rng(13))
    (got, answer) = parts[0].solve_and_step(*step)
    expected = reference[0].solve(*step[:-2])
    expected_answer = reference[0].step_solved(*step[-2:])
    np.testing.assert_array_equal(got[0], expected[0])
    assert got[1:] == expected[1:]
    np.testing.assert_array_equal(answer["idx"], expected_answer["idx"])
    np.testing.assert_array_equal(parts[0].G, reference[0].G)
    with pytest.raises(MuflowError, match="not solved"):
        parts[0].step_solved(None, 8)
    with blas_single_threaded().steady() as held_from:
        assert held_from is None


def test_one_iteration_on_one_and_on_two_threads_is_the_same_step(monkeypatch):
    """The solver on a worker of two threads begins all of B's rows while it solves; on
    one thread it computes the same rows after solving (the same rows, so that BLAS computes
    each with the same calls). The step, the gradient and the candidates are the same to
    the bit."""
    from muflow.dask import partitions as dask_partitions

    results = []
    for threads in (1, 2):
        monkeypatch.setattr(dask_partitions, "worker_threads", lambda t=threads: t)
        parts, step = _two_partitions(np.random.default_rng(12))
        part = parts[1]
        (new, change, steps), answer = _solve_and_step(part, step)
        part.settle()
        moved = np.flatnonzero(new != 0.0)
        results.append((new, change, part.G.copy(), answer, part.offered.rows_computed))
        assert steps > 0 and 0 < moved.size < step[1].size
    (new1, change1, G1, a1, rows1), (new2, change2, G2, a2, rows2) = results
    assert np.array_equal(new1, new2) and change1 == change2 and np.array_equal(G1, G2)
    assert np.array_equal(a1["idx"], a2["idx"]) and np.array_equal(a1["G"], a2["G"])
    assert rows1 == rows2 == new1.size


def test_dask_input_is_checked_as_pandas_and_numpy_input_are(client, data):
    """Feature names from a dask DataFrame, as from pandas (and a later dask.array fit
    keeps none); chunks of unknown length read once; no rows, a text column and a closed
    client refused in words (session 39: the names were missing or stale, the rest raised
    IndexError, numpy's isfinite TypeError and AttributeError)."""
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Client

    X, y = data
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    ddf = dd.from_pandas(frame, npartitions=3)
    model = muflow.SVC(gamma=0.05, client=client).fit(ddf, y)
    assert list(model.feature_names_in_) == list(frame.columns)
    with pytest.raises(ValueError, match="feature names should match"):
        model.predict(ddf[list(reversed(frame.columns))])
    model.fit(da.from_array(X[:, :5], chunks=(500, -1)), y)
    assert model.n_features_in_ == 5 and not hasattr(model, "feature_names_in_")
    unknown = dd.from_pandas(pd.DataFrame(X), npartitions=3).to_dask_array()
    assert np.isnan(unknown.shape[0])
    fitted = muflow.SVC(gamma=0.05, client=client).fit(unknown, y)
    np.testing.assert_array_equal(fitted.predict(X), muflow.SVC(gamma=0.05).fit(X, y).predict(X))
    with pytest.raises(ValueError, match="0 sample"):
        muflow.SVC(client=client).fit(da.zeros((0, 4), chunks=(1, 4)), np.zeros(0))
    texts = frame.assign(colour=np.where(y > 0, "red", "blue"))
    with pytest.raises(ValueError, match="'colour' are not numeric"):
        muflow.SVC(client=client).fit(dd.from_pandas(texts, npartitions=2), y)
    closed = Client(client.scheduler.address)
    closed.close()
    with pytest.raises(MuflowInputError, match="client is closed"):
        muflow.SVC(client=closed).fit(X, y)  # NumPy X: scattered by this client


def test_row_chunks_of_no_rows_are_skipped(client, data):
    """A dask array with an empty row chunk, and a filtered dask DataFrame with empty
    partitions, fit as the same rows without them (gamma "scale" included); each empty
    block made a partition of no rows, which refused to start."""
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd

    X, y = data
    local = muflow.SVC(solver="working_set", tol=1e-6).fit(X, y)
    gappy = da.from_array(X, chunks=((700, 0, 800), (X.shape[1],)))
    remote = muflow.SVC(client=client, tol=1e-6).fit(gappy, y)
    assert remote.solver_ == "working_set"
    np.testing.assert_allclose(remote.kernel_.gamma, local.kernel_.gamma, rtol=1e-12)
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=SAME_LOOP_RTOL)
    np.testing.assert_array_equal(remote.predict(X), local.predict(X))
    parts = DaskRowPartitions(gappy, Kernel("rbf", gamma=0.05), client)
    try:
        assert parts.bounds == [(0, 700), (700, 1500)]
    finally:
        parts.close()
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])]).assign(label=y, row=np.arange(len(y)))
    kept = dd.from_pandas(frame, npartitions=4)
    kept = kept[kept["row"] < 700]  # the last partitions have no rows left
    assert 0 in kept.map_partitions(len).compute().tolist()
    remote = muflow.SVC(client=client, tol=1e-6).fit(kept.drop(columns=["label", "row"]),
                                                      kept["label"].compute().to_numpy())
    local = muflow.SVC(solver="working_set", tol=1e-6).fit(X[:700], y[:700])
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=SAME_LOOP_RTOL)


def test_a_dask_array_of_sparse_chunks_fits_as_its_csr_matrix(client):
    """Chunks that are CSR matrices: checked for NaN in their stored values, gamma "scale"
    from their values, and the model sparse as one fitted on the CSR matrix (the finite
    check raised numpy's TypeError, and the model refused to predict on sparse input)."""
    import dask.array as da

    X = sp.random(1200, 40, density=0.15, format="csr", random_state=0)
    s = np.asarray(X.sum(axis=1)).ravel()
    y = (s > np.median(s)).astype(int)
    local = muflow.SVC(solver="working_set", tol=1e-6).fit(X, y)
    chunked = da.from_array(X, chunks=(500, 40), asarray=False)
    remote = muflow.SVC(client=client, tol=1e-6).fit(chunked, y)
    np.testing.assert_allclose(remote.kernel_.gamma, local.kernel_.gamma, rtol=1e-12)
    np.testing.assert_allclose(remote.objective_, local.objective_, rtol=SAME_LOOP_RTOL)
    assert remote._sparse and sp.issparse(remote.support_vectors_) and sp.issparse(remote.dual_coef_)
    np.testing.assert_array_equal(remote.predict(X), local.predict(X))
    np.testing.assert_array_equal(remote.predict(chunked).compute(), local.predict(X))
    bad = X.copy()
    bad.data[bad.indptr[700]] = np.inf
    with pytest.raises(ValueError, match=r"NaN or infinity \(in rows 500 to 999\)"):
        muflow.SVC(client=client).fit(da.from_array(bad, chunks=(500, 40), asarray=False), y)
