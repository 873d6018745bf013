"""``cache_size`` reaches the row cache on every path that computes kernel rows: in process
(the solver's cache), in a sweep, and on the workers that hold X's row partitions."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

import muflow
import muflow.routing
from muflow import memory
from muflow.selection import SweepGrid, run_sweep
from muflow.solvers.registry import SOLVERS


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    return X, np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1, 0)


@pytest.fixture
def cache_sizes(monkeypatch):
    """The ``cache_mb`` every solve of the row-reading solvers was called with."""
    seen = []
    for name in ("smo", "working_set"):
        info = SOLVERS[name]

        @functools.wraps(info.solve)
        def spy(problem, *args, _solve=info.solve, **kwargs):
            seen.append(kwargs.get("cache_mb"))
            return _solve(problem, *args, **kwargs)

        monkeypatch.setitem(SOLVERS, name, dataclasses.replace(info, solve=spy))
    return seen


def test_a_fit_on_rows_computed_on_demand_caches_cache_size(cache_sizes):
    X, y = _data()
    model = muflow.SVC(gram="rows", cache_size=3.5).fit(X, y)
    assert model.solver_ == "working_set"
    assert cache_sizes == [3.5]


def test_a_sweep_on_rows_computed_on_demand_caches_cache_size(tmp_path, monkeypatch, cache_sizes):
    X, y = _data()
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2**10)  # no K fits
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.5, 2.0])
    run_sweep(X, y, grid, folds=2, solver="smo", out_dir=tmp_path, progress=False, cache_size=2.5)
    assert cache_sizes and set(cache_sizes) == {2.5}  # the folds' solves and the refit


def test_the_workers_row_partitions_cache_cache_size(monkeypatch):
    from dask_cluster import local_client

    from muflow.dask.partitions import DaskRowPartitions

    reached = []
    start = DaskRowPartitions.__init__

    def recording(self, *args, **kwargs):
        start(self, *args, **kwargs)
        reached.append(self.cache_mb)

    monkeypatch.setattr(DaskRowPartitions, "__init__", recording)
    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)  # every iteration there
    X, y = _data()
    with local_client(2) as client:
        model = muflow.SVC(client=client, solver="working_set", cache_size=4.0, max_iter=50).fit(X, y)
    assert model.solver_ == "working_set"
    assert reached == [4.0]
