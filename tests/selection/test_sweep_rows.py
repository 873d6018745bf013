"""A sweep whose Gram does not fit in memory computes rows of K on demand (issue 16, item 4):
no Gram is built, and every configuration scores as with the stored Gram."""

from __future__ import annotations

import numpy as np
import pytest

from muflow import inmemory, memory
from muflow.kernel_rows import KernelRows
from muflow.selection import SweepGrid, run_sweep
from tests._references import a8a


def test_a_sweep_whose_gram_does_not_fit_reads_rows_on_demand(tmp_path, monkeypatch):
    X, y = a8a(400)
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[0.5, 2.0])
    options = dict(folds=3, solver="smo", tol=1e-4, progress=False)
    stored = run_sweep(X, y, grid, out_dir=tmp_path / "stored", **options)

    def refuse(*args, **kwargs):
        raise AssertionError("a Gram was built although it does not fit")

    # 1 MiB free: K of 400 samples (0.6 MiB in float32) takes more than half of it
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2**20)
    monkeypatch.setattr(inmemory, "numpy_gram", refuse)
    monkeypatch.setattr(inmemory, "empty_populated", refuse)
    computed = []
    rows_into = KernelRows.rows_into

    def counted(self, idx, data, slots):
        computed.append(len(idx))
        return rows_into(self, idx, data, slots)

    monkeypatch.setattr(KernelRows, "rows_into", counted)
    rows = run_sweep(X, y, grid, out_dir=tmp_path / "rows", **options)
    assert sum(computed) > 0
    assert len(rows.table) == len(stored.table) == 2
    for a, b in zip(rows.table, stored.table):
        assert a.C == b.C
        assert a.mean_cv_accuracy == pytest.approx(b.mean_cv_accuracy, abs=1e-9)
    assert rows.best["C"] == stored.best["C"]
