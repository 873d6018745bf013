"""`python -m muflow run --scheduler` whose scheduler is lost mid-run fails in one line on
stderr naming `run ... --out OUT --resume` (issue 33, item 4): a real run in a subprocess
(its temporary Prefect server, its Prefect flow) against a real LocalCluster of worker
processes, which the test closes once the run's first stage is finished."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.test_run_command import REPO, muflow_env


@pytest.mark.slow
def test_a_scheduler_lost_mid_run_fails_in_one_line_naming_run_resume(tmp_path):
    from distributed import LocalCluster

    rng = np.random.default_rng(0)
    X = rng.normal(size=(1500, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=1500) > 0, 1, -1)
    np.savetxt(tmp_path / "d.csv", np.column_stack([X, y]), delimiter=",")
    gammas = ", ".join(str(g) for g in np.geomspace(0.01, 10, 30))  # Gram stores take a while
    config = tmp_path / "run.toml"
    config.write_text(f'[data]\npath = "{tmp_path / "d.csv"}"\n[grid]\nC = [1.0]\n'
                      f'kernels = [{{ kernel = "rbf", gamma = [{gammas}] }}]\n'
                      '[cluster]\ntimeout = 2.0\n')
    out = tmp_path / "out"
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                           dashboard_address=":0", memory_limit="1GiB")
    argv = ["run", str(config), "--scheduler", cluster.scheduler_address, "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "muflow", *argv], cwd=tmp_path,
                            env=dict(muflow_env(tmp_path), PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None and not (
                (out / "stages.log").exists() and "data" in (out / "stages.log").read_text()):
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()  # building the Gram stores
        cluster.close(timeout=10)
        stdout, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # no Prefect or distributed traceback
    line = lines[0]
    assert line.startswith("muflow run: failed: SchedulerLostError: the Dask scheduler at "
                           f"{cluster.scheduler_address} is gone: the run cannot go on")
    assert f"the finished stages are kept in {out}; continue with `" in line
    assert line.endswith(f"` (Prefect's and Dask's log: {out / 'run.log'})")
    hinted = shlex.split(line.split("continue with `")[1].split("`")[0])
    assert hinted == ["python", "-m", "muflow", *argv, "--resume"]
    assert "Task run 'prepare-data" in stdout  # Prefect's progress stays on the console
    log = (out / "run.log").read_text()
    assert "Traceback" in log and "build-gram" in log  # and its tracebacks are kept
