"""A scheduler lost mid-sweep: one line on stderr, whose hint is `sweep --resume` (issue 33,
item 4). The sweep runs as a real command in a subprocess against a real LocalCluster of
worker processes, which the test closes once the first kernel setting is saved."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.dask_cluster import stderr_lines_after_closing

REPO = Path(__file__).resolve().parents[1]


def test_a_scheduler_lost_mid_sweep_fails_in_one_line_naming_sweep_resume(tmp_path):
    from distributed import LocalCluster

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 5))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=600) > 0, 1, -1)
    data = tmp_path / "d.csv"
    np.savetxt(data, np.column_stack([X, y]), delimiter=",")
    out = tmp_path / "out"
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                           dashboard_address=":0", memory_limit="1GiB")
    gammas = ",".join(str(g) for g in np.geomspace(0.01, 10, 40))
    argv = ["sweep", "--data", str(data), "--scheduler", cluster.scheduler_address, "--out",
            str(out), "--gamma", gammas, "--C", "1,10,100", "--folds", "3", "--no-progress"]
    returncode, lines, err = stderr_lines_after_closing(
        cluster, argv, lambda: (out / "kernels").exists() and any((out / "kernels").iterdir()), REPO)
    assert returncode == 1
    assert len(lines) == 1, err
    assert lines[0].startswith("muflow sweep: failed: SchedulerLostError: the Dask scheduler at ")
    assert "sweep --data" in lines[0] and lines[0].endswith(
        f"--resume` (Dask's log: {out}/distributed.log)")
    assert "fit --resume" not in lines[0]
    assert "muflow ERROR the sweep ended because the Dask scheduler went away" in (
        out / "distributed.log").read_text()
