"""muflow's own LocalCluster (:func:`muflow.dask.cluster.local_cluster`, the one ``python -m
muflow run`` starts): distributed's periodic chores run less often on its scheduler and in
its worker processes, and a value the user set is kept."""

from __future__ import annotations

import os

import dask
import pytest

from muflow.dask.cluster import HOUSEKEEPING, housekeeping, local_cluster
from muflow.dask.worker_memory import MALLOC_THRESHOLDS

TICK = "distributed.admin.tick.interval"
ENVIRON = "distributed.nanny.pre-spawn-environ"


def _settings():
    return {key: dask.config.get(key) for key in HOUSEKEEPING}


def test_housekeeping_takes_only_the_settings_left_at_distributeds_default(monkeypatch):
    # a cluster started earlier in this process left its nannies' variables here
    for name in MALLOC_THRESHOLDS:
        monkeypatch.delenv(name, raising=False)
    thresholds = {f"{ENVIRON}.{name}": value for name, value in MALLOC_THRESHOLDS.items()}
    assert housekeeping() == {key: ours for key, (_, ours) in HOUSEKEEPING.items()} | thresholds
    with dask.config.set({TICK: "50ms"}):
        assert TICK not in housekeeping()
        assert set(housekeeping()) == set(HOUSEKEEPING) - {TICK} | set(thresholds)
    # the user's own allocator settings are kept
    with dask.config.set({f"{ENVIRON}.MALLOC_TRIM_THRESHOLD_": 1 << 20}):
        assert not set(housekeeping()) & set(thresholds)
    with dask.config.set({f"{ENVIRON}.MALLOC_MMAP_THRESHOLD_": 1 << 20}):
        assert not set(housekeeping()) & set(thresholds)
    # ... and in this process's environment, which the nannies take over their configuration
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(1 << 20))
    assert not set(housekeeping()) & set(thresholds)


def test_the_workers_and_scheduler_of_muflows_cluster_run_the_chores_less_often(monkeypatch):
    from distributed import Client

    for name in MALLOC_THRESHOLDS:  # as the housekeeping test
        monkeypatch.delenv(name, raising=False)

    with dask.config.set({TICK: "50ms"}):  # the user's own value
        with local_cluster(n_workers=1, threads_per_worker=1, memory_limit="1GiB",
                           dashboard_address=None) as cluster, Client(cluster) as client:
            [seen] = client.run(_settings).values()
            [environ] = client.run(lambda: {name: os.environ.get(name)
                                            for name in MALLOC_THRESHOLDS}).values()
            [(tick, monitor)] = client.run(
                lambda dask_worker: (dask_worker._tick_interval,
                                     dask_worker.periodic_callbacks["monitor"].callback_time)
            ).values()
            scheduler = cluster.scheduler
            assert scheduler.periodic_callbacks["monitor"].callback_time == 2000
    assert seen == {"distributed.worker.profile.interval": "100ms", TICK: "50ms",
                    "distributed.admin.system-monitor.interval": "2s"}
    assert (tick, monitor) == (0.05, 2000)
    # the workers reuse the memory they free (muflow.dask.worker_memory)
    assert environ == {name: str(value) for name, value in MALLOC_THRESHOLDS.items()}
    # nothing of it stays in this process's configuration
    assert _settings()[TICK] == HOUSEKEEPING[TICK][0]


def test_the_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cache(client):
    """distributed's periodic refresh of the client's cached identity carries no per-worker
    details and may land between a fetch and its return: muflow asks the scheduler itself
    (:func:`muflow.dask.scheduler_workers.scheduler_workers`), so a partitioned fit never sees a
    cluster of two workers as one of none."""
    import numpy as np
    from distributed.client import SchedulerInfo

    from muflow.dask.scheduler_workers import scheduler_workers
    from muflow.dask.partitions import DaskRowPartitions
    from muflow.kernels import Kernel

    listed = scheduler_workers(client)
    assert len(listed) == 2 and all("memory_limit" in info for info in listed.values())
    # the cache as the refresh leaves it
    client._scheduler_identity = SchedulerInfo({"workers": {}})
    assert sorted(scheduler_workers(client)) == sorted(listed)
    client._scheduler_identity = SchedulerInfo({"workers": {}})
    X = np.random.default_rng(0).standard_normal((200, 3))
    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.5), client)
    try:
        assert len(parts.bounds) == 2
    finally:
        parts.close()


def test_the_dashboard_is_named_only_where_the_scheduler_serves_one(client, capsys):
    """A scheduler without a dashboard still runs its HTTP server, which distributed lists
    as the ``dashboard`` service and links to: no line for it (it named a page that answers
    404); the line stays for one with a dashboard."""
    import urllib.error
    import urllib.request

    from distributed import Client, LocalCluster

    from muflow.dask.cluster import print_dashboard

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as bare, \
            Client(bare, set_as_default=False) as bare_client:
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(bare_client.dashboard_link, timeout=10)
        print_dashboard(bare_client)
        assert "dashboard" not in capsys.readouterr().err
    print_dashboard(client)
    line = capsys.readouterr().err
    assert line == f"Dask dashboard: {client.dashboard_link}\n"
    assert urllib.request.urlopen(client.dashboard_link, timeout=10).status == 200
