"""The Gram build on a real 2-worker LocalCluster: equality, reuse, kill-and-resume, CLI."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import zarr

from muflow.cli import main as cli_main
from muflow.dask.cluster import SchedulerUnreachableError, connect
from muflow.gram import ensure_gram, numpy_gram
from muflow.gram.store import GramStore
from muflow.kernels import Kernel
from dask_cluster import breast_cancer
from tests.conftest import shared_data

BREAST_CANCER = os.path.join(os.path.dirname(__file__), "..", "..", "muflow", "datasets", "data",
                             "breast_cancer.csv")


@pytest.mark.parametrize("dtype, atol", [("float32", 1e-6), ("float64", 1e-13)])
def test_store_equals_in_memory_gram(client, tmp_path, dtype, atol):
    X, _ = breast_cancer()
    kernel = Kernel("rbf", gamma=0.5)
    gram, report = ensure_gram(X, kernel, client=client, store=str(tmp_path / "K.zarr"),
                               dtype=dtype, tile=128)
    assert len(report.computed) == report.total == 21
    K = np.asarray(zarr.open_array(str(tmp_path / "K.zarr"), mode="r")[...])
    assert K.dtype == np.dtype(dtype)
    np.testing.assert_allclose(K, kernel.block(X), rtol=0, atol=atol)


def test_sparse_a8a_rows_on_the_cluster(client, tmp_path):
    from sklearn.datasets import load_svmlight_file

    X, _ = load_svmlight_file(str(shared_data("a8a")), n_features=123)
    X = X[:800]
    kernel = Kernel("rbf", gamma=0.05)
    gram, _ = ensure_gram(X, kernel, client=client, store=str(tmp_path / "A.zarr"), tile=256)
    np.testing.assert_allclose(gram.read(), kernel.block(X), rtol=0, atol=1e-6)


def test_second_build_computes_no_tile(client, tmp_path):
    X, _ = breast_cancer()
    kernel = Kernel("poly", gamma=1.0, degree=2, coef0=1.0)
    cache = str(tmp_path / "cache")
    counted = []
    _, first = ensure_gram(X, kernel, client=client, cache_dir=cache, tile=128,
                           on_tile=lambda i, j, k: counted.append((i, j)))
    assert len(counted) == len(first.computed) == 21
    counted.clear()
    gram, second = ensure_gram(X, kernel, client=client, cache_dir=cache,
                               on_tile=lambda i, j, k: counted.append((i, j)))
    assert counted == [] and second.computed == [] and second.reused


KILLED_BUILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    from distributed import Client
    from muflow.gram import ensure_gram
    from muflow.kernels import Kernel

    if __name__ == "__main__":
        address, path = sys.argv[1], sys.argv[2]
        X = np.random.default_rng(11).normal(size=(900, 5))
        with Client(address) as client:
            # slow down the driver so that the test can kill it halfway
            ensure_gram(X, Kernel("rbf", gamma=0.3), client=client, store=path, tile=64,
                        on_tile=lambda i, j, k: time.sleep(0.15))
""")


def test_build_killed_halfway_resumes_with_only_the_missing_tiles(client, tmp_path):
    path = str(tmp_path / "K.zarr")
    script = tmp_path / "build.py"
    script.write_text(KILLED_BUILD)
    proc = subprocess.Popen([sys.executable, str(script), client.scheduler.address, path],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    total = 15 * 16 // 2
    deadline = time.monotonic() + 120
    recorded = set()
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            recorded = GramStore.open(path, mode="r").recorded_tiles()
        except Exception:
            recorded = set()
        if len(recorded) >= 10:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # let the tasks that the killed driver left running on the workers finish
    while client.processing() and any(client.processing().values()):
        time.sleep(0.1)
    gram = GramStore.open(path)
    recorded = gram.recorded_tiles()
    assert 10 <= len(recorded) < total
    X = np.random.default_rng(11).normal(size=(900, 5))
    kernel = Kernel("rbf", gamma=0.3)
    gram, report = ensure_gram(X, kernel, client=client, store=path)
    assert len(report.computed) == total - len(recorded)
    assert not set(report.computed) & recorded
    np.testing.assert_allclose(gram.read(), numpy_gram(X, kernel), rtol=0, atol=1e-6)


def test_gram_command_builds_then_reuses(client, tmp_path, capsys):
    out = str(tmp_path / "K.zarr")
    argv = ["gram", "--data", BREAST_CANCER, "--label-column", "class", "--kernel", "rbf",
            "--gamma", "0.05", "--tile", "256", "--out", out, "--scheduler", client.scheduler.address]
    assert cli_main(argv) == 0
    first = capsys.readouterr()
    assert f"Gram store: {out}" in first.out and "computed 6 of 6 tiles" in first.out
    assert f"Dask dashboard: {client.dashboard_link}" in first.err  # where to watch the build
    assert cli_main(argv) == 0
    assert "reused" in capsys.readouterr().out
    assert cli_main(argv[:8] + ["0.1"] + argv[9:]) == 2
    err = "".join(line for line in capsys.readouterr().err.splitlines(keepends=True)
                  if not line.startswith("Dask dashboard:"))
    assert "does not match" in err and "kernel differs" in err and "\n" == err[-1] and err.count("\n") == 1


def test_unanswered_scheduler_address_fails_clearly(tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    with pytest.raises(SchedulerUnreachableError, match=f"no Dask scheduler answered at {address} within 2 s"):
        connect(address, timeout=2)
    code = cli_main(["gram", "--data", BREAST_CANCER, "--gamma", "0.05", "--out",
                     str(tmp_path / "K.zarr"), "--scheduler", address, "--timeout", "2"])
    assert code == 2
    assert "dask scheduler" in capsys.readouterr().err
