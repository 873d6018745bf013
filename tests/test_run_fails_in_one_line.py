"""`python -m muflow run --scheduler` whose scheduler is lost mid-run fails in one line on
stderr naming `run ... --out OUT --resume` (issue 33, item 4): a real run in a subprocess
(its temporary Prefect server, its Prefect flow) against a real LocalCluster of worker
processes, which the test closes once the run's first stage is finished."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tests.test_commands_fail_in_one_line import close_scheduler_once, one_line_naming_resume

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

    def data_stage_done():  # the Gram stores are being built
        log = out / "stages.log"
        return log.exists() and "data" in log.read_text()

    stdout, err = close_scheduler_once(proc, cluster, data_stage_done, wait=240)
    assert not any(l.startswith("Dask dashboard:") for l in err.splitlines()), err
    line = one_line_naming_resume(proc, err, argv, cluster.scheduler_address,
                                  f"` (Prefect's and Dask's log: {out / 'run.log'})")
    assert "the run cannot go on" in line
    assert f"the finished stages are kept in {out}; continue with `" in line
    assert "Task run 'prepare-data" in stdout  # Prefect's progress stays on the console
    log = (out / "run.log").read_text()
    assert "Traceback" in log and "build-gram" in log  # and its tracebacks are kept
