"""Every command's failure is one line on stderr whose hint names the command that
continues the work (issue 33, item 4): `fit --scheduler` whose scheduler is lost mid-fit (a
real LocalCluster of worker processes closed under the command, as for `sweep` in
tests/test_sweep_lost_scheduler.py), and `predict` and `gram` given a bad file. `run` is in
tests/test_run_fails_in_one_line.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _muflow(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "muflow", *map(str, args)], cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _stderr_lines(err):
    return [line for line in err.strip().splitlines() if not line.startswith("Dask dashboard:")]


def close_scheduler_once(proc, cluster, ready, *, wait):
    """Close ``cluster`` under the running command ``proc`` once ``ready()`` holds (at most
    ``wait`` seconds); its (stdout, stderr) once it has ended."""
    try:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()  # still working: the scheduler goes
        cluster.close(timeout=10)
        return proc.communicate(timeout=wait)
    finally:
        proc.kill()


def one_line_naming_resume(proc, err, argv, scheduler, log_note) -> str:
    """A lost scheduler's failure checked: exit 1, one stderr line (no Prefect or distributed
    traceback) that names the scheduler, ends with its log note, and whose hint is the
    command as given with --resume; the line."""
    assert proc.returncode == 1
    lines = _stderr_lines(err)
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"muflow {argv[0]}: failed: SchedulerLostError: the Dask scheduler "
                           f"at {scheduler} is gone") and line.endswith(log_note), line
    hinted = shlex.split(line.split("continue with `")[1].split("`")[0])
    assert hinted == ["python", "-m", "muflow", *argv, "--resume"]
    return line


def _two_blobs(path, n=1000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1, -1)
    np.savetxt(path, np.column_stack([X, y]), delimiter=",")
    return path


def test_a_scheduler_lost_mid_fit_fails_in_one_line_naming_fit_resume(tmp_path):
    from distributed import LocalCluster

    data = _two_blobs(tmp_path / "d.csv")
    out = tmp_path / "model"
    checkpoint = tmp_path / "model.checkpoint" / "checkpoint.npz"
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                           dashboard_address=":0", memory_limit="1GiB")
    argv = ["fit", "--data", str(data), "--scheduler", cluster.scheduler_address, "--out",
            str(out), "--gamma", "2", "--C", "10", "--tol", "1e-6", "--max-iter", "60",
            "--checkpoint-every", "2", "--quiet"]
    proc = _muflow(*argv)
    _, err = close_scheduler_once(proc, cluster, checkpoint.exists, wait=120)
    line = one_line_naming_resume(proc, err, argv, cluster.scheduler_address,
                                  f"` (Dask's log: {checkpoint.parent}/distributed.log)")
    # the hint continues the fit from the checkpoint
    assert f"its last checkpoint is kept in {checkpoint.parent}; continue with `" in line
    assert checkpoint.is_file() and not out.exists()
    # the traceback that the line replaces is in Dask's log (distributed's own lines about the
    # lost connection are there too when its timers noticed it before the command ended)
    log = (checkpoint.parent / "distributed.log").read_text()
    assert "muflow ERROR the fit ended because the Dask scheduler went away" in log
    assert "Traceback (most recent call last)" in log


def test_predict_given_a_bad_file_fails_in_one_line(tmp_path):
    from muflow.cli import main

    data = _two_blobs(tmp_path / "d.csv", n=60)
    assert main(["fit", "--data", str(data), "--out", str(tmp_path / "model"), "--quiet"]) == 0
    bad = tmp_path / "bad.csv"
    bad.write_text("1.0,2.0,3.0,4.0,5.0,1\n1.0,oops,3.0,4.0,5.0,-1\n")
    narrow = tmp_path / "narrow.csv"
    narrow.write_text("1.0,2.0,1\n3.0,4.0,-1\n")
    for data, model, named in ((bad, tmp_path / "model", "bad.csv"),
                               (narrow, tmp_path / "model", "features"),
                               (data, tmp_path / "no-model", "no-model")):
        _, err = (proc := _muflow("predict", "--model", model, "--data", data)).communicate(
            timeout=180)
        assert proc.returncode == 2, err
        lines = _stderr_lines(err)
        assert len(lines) == 1 and lines[0].startswith("muflow predict: error: "), err
        assert named in lines[0], err


def test_gram_given_a_bad_file_fails_in_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("1.0,2.0,1\n1.0,oops,-1\n")
    proc = _muflow("gram", "--data", bad, "--out", tmp_path / "K.zarr")
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 2, err
    lines = _stderr_lines(err)
    assert len(lines) == 1 and lines[0].startswith("muflow gram: error: "), err
    assert "bad.csv" in lines[0] and not (tmp_path / "K.zarr").exists()
