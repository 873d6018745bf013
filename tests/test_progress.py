"""Progress of a long fit: the reporter's throttling, what the working-set solver reports,
and the estimator and ``muflow fit`` showing it."""

from __future__ import annotations

import functools
import io

import numpy as np
import pytest

import muflow
import muflow.model
from muflow.cli import main
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.progress import FitProgress
from muflow.solvers.problem import DualProblem
from muflow.solvers.working_set import solve_working_set
from tests._references import a8a


def test_a_fit_shorter_than_the_delay_prints_nothing():
    stream = io.StringIO()
    progress = FitProgress(stream, delay=3600)
    for it in range(1, 50):
        progress(iteration=it, gap=1.0, target=2e-3, rows_computed=it, rows_requested=it,
                 cache_hits=0, active=10, n=10)
        progress.callback(it, None, [1.0])
    assert stream.getvalue() == "" and progress.lines == 0


def test_lines_are_throttled_by_the_clock(monkeypatch):
    clock = iter(np.arange(0.0, 100.0, 0.5))
    monkeypatch.setattr("muflow.progress.time.perf_counter", lambda: float(next(clock)))
    stream = io.StringIO()
    progress = FitProgress(stream, every=2.0, delay=2.0)  # starts at t = 0
    for it in range(1, 21):  # t = 0.5, 1.0, ..., 10.0: one clock read per call
        progress.callback(it, None, np.array([-1.5, -2.5]))
    lines = stream.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["2.0", "4.0", "6.0", "8.0", "10.0"]
    assert "iteration      4  objective -1.5, -2.5" in lines[0]


def test_the_working_set_solver_reports_gap_rows_and_cache_hits():
    X, y = a8a(1500)
    y = np.where(y > 0, 1.0, -1.0)
    kernel = Kernel("rbf", gamma=0.05)
    problem = DualProblem(KernelRows(X, kernel, dtype=np.float64), y[:, None], upper=1.0,
                          linear=-1.0, equality=True)
    heard = []
    solution = solve_working_set(problem, tol=1e-3, cache_mb=2, q=64,
                                 progress=lambda **fields: heard.append(fields))
    assert [h["iteration"] for h in heard] == list(range(1, solution.n_iter + 1))
    rows = [h["rows_computed"] for h in heard]
    assert rows == sorted(rows) and rows[-1] == solution.timings["rows_fetched"]
    assert heard[-1]["cache_hits"] == solution.timings["cache_hits"] > 0
    assert heard[-1]["rows_requested"] == solution.timings["rows_requested"]
    assert heard[0]["gap"] > heard[-1]["gap"] and all(h["n"] == 1500 for h in heard)
    assert all(0 < h["active"] <= 1500 for h in heard)

    stream = io.StringIO()
    solve_working_set(problem, tol=1e-3, cache_mb=2, q=64,
                      progress=FitProgress(stream, every=0, delay=0))
    first = stream.getvalue().splitlines()[0]
    for part in ("outer iteration      1", "KKT gap", "rows computed", "cache hits", "active"):
        assert part in first


@pytest.fixture
def immediate_progress(monkeypatch):
    """Progress lines from the first iteration on (the estimator's default waits 2 s)."""
    monkeypatch.setattr(muflow.model, "FitProgress", functools.partial(FitProgress, every=0, delay=0))


def test_a_verbose_fit_on_rows_reports_and_the_model_counts_rows(immediate_progress, capsys):
    X, y = a8a(1200)
    model = muflow.SVC(gamma=0.05, gram="rows", solver="working_set", cache_size=1, verbose=True)
    model.fit(X, y)
    err = capsys.readouterr().err
    assert "KKT gap" in err and "rows computed" in err
    assert model.rows_computed_ == model.timings_["rows_fetched"] > 0
    assert muflow.SVC(gamma=0.05, gram="stored", solver="working_set").fit(X, y).rows_computed_ == 0


def test_a_verbose_fit_of_another_solver_reports_its_objective(immediate_progress, capsys):
    X, y = a8a(300)
    muflow.SVC(gamma=0.05, solver="m3", max_iter=50, verbose=True).fit(X, y)
    assert "objective" in capsys.readouterr().err


def test_muflow_fit_summarises_the_rows_it_computed(tmp_path, capsys):
    X, y = a8a(1200)
    data = tmp_path / "train.npz"
    np.savez(data, X=X.toarray() if hasattr(X, "toarray") else X, y=y)
    assert main(["fit", "--data", str(data), "--gamma", "0.05", "--gram", "rows",
                 "--cache-size", "1", "--out", str(tmp_path / "model")]) == 0
    out = capsys.readouterr().out
    assert "solver working_set" in out and "kernel rows computed on demand" in out
    assert "row-cache hit rate" in out


def test_a_verbose_fit_on_a_cluster_reports_its_round_trips(immediate_progress, capsys, monkeypatch):
    """On a cluster the row caches are the workers': the line reports the round trips and
    the active set instead (until session 39 it raised a TypeError on them, and so did
    ``muflow fit --scheduler``, verbose by default)."""
    import muflow.routing
    from tests.dask_cluster import local_client

    monkeypatch.setattr(muflow.routing, "ONE_TASK_MAX_SAMPLES", 0)  # iterate on the workers
    X, y = a8a(1200)
    with local_client(2) as client:
        model = muflow.SVC(gamma=0.05, client=client, verbose=True).fit(X, y)
    err = capsys.readouterr().err
    assert model.solver_ == "working_set" and "round trips" in err and "active" in err
    assert "rows computed" not in err
