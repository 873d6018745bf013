"""Workers with little memory (issue 33, item 3): the row partitions fit their cache to the
smallest worker's limit before they start, and refuse with the numbers when not even a few
rows fit; a worker that keeps dying is reported as out of memory in one line. And a worker
that holds a partition reuses the memory it frees, where distributed's nanny told its
allocator to give it back at once (issue 37)."""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

import muflow
from muflow.dask.partitions import DaskRowPartitions
from muflow.dask.worker_memory import (DASK_TRIM_THRESHOLD, MALLOC_THRESHOLDS, MIN_CACHE_ROWS,
                                       WORKER_FRACTION, cache_to_fit_workers,
                                       lost_workers_message, thresholds_to_replace)
from muflow.exceptions import MuflowError
from muflow.kernels import Kernel
from tests.dask_cluster import local_client


class _Scheduler:
    """A client stand-in answering the scheduler's identity (as
    :func:`muflow.dask.scheduler_workers.scheduler_workers` asks it) and the workers' memory
    in use (the rule's own logic)."""

    def __init__(self, *workers):
        self.workers = {f"tcp://w{i}": w for i, w in enumerate(workers)}
        self.scheduler = self

    def identity(self, n_workers=-1):
        return {"workers": {a: {"memory_limit": w["memory_limit"]} for a, w in self.workers.items()}}

    def sync(self, function, **kwargs):
        return function(**kwargs)

    def run(self, function, workers):
        return {a: self.workers[a].get("in_use", 0) for a in workers}


MB = 2**20


def test_a_cache_that_fits_is_kept():
    client = _Scheduler({"memory_limit": 4096 * MB, "in_use": 200 * MB})
    X = np.zeros((8000, 20))
    assert cache_to_fit_workers(client, X, [(0, 4000), (4000, 8000)], np.float32, 200.0) == 200.0


def test_a_cache_too_large_for_the_smallest_worker_is_made_smaller():
    small = {"memory_limit": 300 * MB, "in_use": 120 * MB}
    client = _Scheduler({"memory_limit": 4096 * MB}, small)
    X = np.zeros((8000, 20))
    with pytest.warns(ResourceWarning, match="instead of 200 MB"):
        mb = cache_to_fit_workers(client, X, [(0, 4000), (4000, 8000)], np.float32, 200.0)
    room = (WORKER_FRACTION * 300 - 120) * MB - 4000 * (2 * 8 * 20 + 96)
    assert mb == pytest.approx(room / MB) and mb < 200


def test_no_room_for_a_few_rows_is_refused_with_the_numbers_and_the_fix():
    client = _Scheduler({"memory_limit": 300 * MB, "in_use": 175 * MB})
    X = np.zeros((400_000, 50))
    with pytest.raises(MuflowError, match=r"(?s)too little memory.*needs \d+ MB.*--memory-limit"):
        cache_to_fit_workers(client, X, [(0, 200_000), (200_000, 400_000)], np.float32, 200.0)


def test_workers_without_a_limit_take_the_cache_asked_for():
    client = _Scheduler({"memory_limit": 0})
    assert cache_to_fit_workers(client, np.zeros((10, 2)), [(0, 10)], np.float32, 200.0) == 200.0


def test_the_lost_workers_message_is_one_line_naming_memory():
    class Logs:
        def get_worker_logs(self, nanny=False):
            return {"tcp://a": [("WARNING", "Worker tcp://a (pid=1) exceeded 95% memory budget. "
                                            "Restarting...\nmore")]}

    message = lost_workers_message(Logs(), 4)
    assert "\n" not in message and "out of memory" in message and "exceeded 95% memory" in message
    assert MIN_CACHE_ROWS >= 2


def test_300_mb_workers_give_one_line_about_memory_or_a_fit_that_completes():
    """The issue's probe: 8,000 rows on workers limited to 300 MB. A worker that has imported
    the numerical stack holds about 200 MB of its 286 MiB, so the partitions are refused at
    once, in one line; a machine whose workers hold less fits with a smaller cache."""
    X, y = make_classification(n_samples=8000, n_features=20, n_informative=10, flip_y=0.05,
                               random_state=0)
    with local_client(2, memory_limit="300MB") as client:
        t = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                model = muflow.SVC(gamma=0.05, client=client).fit(X, y)
        except MuflowError as error:
            message = str(error)
            assert "\n" not in message and "memory" in message and "--memory-limit" in message
            model = None
        seconds = time.perf_counter() - t
    assert seconds < 60
    if model is not None:
        assert model.converged_.all()
        local = muflow.SVC(gamma=0.05).fit(X, y)
        np.testing.assert_allclose(model.objective_, local.objective_, rtol=1e-5)


@pytest.mark.slow
def test_a_cache_larger_than_the_workers_hold_is_shrunk_and_the_solve_completes():
    from muflow.solvers import DualProblem
    from muflow.solvers.working_set import solve_working_set
    from muflow.kernel_rows import KernelRows

    X, y = make_classification(n_samples=8000, n_features=20, n_informative=10, flip_y=0.05,
                               random_state=0)
    y = np.where(y > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=0.05)
    with local_client(2, memory_limit="400MB") as client:
        # 2000 MB would hold all 8,000 rows of each partition's 4,000 columns (128 MB)
        with pytest.warns(ResourceWarning, match="row cache is"):
            parts = DaskRowPartitions(X, kernel, client, cache_mb=2000.0)
        try:
            slots = [info["cache_slots"] for info in parts.call("info")]
            remote = solve_working_set(DualProblem(parts, y, upper=1.0, equality=True))
        finally:
            parts.close()
    assert max(slots) < 8000 and remote.converged.all()
    local = solve_working_set(DualProblem(KernelRows(X, kernel), y, upper=1.0, equality=True))
    np.testing.assert_allclose(remote.objective, local.objective, rtol=1e-5)


def test_the_allocators_thresholds_are_replaced_only_where_distributed_chose_them():
    assert thresholds_to_replace({"MALLOC_TRIM_THRESHOLD_": str(DASK_TRIM_THRESHOLD)}) == MALLOC_THRESHOLDS
    assert thresholds_to_replace({"MALLOC_TRIM_THRESHOLD_": DASK_TRIM_THRESHOLD}) == MALLOC_THRESHOLDS
    # the user's own choice, or glibc's dynamic thresholds where nothing is set: kept
    assert thresholds_to_replace({"MALLOC_TRIM_THRESHOLD_": "1000000"}) == {}
    assert thresholds_to_replace({"MALLOC_TRIM_THRESHOLD_": str(DASK_TRIM_THRESHOLD),
                                  "MALLOC_MMAP_THRESHOLD_": "131072"}) == {}
    assert thresholds_to_replace({}) == {}
    # muflow's own mmap threshold beside distributed's trim threshold: both are set
    assert thresholds_to_replace({"MALLOC_TRIM_THRESHOLD_": str(DASK_TRIM_THRESHOLD),
                                  "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}) == MALLOC_THRESHOLDS


def _as_distributed_starts_them(monkeypatch):
    """This process's environment as a fresh one: a nanny takes its variables over its
    configuration, and clusters started earlier in this process left theirs here."""
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(DASK_TRIM_THRESHOLD))
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)


def _pages_faulted_by_temporaries(count=40, nbytes=1 << 20):
    """On a worker: the pages faulted in while ``count`` arrays of ``nbytes`` are made,
    written and freed, one after the other (an iteration's temporaries)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(count):
        np.empty(nbytes // 8).fill(1.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _has_mallopt():
    import ctypes
    import sys

    return sys.platform.startswith("linux") and hasattr(ctypes.CDLL(None), "mallopt")


@pytest.mark.skipif(not _has_mallopt(), reason="glibc's mallopt (Linux)")
def test_a_worker_holding_a_partition_reuses_the_memory_it_frees(monkeypatch):
    _as_distributed_starts_them(monkeypatch)
    X, _ = make_classification(n_samples=600, n_features=8, random_state=0)
    # distributed's own LocalCluster: its nanny sets MALLOC_TRIM_THRESHOLD_=65536
    with local_client(n_workers=1) as client:
        [before] = client.run(_pages_faulted_by_temporaries).values()
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.1), client)
        try:
            [info] = parts.call("info")
            [after] = client.run(_pages_faulted_by_temporaries).values()
        finally:
            parts.close()
    assert info["malloc_thresholds"] == MALLOC_THRESHOLDS
    # each fresh megabyte was 256 pages faulted in; reused, one megabyte's pages at most twice
    assert before >= 40 * 128, before
    assert after <= 2 * 256, after


@pytest.mark.skipif(not _has_mallopt(), reason="glibc's mallopt (Linux)")
def test_a_worker_predicting_a_dask_array_reuses_the_memory_it_frees(monkeypatch):
    import dask.array as da

    _as_distributed_starts_them(monkeypatch)
    X, y = make_classification(n_samples=400, n_features=8, random_state=0)
    model = muflow.SVC(kernel="rbf", gamma=0.1).fit(X, y)
    with local_client(n_workers=1) as client:
        [before] = client.run(_pages_faulted_by_temporaries).values()
        expected = model.predict(X)
        got = model.predict(da.from_array(X, chunks=(100, -1))).compute()
        [after] = client.run(_pages_faulted_by_temporaries).values()
    np.testing.assert_array_equal(got, expected)
    assert before >= 40 * 128, before
    assert after <= 2 * 256, after


def test_a_partition_is_freed_with_its_last_reference_not_by_the_cycle_collector():
    """A partition's row cache is most of a worker's memory: once its actor and its channel
    let it go, it is freed at once. A reference cycle (its row source held it) kept it until
    Python's cycle collector ran, which a worker busy in compiled loops may not do for many
    fits: the next fit's memory rule then counted it, and shrank that fit's cache or refused
    the fit (issue 37's repeated fits on one cluster)."""
    import gc
    import weakref

    from muflow.dask.partitions import RowPartition

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 6))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    B = np.arange(0, 600, 20)
    gc.disable()
    try:
        part = RowPartition(X, 0, Kernel("rbf", gamma=0.2).to_dict(), 600, cache_mb=2)
        part.product_start(())
        part.begin(y, np.ones(600), -np.ones(600), np.zeros(600), True)
        part.prefetch(X[B], B)
        part.iterate(B, np.full(B.size, 0.1), B, np.zeros(B.size), None, False, 8)
        freed = weakref.ref(part)
        del part
        assert freed() is None
    finally:
        gc.enable()


def _partitions_alive() -> int:
    """On a worker: the partitions Python still holds, reachable or not (no collection)."""
    import gc

    from muflow.dask.partitions import RowPartition

    return sum(isinstance(o, RowPartition) for o in gc.get_objects())


def test_a_closed_fits_partitions_leave_their_workers_before_the_next_fit():
    """On a real worker whose cycle collector does not run (a worker in compiled loops for
    a whole fit), closing the partitions frees them: fits one after the other on one cluster
    each find the memory the last one used free again."""
    import gc

    X, y = make_classification(n_samples=2000, n_features=10, random_state=0)
    y = np.where(y > 0, 1.0, -1.0)
    with local_client(n_workers=1) as client:
        client.run(gc.disable)
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.1), client, cache_mb=20)
        try:
            from muflow.solvers import DualProblem
            from muflow.solvers.working_set import solve_working_set

            solve_working_set(DualProblem(parts, y, upper=1.0, equality=True))
            assert list(client.run(_partitions_alive).values()) == [1]
        finally:
            parts.close()
        deadline = time.monotonic() + 20
        while list(client.run(_partitions_alive).values()) != [0]:
            assert time.monotonic() < deadline, "the closed partition is still on its worker"
            time.sleep(0.1)
