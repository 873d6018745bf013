"""One Prefect test server (``prefect_test_harness``) and one Dask cluster for every flow test.

The harness starts a temporary Prefect server (about 12 s here); a session-scoped fixture
pays that once. Flows get the cluster's address as their ``scheduler`` parameter, so no
flow test starts a cluster of its own.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session", autouse=True)
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def scheduler_address():
    """Address of a one-worker LocalCluster (worker processes, as in production)."""
    from muflow.dask.cluster import local_cluster

    with local_cluster(n_workers=1) as cluster:
        yield cluster.scheduler_address


@pytest.fixture
def small_config():
    """Bundled breast cancer, two RBF kernel settings (two Gram stores) x two C values, 2 folds."""
    return {
        "grid": {"C": [0.1, 1.0], "kernels": [{"kernel": "rbf", "gamma": [0.01, 0.1]}]},
        "sweep": {"folds": 2},
    }
