"""A scheduler lost during `gram --scheduler`: one line on stderr naming the tiles kept and
the same command, which continues the partial store (gram has no --resume). The build runs
as a real command in a subprocess against a real LocalCluster of worker processes, which the
test closes once the first tiles are written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.dask_cluster import stderr_lines_after_closing

REPO = Path(__file__).resolve().parents[2]


def _tiles_written(store: Path) -> bool:
    return store.exists() and sum(1 for _ in store.rglob("*")) > 12


def test_a_scheduler_lost_mid_build_fails_in_one_line_naming_the_same_command(tmp_path):
    from distributed import LocalCluster

    rng = np.random.default_rng(0)
    X = rng.normal(size=(6000, 20))
    data = tmp_path / "d.csv"
    np.savetxt(data, np.column_stack([X, np.where(X[:, 0] > 0, 1, -1)]), delimiter=",")
    store = tmp_path / "K.zarr"
    cluster = LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                           dashboard_address=":0", memory_limit="1GiB")
    argv = ["gram", "--data", str(data), "--scheduler", cluster.scheduler_address, "--out",
            str(store), "--tile", "500"]
    returncode, lines, err = stderr_lines_after_closing(cluster, argv,
                                                        lambda: _tiles_written(store), REPO)
    assert returncode == 1
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("muflow gram: failed: SchedulerLostError: the Dask scheduler at "), line
    assert "the Gram build cannot go on" in line
    assert " of 78) are kept in " in line and "--resume" not in line, line
    assert line.endswith(f"--tile 500` (Dask's log: {store}.distributed.log)"), line
    assert "muflow ERROR the Gram build ended because the Dask scheduler went away" in (
        Path(f"{store}.distributed.log").read_text())
