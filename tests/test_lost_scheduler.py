"""A scheduler that goes away mid-fit ends the fit with a muflow error naming its address
(issue 22), within seconds of distributed giving up, not with a KeyError or a hang."""

from __future__ import annotations

import threading
import time

import numpy as np

import muflow
import muflow.routing
from muflow.exceptions import MuflowError


def test_a_scheduler_closed_mid_fit_gives_a_muflow_error_naming_it(tmp_path, monkeypatch):
    from distributed import Client, LocalCluster

    monkeypatch.setenv("MUFLOW_CACHE_DIR", str(tmp_path / "cache"))
    # 400 samples would be fitted whole on one worker: here every pass is served there
    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)
    # and from the Gram store (kernel panels that do not fit, muflow.routing.panels_fit)
    monkeypatch.setattr(muflow.routing, "PANEL_FRACTION", 0.0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=400) > 0, 1, -1)
    cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                           dashboard_address=":0", memory_limit="1GiB")
    address = cluster.scheduler_address
    outcome = {}

    def fit():
        # distributed gives up reconnecting after the client's timeout (30 s by default)
        client = Client(address, timeout=5)
        try:
            model = muflow.SVC(gamma=0.5, solver="m3", max_iter=10**7, tol=1e-12, client=client)
            outcome["model"] = model.fit(X, y)
        except BaseException as exc:  # noqa: BLE001 (the test inspects it)
            outcome["error"] = exc
        finally:
            outcome["ended"] = time.monotonic()
            client.close(timeout=5)

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    # wait until the solver iterates on the workers (the Gram store is built by then)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _iterating(tmp_path / "cache"):
        time.sleep(0.2)
    time.sleep(2.0)
    closed_at = time.monotonic()
    cluster.close(timeout=10)
    thread.join(120)
    assert not thread.is_alive(), "the fit hung after its scheduler was closed"
    error = outcome.get("error")
    assert isinstance(error, MuflowError), repr(error)
    assert address in str(error) and "resume" in str(error)
    print(f"error {outcome['ended'] - closed_at:.1f} s after the scheduler closed: {error}")
    assert outcome["ended"] - closed_at < 60


def _iterating(cache) -> bool:
    """The store is complete: the fit has moved on to its solver."""
    from muflow.gram.store import GramStore

    for store in cache.glob("*.zarr") if cache.exists() else []:
        try:
            if GramStore.open(str(store), mode="r").complete:
                return True
        except Exception:
            pass
    return False
