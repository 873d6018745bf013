"""A real Dask LocalCluster of worker processes for the distributed tests (one per module)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def local_client(n_workers=2, **kwargs):
    """A ``LocalCluster(n_workers, processes=True, threads_per_worker=1)`` and its client."""
    from distributed import Client, LocalCluster

    kwargs.setdefault("memory_limit", "2GiB")
    with LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1,
                      dashboard_address=":0", **kwargs) as cluster:
        with Client(cluster) as client:
            client.wait_for_workers(n_workers)
            yield client


class KillAt:
    """A solver callback that SIGKILLs process ``pid`` at ``iteration``, once (``killed``)."""

    def __init__(self, pid, iteration):
        self.pid, self.iteration, self.killed = pid, iteration, False

    def __call__(self, iteration, alpha, objective):
        if iteration == self.iteration and not self.killed:
            import os
            import signal

            os.kill(self.pid, signal.SIGKILL)
            self.killed = True
        return False


def kill_first_partition_at(client, parts, iteration):
    """:class:`KillAt` for the worker process of the first partition of ``parts``
    (:class:`muflow.dask.partitions.DaskRowPartitions`)."""
    import os

    return KillAt(client.run(os.getpid)[parts.actors[0]._address], iteration)


def breast_cancer():
    """Breast cancer features scaled to [0, 1] and labels +1 / -1 (read when called)."""
    import numpy as np

    import muflow.datasets

    X, y = muflow.datasets.load_breast_cancer()
    return X / 10.0, np.where(y == 4, 1.0, -1.0)


def stderr_lines_after_closing(cluster, argv, ready, repo):
    """Run ``python -m muflow *argv`` against ``cluster`` (its scheduler's address in argv),
    close the cluster once ``ready()`` holds, and return the command's exit code and its
    stderr lines, the dashboard's line left out: what a user sees when the scheduler goes
    away mid-command."""
    import os
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "muflow", *argv], cwd=repo,
                            env=dict(os.environ, PYTHONPATH=str(repo)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and not ready():
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        cluster.close(timeout=10)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    lines = [line for line in err.strip().splitlines() if not line.startswith("Dask dashboard:")]
    return proc.returncode, lines, err
