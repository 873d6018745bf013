"""End to end: a real ``prefect server`` on loopback, the work pool, the deployments of
deploy/prefect.yaml, a process worker, one triggered run of the nightly retrain.

Everything runs in its own PREFECT_HOME (a temporary directory) against a server on a free
loopback port; every process started here is stopped (its whole process group) in a
``finally``. The deployment's parameters are overridden at trigger time to a small, fast
configuration and a run directory in the temporary directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.prefect_home import prefect_home

httpx = pytest.importorskip("httpx")

REPO = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))
DASK = str(Path(sys.executable).with_name("dask"))
SMALL_CONFIG = {
    "grid": {"C": [1.0], "kernels": [{"kernel": "rbf", "gamma": [0.01]}]},
    "sweep": {"folds": 2},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd, env, log: Path) -> subprocess.Popen:
    fh = open(log, "wb")
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT,
                            start_new_session=True)  # own process group: stopped as a whole


def _stop(proc: subprocess.Popen):
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _cli(args, env, timeout=120) -> str:
    res = subprocess.run([PREFECT, *args], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert res.returncode == 0, f"prefect {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _wait_healthy(api: str, server: subprocess.Popen, log: Path, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert server.poll() is None, f"prefect server exited:\n{log.read_text()[-3000:]}"
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"prefect server did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.mark.slow
def test_nightly_retrain_deployment_runs_on_a_real_server(tmp_path):
    t_start = time.monotonic()
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    home = prefect_home(tmp_path / "prefect-home")  # its database made once a session
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=api, PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_WORKER_PREFETCH_SECONDS="5",
               PREFECT_UI_ENABLED="false", PREFECT_CLI_PROMPT="false")
    procs = []
    phases = []

    def phase(name):
        phases.append((name, round(time.monotonic() - t_start, 1)))

    try:
        server_log = tmp_path / "server.log"
        # The API alone: no UI, and no background services (nothing here needs the
        # scheduler of cron runs or the late-run marker; the run is created by hand).
        server = _start([PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port),
                         "--no-services", "--no-ui", "--analytics-off"], env, server_log)
        procs.append(server)
        # A Dask cluster the flow connects to by address (the deployment's `scheduler`
        # parameter), started while the server migrates its database.
        dask_port = _free_port()
        scheduler = f"tcp://127.0.0.1:{dask_port}"
        procs.append(_start([DASK, "scheduler", "--host", "127.0.0.1", "--port", str(dask_port),
                             "--no-dashboard"], env, tmp_path / "dask-scheduler.log"))
        procs.append(_start([DASK, "worker", scheduler, "--nworkers", "1", "--nthreads", "1",
                             "--no-dashboard"], env, tmp_path / "dask-worker.log"))
        _wait_healthy(api, server, server_log)
        phase("server up")

        _cli(["work-pool", "create", "muflow-process", "--type", "process"], env)
        out = _cli(["--no-prompt", "deploy", "--prefect-file", "deploy/prefect.yaml", "--all"], env)
        assert "nightly-retrain" in out and "on-demand-sweep" in out, out
        phase("deployed")

        dep = httpx.get(f"{api}/deployments/name/pipeline/nightly-retrain", timeout=10).json()
        assert dep["schedules"] and dep["schedules"][0]["schedule"]["cron"] == "0 2 * * *"
        assert dep["work_pool_name"] == "muflow-process"
        sweep_dep = httpx.get(f"{api}/deployments/name/sweep/on-demand-sweep", timeout=10)
        assert sweep_dep.status_code == 200

        worker_log = tmp_path / "worker.log"
        procs.append(_start([PREFECT, "worker", "start", "--pool", "muflow-process", "--limit", "1"],
                            env, worker_log))

        run_dir = tmp_path / "run"
        flow_run = httpx.post(
            f"{api}/deployments/{dep['id']}/create_flow_run",
            json={"parameters": {"config": SMALL_CONFIG, "out_dir": str(run_dir), "scheduler": scheduler}},
            timeout=10,
        ).json()
        phase("triggered")
        deadline = time.monotonic() + 150
        state = None
        while time.monotonic() < deadline:
            fr = httpx.get(f"{api}/flow_runs/{flow_run['id']}", timeout=10).json()
            state = fr["state"]["type"]
            if state in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            time.sleep(1)
        phase(f"flow run {state}")
        assert state == "COMPLETED", (
            f"flow run ended {state}\nworker log:\n{worker_log.read_text()[-6000:]}")

        report = (run_dir / "report.md").read_text()
        assert "test accuracy" in report
        for rel in ("sweep/results.csv", "model/model.json", "metrics.json", "objective.png"):
            assert (run_dir / rel).is_file(), rel
        assert list((run_dir / "sweep").glob("*.png"))

        artifacts = httpx.post(f"{api}/artifacts/filter", timeout=10,
                               json={"artifacts": {"flow_run_id": {"any_": [flow_run["id"]]}}}).json()
        by_key = {a["key"]: a for a in artifacts}
        assert "muflow-results" in by_key and "| kernel |" in by_key["muflow-results"]["data"]
        assert "test accuracy" in by_key["muflow-best"]["data"]
        assert "report.md" in by_key["muflow-report"]["data"]
        assert any(k.startswith("muflow-plot-") for k in by_key)
        assert f"Dask scheduler: {scheduler}" in worker_log.read_text()  # the given cluster, not a local one
    finally:
        for proc in reversed(procs):
            _stop(proc)
    assert all(p.poll() is not None for p in procs)
    print(f"end-to-end deployment test: {time.monotonic() - t_start:.1f} s; phases {phases}")
