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
