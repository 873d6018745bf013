"""The one thread budget (muflow.threads): the rule, its division among forked children, the
persistent pool, and nested use under joblib's workers and a Dask worker."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import muflow
from muflow import threads as th
from muflow.exceptions import MuflowInputError

_VARIABLES = ("MUFLOW_NUM_THREADS", "OMP_NUM_THREADS")


@pytest.fixture
def eight_cores(monkeypatch):
    """A process that may use 8 cores, with no caller's limit in force: the rule alone."""
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(th, "usable_cores", lambda: 8)
    monkeypatch.setattr(th, "_pool_limit", lambda cores: None)
    monkeypatch.setattr(th, "dask_worker_threads", lambda: None)
    monkeypatch.setattr(th, "_CAP", None)
    return monkeypatch


@pytest.mark.parametrize("n_jobs, expected", [(None, 8), (-1, 8), (1, 1), (3, 3), (16, 8), (-2, 7),
                                              (-8, 1), (-20, 1)])
def test_n_jobs_values(eight_cores, n_jobs, expected):
    """scikit-learn's convention: None/-1 every core, a positive count as asked but never
    more than the cores (more would only time-share them), -k all but k - 1."""
    assert th.thread_budget(n_jobs) == expected


@pytest.mark.parametrize("bad", [0, 1.5, "4", True, np.float64(2.0)])
def test_bad_n_jobs_names_the_fix(eight_cores, bad):
    with pytest.raises(MuflowInputError, match=r"n_jobs must be a positive integer .* -1 or None"):
        th.thread_budget(bad)
    with pytest.raises(MuflowInputError, match="n_jobs must be"):
        muflow.SVC(n_jobs=bad).fit(np.eye(4), [0, 1, 0, 1])


def test_muflow_num_threads_caps_everything(eight_cores):
    eight_cores.setenv("MUFLOW_NUM_THREADS", "2")
    assert [th.thread_budget(n) for n in (None, -1, 1, 6)] == [2, 2, 1, 2]
    eight_cores.setenv("MUFLOW_NUM_THREADS", "many")
    with pytest.raises(MuflowInputError, match=r"MUFLOW_NUM_THREADS='many'.*positive integer"):
        th.thread_budget()


def test_omp_num_threads_is_the_callers_limit(eight_cores):
    """joblib's loky workers start with their share in OMP_NUM_THREADS; OpenMP's nested
    form counts its outer level; another library's bad value is not ours to refuse."""
    eight_cores.setenv("OMP_NUM_THREADS", "3")
    assert (th.thread_budget(), th.thread_budget(6), th.thread_budget(2)) == (3, 3, 2)
    eight_cores.setenv("OMP_NUM_THREADS", "4,2")
    assert th.thread_budget() == 4
    eight_cores.setenv("OMP_NUM_THREADS", "auto")
    assert th.thread_budget() == 8


def test_fork_cap_and_scope(eight_cores):
    """A forked child's share caps it, whatever OMP_NUM_THREADS says (its parent's budget
    held that already); a fit's scope caps what it reaches."""
    eight_cores.setenv("OMP_NUM_THREADS", "1")
    th.cap_threads(3)
    assert (th.thread_budget(), th.thread_budget(8), th.thread_budget(2)) == (3, 3, 2)
    th.cap_threads(None)
    eight_cores.delenv("OMP_NUM_THREADS")
    with th.budget_scope(2):
        assert (th.thread_budget(), th.thread_budget(6)) == (2, 2)
    assert th.thread_budget() == 8


def test_dask_worker_threads_replace_omp(eight_cores):
    """In a worker's task the nanny's OMP_NUM_THREADS=1 says nothing; nthreads does."""
    eight_cores.setenv("OMP_NUM_THREADS", "1")
    eight_cores.setattr(th, "dask_worker_threads", lambda: 2)
    assert (th.thread_budget(), th.thread_budget(1), th.thread_budget(4)) == (2, 1, 2)


@pytest.fixture
def threaded_blas(monkeypatch):
    """No thread variable set, at least 2 cores and a threaded BLAS or OpenMP library (else
    the test is skipped)."""
    from threadpoolctl import ThreadpoolController

    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    threaded = [lib for lib in ThreadpoolController().lib_controllers
                if getattr(lib, "threading_layer", None) not in th._SERIAL_LAYERS]
    if th.usable_cores() < 2 or not threaded:
        pytest.skip("needs 2 cores and a threaded BLAS or OpenMP library")


def test_the_budget_does_not_see_another_threads_hold_of_blas(threaded_blas):
    """Another thread entering and leaving muflow's hold of BLAS to one thread, over and
    over, never lowers this thread's budget: the counts are read with the hold steady."""
    stop = threading.Event()

    def hold_again_and_again():
        while not stop.is_set():
            with th.blas_single_threaded():
                pass

    other = threading.Thread(target=hold_again_and_again, daemon=True)
    other.start()
    try:
        budgets = {th.thread_budget() for _ in range(3000)}
    finally:
        stop.set()
        other.join()
    assert budgets == {th.usable_cores()}


def test_threadpoolctl_limit_in_force(threaded_blas):
    """A real threadpool_limits lowers the budget; muflow's own hold of BLAS to one thread
    does not."""
    from threadpoolctl import threadpool_limits

    free = th.thread_budget()
    assert free == th.usable_cores()
    with threadpool_limits(limits=1):
        assert th.thread_budget() == 1
    with th.blas_single_threaded():
        assert th.thread_budget() == free


@pytest.mark.parametrize("text, expected", [("200000 100000", 2), ("150000 100000", 2),
                                            ("max 100000", None), ("", None)])
def test_cgroup_v2_quota(tmp_path, text, expected):
    (tmp_path / "cpu.max").write_text(text)
    assert th._cgroup_quota(str(tmp_path)) == expected


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("400000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert th._cgroup_quota(str(tmp_path)) == 4
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert th._cgroup_quota(str(tmp_path)) is None
    assert th._cgroup_quota(str(tmp_path / "absent")) is None


@pytest.mark.parametrize("tasks, budget, expected", [(6, 16, (6, 2)), (2, 16, (2, 8)), (1, 4, (1, 4)),
                                                     (16, 16, (16, 1)), (3, 2, (3, 1)),
                                                     (5, 2, (3, 1)), (10, 2, (2, 1))])
def test_divide_budget(tasks, budget, expected):
    """P = min(tasks, T) processes of T // P threads; with more tasks than threads, more
    processes only to end equal tasks together, one thread each."""
    share = th.divide_budget(tasks, budget)
    assert (share.processes, share.threads) == expected
    if tasks <= budget:
        assert share.processes * share.threads <= budget


def test_run_on_threads_runs_every_part_side_by_side():
    seen = {}
    barrier = threading.Barrier(3, timeout=10)

    def part(k):
        barrier.wait()  # all three at once, or this times out
        seen[k] = threading.get_ident()

    th.run_on_threads(part, 3)
    assert sorted(seen) == [0, 1, 2] and len(set(seen.values())) == 3
    assert seen[0] == threading.get_ident()  # the caller takes one part


def test_run_on_threads_reuses_its_pool_and_raises():
    from muflow import thread_pool

    th.run_on_threads(lambda k: None, 2)
    pool = thread_pool._POOL._executor
    th.run_on_threads(lambda k: None, 2)
    assert thread_pool._POOL._executor is pool

    def fail(k):
        if k == 1:
            raise ValueError("part 1")

    with pytest.raises(ValueError, match="part 1"):
        th.run_on_threads(fail, 3)


def test_pool_grows_under_callers_of_other_sizes():
    """Callers in several threads asking for pools of different sizes (a Dask worker's
    tasks) all finish, every part run once, while the pool grows under them."""
    counts = np.zeros((8, 6), dtype=int)

    def caller(i):
        def part(k):
            counts[i, k] += 1
        for _ in range(20):
            th.run_on_threads(part, 2 + i % 5)

    callers = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60)
    expected = np.array([[20 if k < 2 + i % 5 else 0 for k in range(6)] for i in range(8)])
    np.testing.assert_array_equal(counts, expected)


def test_run_on_threads_nested_in_its_pool_does_not_wait_for_ever():
    """A part that runs parts itself runs them in its own thread."""
    out = np.zeros((2, 3))

    def inner_of(i):
        def inner(k):
            out[i, k] = 1
        return inner

    th.run_on_threads(lambda i: th.run_on_threads(inner_of(i), 3), 2)
    assert out.all()


def test_pool_made_again_in_a_forked_child():
    import multiprocessing

    th.run_on_threads(lambda k: None, 2)  # the parent's pool exists before the fork

    def child(queue):
        done = []
        th.run_on_threads(done.append, 2)
        queue.put(sorted(done))

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    try:
        assert queue.get(timeout=30) == [0, 1]
    finally:
        process.join(30)
    assert process.exitcode == 0


def _four_classes(n, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    X = rng.normal(size=(n, 5)) + 1.5 * np.eye(4, 5)[y]
    return X, y


def test_forked_pairs_get_their_share(eight_cores):
    """One-vs-one pairs forked on rows: 6 pairs on a budget of 8 threads are 6 children
    whose budget is 8 // 6 = 1 each; 3 pairs (3 classes) are 3 children of 2 threads."""
    import muflow.routing

    eight_cores.setattr(muflow.routing, "FORK_MIN_SAMPLES", 1)
    X, y = _four_classes(240)
    import dataclasses
    import functools

    from muflow.solvers import registry

    info = registry.SOLVERS["working_set"]
    seen = []

    @functools.wraps(info.solve)  # the same keywords (SolverInfo.options reads them)
    def recording(problem, **kw):
        sol = info.solve(problem, **kw)
        sol.timings["budget"] = th.thread_budget()
        sol.timings["n_threads"] = kw.get("n_threads", 0)
        return sol

    eight_cores.setitem(registry.SOLVERS, "working_set", dataclasses.replace(info, solve=recording))
    for classes, (processes, share) in ((4, (6, 1)), (3, (3, 2))):
        keep = y < classes
        model = muflow.SVC(gram="rows", solver="working_set").fit(X[keep], y[keep])
        pairs = classes * (classes - 1) // 2
        assert model.n_threads_ == 8
        assert model.timings_["processes"] == processes
        # summed over the pairs: each child's budget, and the threads its solve was given
        assert model.timings_["budget"] == model.timings_["n_threads"] == pairs * share
        seen.append(model.score(X[keep], y[keep]))
    assert min(seen) > 0.7


def _scorers():
    return {"threads": lambda est, X, y: est.n_threads_, "pid": lambda est, X, y: os.getpid()}


def test_gridsearch_loky_workers_fit_on_their_share():
    """GridSearchCV(muflow.SVC(), n_jobs=2) fits in two loky worker processes; each fit's
    budget is the worker's share of the cores (joblib's OMP_NUM_THREADS: cores // 2, one
    on a 2-core machine), never all of them."""
    import joblib
    from sklearn.model_selection import GridSearchCV

    X, y = _four_classes(200)
    search = GridSearchCV(muflow.SVC(), {"C": [0.5, 1.0]}, cv=2, n_jobs=2, scoring=_scorers(),
                          refit=False)
    search.fit(X, y)
    threads = np.concatenate([search.cv_results_[f"split{i}_test_threads"] for i in range(2)])
    pids = np.concatenate([search.cv_results_[f"split{i}_test_pid"] for i in range(2)])
    share = max(1, joblib.cpu_count() // 2)
    assert (threads == share).all(), threads
    assert os.getpid() not in pids  # fitted in the workers, not here
    if th.usable_cores() <= 2:
        assert (threads == 1).all()


def test_dask_worker_with_one_thread_fits_on_one():
    """A worker of one thread fits on one, both as a task of the user's and as SVC's own
    fit on one worker, though every core of the machine is free."""
    from tests.dask_cluster import local_client

    X, y = _four_classes(200)

    def fit_here(X, y):
        return muflow.SVC().fit(X, y).n_threads_

    with local_client(n_workers=1) as client:
        assert client.submit(fit_here, X, y).result() == 1
        model = muflow.SVC(client=client).fit(X, y)
        assert "one_task" in model.timings_ and model.n_threads_ == 1


def test_a_local_cluster_started_here_leaves_this_process_its_cores():
    """A Nanny writes its workers' OMP_NUM_THREADS=1 into the environment of the process
    that starts it (``python -m muflow run`` starts a LocalCluster beside its sweep); the
    budget of that process stays every core."""
    from tests.dask_cluster import local_client

    before = th.thread_budget()
    with local_client(n_workers=1):
        assert os.environ.get("OMP_NUM_THREADS") == "1"  # what distributed does
        assert th.thread_budget() == before
    assert th.thread_budget(-1) == before


_LOADED_AFTER_A_CLUSTER = """
import sys
from distributed import LocalCluster
from muflow import threads as th
if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None):
        import sklearn.datasets  # scikit-learn's OpenMP and SciPy's BLAS load now
        from threadpoolctl import threadpool_info
        counts = [i["num_threads"] for i in threadpool_info()]
        print(min(counts), th.thread_budget(), th.usable_cores())
"""


def test_libraries_loaded_after_a_local_cluster_started_leave_this_process_its_cores(tmp_path):
    """A library loaded once a LocalCluster started in this process (scikit-learn's OpenMP,
    SciPy's BLAS: a notebook that starts the cluster first) starts its pool at the Nanny's
    OMP_NUM_THREADS=1; that count is not the caller's limit, and the budget stays every
    core."""
    import subprocess
    import sys

    script = tmp_path / "after_cluster.py"
    script.write_text(_LOADED_AFTER_A_CLUSTER)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                        th.ENV_VAR)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout.split()
    pool, budget, cores = map(int, out[-3:])
    assert pool == 1  # what distributed's variables gave the libraries loaded after it
    assert budget == cores


def test_a_workers_own_process_keeps_its_nannys_variables_as_limits():
    """Outside its tasks (its event loop, an actor's channel thread), a worker's process is
    held by the variables its nanny gave it, as it was before libraries loaded late were
    told apart (above)."""
    from tests.dask_cluster import local_client

    with local_client(n_workers=1) as client:
        assert list(client.run(th.thread_budget).values()) == [1]


class _Pool:
    """A threadpoolctl library controller's face (the rule's own logic)."""

    def __init__(self, internal_api, num_threads, user_api="openmp"):
        self.internal_api, self.num_threads, self.user_api = internal_api, num_threads, user_api


def test_a_pool_counts_as_a_limit_unless_a_nannys_variable_gave_it(monkeypatch):
    import dask
    import distributed.nanny  # noqa: F401  (a Nanny could have started in this process)

    pools = [_Pool("openmp", 1)]
    monkeypatch.setattr(th, "_controller", lambda: type("C", (), {"lib_controllers": pools})())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with dask.config.set({"distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS": 1}):
        assert th._pool_limit(4) is None
    # the caller's own variable, or a limit below the Nanny's value: a limit
    with dask.config.set({"distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS": 2}):
        assert th._pool_limit(4) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    pools[0].num_threads = 1
    with dask.config.set({"distributed.nanny.pre-spawn-environ.OMP_NUM_THREADS": 2}):
        assert th._pool_limit(4) == 1


def test_deal_runs_every_piece_once_and_a_slow_thread_takes_fewer():
    import threading
    import time

    from muflow.threads import deal

    seen, lock = [], threading.Lock()

    def piece(k, worker):
        if worker == 0:
            time.sleep(0.02)  # a thread sharing its core with other work
        with lock:
            seen.append((k, worker))

    deal(piece, 40, 2)
    assert sorted(k for k, _ in seen) == list(range(40))
    by_worker = [sum(1 for _, w in seen if w == i) for i in (0, 1)]
    assert by_worker[0] < by_worker[1]  # a fixed share would give each 20


def test_deal_raises_a_pieces_error_after_the_others_finish():
    from muflow.threads import deal

    def piece(k, worker):
        if k == 3:
            raise ValueError("piece 3")

    with pytest.raises(ValueError, match="piece 3"):
        deal(piece, 8, 2)


def test_begun_pieces_run_on_the_other_threads_until_the_caller_joins():
    """begin_dealing: the pool's threads take pieces while the caller does other work (the
    subproblem); the caller, joining, takes the pieces left; ``after`` runs once, the
    ``then`` callbacks after it."""
    import threading

    from muflow.thread_pool import begin_dealing

    started, release = threading.Event(), threading.Event()
    seen, order = [], []

    def piece(k, worker):
        if worker != 0:
            started.set()
            release.wait(5)  # held until the caller has done its own work
        seen.append((k, worker))

    begun = begin_dealing(piece, 6, 2, after=lambda: order.append("after"))
    assert started.wait(5)  # a pool thread began before any join
    assert all(w != 0 for _, w in seen)
    begun.then(lambda: order.append("then"))
    release.set()
    begun.join()
    assert sorted(k for k, _ in seen) == list(range(6))
    assert order == ["after", "then"]


def test_a_begun_pieces_error_is_raised_at_the_join_and_after_still_runs():
    from muflow.thread_pool import begin_dealing

    def piece(k, worker):
        if k == 2:
            raise ValueError("piece 2")

    done = []
    begun = begin_dealing(piece, 8, 2, after=lambda: done.append("after")).then(lambda: done.append("then"))
    with pytest.raises(ValueError, match="piece 2"):
        begun.join()
    assert done == ["after"]  # released, but not counted as done


def test_an_explicit_count_is_held_to_a_forked_childs_share(eight_cores):
    """An object made in the parent carries the parent's count into a forked child; the
    child uses its share of it, and no more."""
    assert th.threads_for(None) == 8
    assert th.threads_for(3) == 3
    eight_cores.setattr(th, "_CAP", 1)
    assert th.threads_for(3) == 1 and th.threads_for(None) == 1
    eight_cores.setattr(th, "_CAP", 4)
    assert th.threads_for(3) == 3 and th.threads_for(6) == 4


def test_rows_of_an_operator_made_in_the_parent_run_on_the_childs_share(monkeypatch):
    """A row operator made for 2 threads, inherited by a child forked with a share of 1
    thread, deals its batch to 1 thread there (2 here): never more busy threads than the
    budget in all."""
    import scipy.sparse as sp

    import muflow.kernel_rows as kernel_rows
    from muflow.forking import forked_map
    from muflow.kernels import Kernel

    X = sp.random(3000, 40, density=0.2, format="csr", random_state=0)
    op = kernel_rows.KernelRows(X, Kernel("rbf", gamma=0.1), dtype="float32", n_threads=2)
    dealt = []
    original = kernel_rows.begin_on_threads

    def recording(part, n_parts, *args):
        dealt.append(n_parts)
        return original(part, n_parts, *args)

    monkeypatch.setattr(kernel_rows, "begin_on_threads", recording)
    rows = np.arange(0, 3000, 25)
    data = np.empty((rows.size, 3000), dtype=np.float32)

    def batch(k):
        dealt.clear()
        op.rows_into(rows, data, np.arange(rows.size))
        return list(dealt), data.copy()

    here, expected = batch(0)
    [(there, got)] = forked_map(batch, 1, 1, threads=1)
    assert here == [2] and there == [1]
    assert np.array_equal(got, expected)


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_a_child_forked_under_the_hold_starts_no_blas_threads(threaded_blas):
    """BLAS is held to one thread while forked_map forks: a child's own hold then sets
    nothing, and a product there starts none of BLAS's threads (set in the child, OpenBLAS
    starts them, and they spin on the cores of the child's siblings)."""
    from muflow.forking import forked_map

    A = np.random.default_rng(0).normal(size=(400, 400))
    A @ A  # the parent's BLAS threads exist

    def in_child(k):  # run under the child's own hold (forking._task_in_child)
        with th.blas_single_threaded():
            A @ A
        return _os_threads()

    # fork copies only the forking thread: the child's main thread is its one thread
    assert forked_map(in_child, 1, 1, threads=1) == [1]


def test_a_column_opens_and_runs_with_blas_held(monkeypatch):
    """The working-set state opens (its objective is a dot product over n, which OpenBLAS
    threads from 10,000 entries) under the same hold of BLAS to one thread as its loop:
    BLAS's idle threads would spin into the loop's first iterations otherwise."""
    from muflow.solvers import working_set

    held = []
    original = working_set.InProcessHome.open

    def recording(self, *args):
        held.append(th._ONE_BLAS_THREAD._inside > 0)
        return original(self, *args)

    monkeypatch.setattr(working_set.InProcessHome, "open", recording)
    X, y = _four_classes(200)
    muflow.SVC(gram="rows", solver="working_set", n_jobs=1).fit(X, y < 2)
    assert held == [True]


def test_a_child_forked_under_the_hold_keeps_the_budget_blas_had(threaded_blas):
    """A child forked without a share of its own (``threads=None``) has this process's
    budget, although BLAS reaches it on one thread: the count the parent's hold found
    stands for it, as in the parent while held."""
    from muflow.forking import forked_map

    budget = th.thread_budget()
    assert forked_map(lambda k: th.thread_budget(), 2, 1) == [budget, budget]
    with th.blas_single_threaded():
        assert th.thread_budget() == budget
