"""Workers whose memory limit cannot hold the Gram store's panels end a multiplicative fit
on the cluster in one line naming the fix, before the store is built; workers paused for
memory end the store's build the same way after a bounded wait, where it used to wait on
them forever."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import muflow
import muflow.routing
from muflow.exceptions import MuflowError


def _within(seconds, call):
    """``call()``'s outcome, or a failure naming the hang after ``seconds``."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (the test inspects it)
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting after {seconds} s"
    outcome["seconds"] = time.monotonic() - started
    return outcome


def test_a_store_too_large_for_the_workers_is_refused_before_it_is_built(tmp_path, monkeypatch):
    from distributed import Client, LocalCluster

    monkeypatch.setenv("MUFLOW_CACHE_DIR", str(tmp_path / "cache"))
    # the fit runs on the Gram store served by the workers (not one task, no kernel panels)
    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)
    monkeypatch.setattr(muflow.routing, "PANEL_FRACTION", 0.0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 10))
    y = np.where(X[:, 0] > 0, 1, -1)
    with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="300MiB",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        model = muflow.SVC(gamma=0.05, solver="m3", max_iter=20, client=client)
        outcome = _within(120, lambda: model.fit(X, y))
    error = outcome.get("error")
    assert isinstance(error, MuflowError), repr(error)
    message = str(error)
    assert "too little memory" in message and "Gram store" in message
    assert "--memory-limit" in message and "\n" not in message
    assert not list((tmp_path / "cache").glob("*.zarr")), "the store was built first"
    print(f"refused in {outcome['seconds']:.1f} s: {message}")


def test_a_build_on_workers_paused_for_memory_ends_in_words(tmp_path, monkeypatch):
    from distributed import Client, LocalCluster

    import muflow.dask.worker_memory as worker_memory
    from muflow.gram.build import build_gram
    from muflow.gram.store import GramStore, fingerprint
    from muflow.kernels import Kernel

    monkeypatch.setattr(worker_memory, "PAUSED_SECONDS", 3.0, raising=False)
    X = np.random.default_rng(1).normal(size=(256, 4))
    kernel = Kernel("rbf", gamma=0.5)
    store = GramStore.create(str(tmp_path / "k.zarr"), n=256, tile=128, dtype="float32",
                             kernel=kernel, fp=fingerprint(X))
    with LocalCluster(n_workers=1, threads_per_worker=1, memory_limit="1GiB",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        # the workers pause at a tenth of their limit: over it already, they run no task
        client.run(_pause_at_a_tenth)
        outcome = _within(60, lambda: build_gram(X, store, client=client))
    error = outcome.get("error")
    assert isinstance(error, MuflowError), repr(error)
    assert "paused for memory" in str(error) and "--memory-limit" in str(error)
    assert outcome["seconds"] < 30


def _pause_at_a_tenth(dask_worker):
    dask_worker.memory_manager.memory_pause_fraction = 0.1
