"""A sweep's run directory read back on resume is checked (issue 33, item 1)."""

from __future__ import annotations

import numpy as np
import pytest

import muflow
from muflow.exceptions import MuflowInputError
from muflow.selection import SweepGrid, run_sweep


def test_a_resumed_sweep_refuses_a_kernel_record_holding_nan(tmp_path):
    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 120, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    run = tmp_path / "run"
    run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False)
    kdir = run / "kernels" / "000-rbf"
    with np.load(kdir / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["alpha_full"] = arrays["alpha_full"].copy()
    arrays["alpha_full"][:5] = np.nan
    np.savez(kdir / "arrays.npz", **arrays)
    with pytest.raises(MuflowInputError) as err:
        run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False, resume=True)
    assert str(err.value) == (f"sweep record {kdir} is damaged (alpha_full NaN or inf); delete "
                              f"{kdir} and resume: that kernel setting is solved again")


@pytest.mark.parametrize("fails_at", ["best.json", "best_model"])
def test_a_full_disk_keeps_no_best_json_without_its_model(tmp_path, monkeypatch, fails_at):
    """The sweep's outputs appear as a set or not at all (issue 38): a full disk while
    writing them left best.json and results.csv beside no best_model/."""
    import errno

    import muflow.selection.rundir as rundir_module
    from muflow.selection.records import ConfigurationRow

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    model = muflow.SVC().fit(X, (X[:, 0] > 0).astype(int))
    row = ConfigurationRow(kernel="rbf", gamma=1.0, degree=None, coef0=None, C=1.0,
                           mean_cv_accuracy=0.9, std_cv_accuracy=0.0, n_iter=1, n_support=3,
                           time_s=0.1, stopped_early=False, solver="smo", path="continuation",
                           split_accuracies=(0.9, 0.9))

    def full_disk(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    if fails_at == "best.json":
        monkeypatch.setattr(rundir_module, "write_json", full_disk)
    else:
        monkeypatch.setattr("muflow.persistence.save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        rundir_module.write_outputs(tmp_path, [row], 2, {"kernel": "rbf"}, model, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
