"""A scheduler without workers (the state after a lost scheduler is restarted: its old
workers have exited) refused in one line naming the fix, by every command and call that
sends work to it, instead of waiting forever for a worker that never comes
(:func:`muflow.dask.scheduler_workers.require_workers`).

The cluster is a real LocalCluster of no workers; the command runs as a real subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import muflow
from muflow.data.source import DataSource
from muflow.data.workers import read_on_workers
from muflow.exceptions import MuflowInputError
from muflow.gram.build import ensure_gram
from muflow.kernels import kernel_from_setting

from tests.conftest import shared_data

NO_WORKERS = "the Dask cluster has no workers; start some with `dask worker`"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bare():
    """``(cluster, client)``: a scheduler alone, no worker ever joins."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield cluster, client


def _sonar():
    X, y, _ = muflow.data.local.load_source(DataSource(path=str(shared_data("sonar.csv"))))
    return np.asarray(X, dtype=np.float64), y


def test_a_small_fit_on_a_cluster_without_workers_is_refused_in_words(bare):
    X, y = _sonar()
    with pytest.raises(MuflowInputError, match="no workers; start some"):
        muflow.SVC(kernel="rbf", gamma=0.1, client=bare[1]).fit(X, y)


def test_data_read_on_a_cluster_without_workers_is_refused_in_words(bare):
    with pytest.raises(MuflowInputError, match="no workers; start some"):
        read_on_workers(DataSource(path=str(shared_data("sonar.csv"))), bare[1], even=True)


def test_a_gram_build_on_a_cluster_without_workers_is_refused_before_the_store_is_made(bare, tmp_path):
    X, _ = _sonar()
    kernel = kernel_from_setting({"kernel": "rbf", "gamma": 0.1}, X)
    with pytest.raises(MuflowInputError, match="no workers; start some"):
        ensure_gram(X, kernel, client=bare[1], store=str(tmp_path / "K.zarr"))
    assert not (tmp_path / "K.zarr").exists()


def test_the_sweep_command_on_a_scheduler_without_workers_ends_in_one_line(bare, tmp_path):
    argv = ["sweep", "--data", str(shared_data("sonar.csv")), "--kernel", "rbf", "--gamma", "0.1",
            "--C", "1", "--folds", "3", "--scheduler", bare[0].scheduler_address,
            "--out", str(tmp_path / "sweep")]
    done = subprocess.run([sys.executable, "-m", "muflow", *argv], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600)
    assert done.returncode != 0
    assert NO_WORKERS in done.stderr
    assert "Traceback" not in done.stderr
