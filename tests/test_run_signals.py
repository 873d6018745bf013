"""SIGINT and SIGTERM to ``python -m muflow run`` (issue 38, items 2 and 4): stopped within
5 s during its sweep on a LocalCluster, with one line that says what is kept, and with no
process left (the Dask workers, the temporary Prefect server, forked children). Ctrl-C to
the whole process group took about 150 s and printed some 70 lines of tracebacks: the
Prefect server and the Dask workers got the signal first."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from sklearn.datasets import make_classification

from tests.test_run_command import muflow_env
from tests.test_signals import _env, _kill_all, assert_gone, stop

CONFIG = """\
[data]
path = "{data}"
[grid]
C = [1e5]
kernels = [{{ kernel = "rbf", gamma = [0.05] }}]
[sweep]
folds = 3
solver = "working_set"
tol = 1e-7
max_iter = 1000000
on_cluster = true
[cluster]
workers = 2
"""


@pytest.fixture(scope="module")
def slow_config(tmp_path_factory):
    """A sweep on the Dask workers that runs for minutes."""
    folder = tmp_path_factory.mktemp("run-signals")
    X, y = make_classification(n_samples=1500, n_features=5, n_informative=3, flip_y=0.3,
                               random_state=4)
    np.savez(folder / "slow.npz", X=X, y=y)
    (folder / "slow.toml").write_text(CONFIG.format(data=folder / "slow.npz"))
    return folder / "slow.toml"


def _command_line(process) -> str:
    """A process's command line, "" once it has ended (a zombie or gone: short-lived
    children of the run come and go while the test looks at them)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def _sweeping_on_workers(parent, out) -> bool:
    workers = [c for c in parent.children(recursive=True)
               if "multiprocessing" in _command_line(c)]
    return len(workers) >= 2 and (out / "sweep").is_dir()


@pytest.mark.slow
@pytest.mark.parametrize("signum, whole_group", [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["Ctrl-C-to-the-group", "SIGTERM"])
def test_a_signal_stops_the_run_and_everything_it_started(slow_config, tmp_path, signum,
                                                           whole_group):
    env = dict(muflow_env(tmp_path), PYTHONPATH=_env()["PYTHONPATH"])
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "muflow", "run", str(slow_config), "--out", str(out)],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        parent = psutil.Process(proc.pid)
        seen = {}
        end = time.monotonic() + 240
        while time.monotonic() < end:
            assert proc.poll() is None, proc.communicate()
            for child in parent.children(recursive=True):
                seen.setdefault(child.pid, child)
            if _sweeping_on_workers(parent, out):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the run never reached its sweep on the workers")
        assert any("uvicorn" in _command_line(p) for p in seen.values())
        time.sleep(1.0)
        err = stop(proc, signum, whole_group)
    finally:
        _kill_all(proc)
    assert proc.returncode == 128 + signum
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"muflow run: stopped by {signal.Signals(signum).name}; ")
    assert "--resume" in lines[0]
    assert_gone(seen.values())
