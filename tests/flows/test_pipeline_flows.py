"""The Prefect flows of muflow/flows/pipeline.py under one prefect_test_harness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muflow.exceptions import MuflowInputError
from muflow.pipeline import stage_log


def _mtimes(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*")) if p.is_file()}


def test_pipeline_writes_report_results_plots_model_and_artifacts(tmp_path, small_config, scheduler_address):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from muflow.flows.pipeline import pipeline

    state = pipeline(config=small_config, out_dir=str(tmp_path / "run"), scheduler=scheduler_address,
                     return_state=True)
    assert state.is_completed()
    result = state.result()
    run = Path(result["run_dir"])
    report = (run / "report.md").read_text()
    for link in ("sweep/results.csv", "model/", "metrics.json", "sweep/convergence.png", "objective.png"):
        assert f"({link})" in report, link
        assert (run / link).exists(), link
    assert (run / "model" / "model.json").is_file()
    assert [s for s, _ in stage_log(run)] == ["data", "gram", "sweep", "refit", "evaluate", "report"]
    assert dict(result["summary"])["configurations"].startswith("4 ")
    gram = json.loads((run / "gram.json").read_text())
    assert len(gram["stores"]) == 2 and all(s["computed"] == s["tiles"] for s in gram["stores"])

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    by_key = {a.key: a for a in artifacts}
    assert "| kernel |" in by_key["muflow-results"].data
    assert "test accuracy" in by_key["muflow-best"].data
    assert any(k.startswith("muflow-plot-heatmap") for k in by_key)
    assert "report.md" in by_key["muflow-report"].data  # a link artifact (stored as Markdown)


def test_rerun_after_a_failed_sweep_recomputes_no_gram_and_no_finished_setting(
        tmp_path, small_config, scheduler_address, monkeypatch):
    """The sweep stage fails after its first kernel setting, and its retry fails at once;
    the flow run fails. Rerunning it on the same run directory completes: the data and
    Gram stages are reused (Gram store files untouched), and the sweep resumes the finished
    kernel setting and solves only the other one."""
    from muflow import selection
    from muflow.flows.pipeline import pipeline

    real = selection.run_sweep
    attempts = []

    def failing_sweep(*args, **kwargs):
        attempts.append(1)
        if len(attempts) > 1:
            raise OSError("injected failure: storage unavailable")

        def fail_after_first(setting, rows):
            raise RuntimeError(f"injected failure after {setting}")

        return real(*args, on_kernel_done=fail_after_first, **kwargs)

    run = tmp_path / "run"
    monkeypatch.setattr(selection, "run_sweep", failing_sweep)
    state = pipeline(config=small_config, out_dir=str(run), scheduler=scheduler_address, return_state=True)
    assert state.is_failed()
    assert len(attempts) == 2  # the task's own retry met the same failure
    assert not (run / "sweep-summary.json").exists() and not (run / "report.md").exists()
    assert len(list((run / "sweep" / "kernels").iterdir())) == 1  # the finished setting
    gram_files = _mtimes(run / "gram")
    first_log = stage_log(run)

    monkeypatch.setattr(selection, "run_sweep", real)
    state = pipeline(config=small_config, out_dir=str(run), scheduler=scheduler_address, return_state=True)
    assert state.is_completed()
    rerun = stage_log(run)[len(first_log):]
    assert rerun[:3] == [("data", "reused"), ("gram", "reused"), ("sweep", "computed")]
    counts = json.loads((run / "sweep-summary.json").read_text())["counts"]
    assert counts["kernels_resumed"] == 1 and counts["kernels_solved"] == 1
    assert _mtimes(run / "gram") == gram_files  # no Gram store rewritten
    assert (run / "report.md").is_file()


def test_gram_flow_reuses_the_cache_of_an_earlier_run(tmp_path, small_config, scheduler_address):
    from muflow.flows.pipeline import gram

    config = dict(small_config, gram={"cache_dir": str(tmp_path / "cache")})
    first = gram(config=config, out_dir=str(tmp_path / "a"), scheduler=scheduler_address)
    second = gram(config=config, out_dir=str(tmp_path / "b"), scheduler=scheduler_address)
    assert [s["computed"] for s in first["stores"]] == [s["tiles"] for s in first["stores"]]
    assert [s["computed"] for s in second["stores"]] == [0, 0]
    assert [s["store"] for s in first["stores"]] == [s["store"] for s in second["stores"]]


def test_train_flow_fits_given_parameters_without_a_sweep(tmp_path):
    from muflow.flows.pipeline import train

    result = train(out_dir=str(tmp_path / "t"), params={"kernel": "poly", "degree": 2, "C": 1.0,
                                                        "gamma": 0.01, "coef0": 1.0})
    assert result["metrics"]["accuracy"] > 0.9
    report = Path(result["report"]).read_text()
    assert "kernel=poly" in report and "Sweep results" not in report


def test_train_flow_refuses_a_run_directory_of_other_params(tmp_path):
    """A second train into the same out_dir with other params fits nothing and returns
    nothing of the first: it is refused naming both params; the same params reuse it."""
    from muflow.flows.pipeline import train

    run = tmp_path / "t"
    first = train(out_dir=str(run), params={"kernel": "linear", "C": 0.001})
    with pytest.raises(MuflowInputError, match=r"holds a model trained with params \{'kernel': "
                                               r"'linear', 'C': 0.001\}, not a model trained with "
                                               r"params \{'kernel': 'rbf'.*choose a new directory"):
        train(out_dir=str(run), params={"kernel": "rbf", "C": 10.0, "gamma": 0.05})
    assert json.loads((run / "refit.json").read_text())["params"] == {"kernel": "linear", "C": 0.001}
    again = train(out_dir=str(run), params={"kernel": "linear", "C": 0.001})
    assert again["metrics"] == first["metrics"] and stage_log(run)[-3][1] == "reused"


def test_train_flow_takes_every_svc_keyword_and_refuses_bad_params_before_writing(tmp_path):
    """params are SVC keywords, solver, intercept, tol and max_iter among them (the
    configuration's [sweep] values are only their defaults: they raised "got multiple values
    for keyword argument 'solver'"). Params SVC refuses (an unknown keyword, C = -1) are
    refused before anything is written, and not retried: the directory they left recorded
    them, and the corrected params were refused there as "a model trained with params
    {'kernel': 'rbf', 'C': -1}", which had fitted nothing."""
    from muflow.flows.pipeline import train

    run = tmp_path / "t"
    with pytest.raises(MuflowInputError, match=r"^train params: C must be a positive number"):
        train(out_dir=str(run), params={"kernel": "rbf", "C": -1})
    with pytest.raises(MuflowInputError, match=r"^train params: 'gama' is no SVC keyword; SVC "
                                               r"takes kernel, C, gamma"):
        train(out_dir=str(run), params={"kernel": "rbf", "gama": 0.1})
    assert not (run / "config.json").exists()
    result = train(out_dir=str(run), params={"kernel": "rbf", "C": 1.0, "solver": "cd",
                                             "intercept": "none", "tol": 1e-2})
    refit = json.loads((run / "refit.json").read_text())
    assert (refit["solver"], refit["tol"]) == ("cd", 1e-2) and result["metrics"]["accuracy"] > 0.9


def test_a_flow_run_on_an_out_dir_held_by_another_run_is_refused(tmp_path):
    """Two runs on one out_dir (two deployment runs given the same out_dir, a flow run
    beside `muflow run`) raced on its config.json, stages.log and outputs: a flow run holds
    the lock `muflow run` holds, and the second is refused naming the first's pid, having
    written nothing. The run command, which holds the lock, runs its own flow in it."""
    import fcntl
    import os
    import re

    from muflow.flows.pipeline import train
    from muflow.runlock import LOCK_NAME, RunDirBusyError, hold_run_dir

    run = tmp_path / "t"
    run.mkdir()
    fd = os.open(run / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # another holder's flock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, b"4242\n", 0)
        with pytest.raises(RunDirBusyError, match="^" + re.escape(
                f"{run} is in use by another run (`muflow run` or a flow run) (pid 4242); "
                "wait for it to finish, or choose another out_dir")):
            train(out_dir=str(run))
    finally:
        os.close(fd)
    assert sorted(os.listdir(run)) == [LOCK_NAME]
    with hold_run_dir(run):  # the run command holds it and calls the flow
        assert train(out_dir=str(run))["metrics"]["accuracy"] > 0.9


def test_a_relative_out_dir_is_made_absolute_before_anything_is_recorded(tmp_path, monkeypatch):
    from muflow.flows.pipeline import train

    monkeypatch.chdir(tmp_path)
    result = train(out_dir="rel", params={"kernel": "linear", "C": 0.001})
    assert result["run_dir"] == str(tmp_path / "rel") and result["report"] == str(tmp_path / "rel" / "report.md")
    with pytest.raises(MuflowInputError, match=r"^scheduler must be an address such as tcp://host:8786"):
        from muflow.flows.pipeline import gram

        gram(out_dir="bad", scheduler="127.0.0.1:8786")
    assert not (tmp_path / "bad").exists()


def test_sweep_flow_publishes_the_results_table_and_the_best_configuration(
        tmp_path, small_config, scheduler_address):
    """The sweep flow's best artifact holds the sweep's best configuration (it had none:
    the configuration was read from refit.json alone, which the sweep flow never writes)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    from muflow.flows.pipeline import sweep

    state = sweep(config=small_config, out_dir=str(tmp_path / "s"), scheduler=scheduler_address,
                  return_state=True)
    result = state.result()
    assert result["n_configurations"] == 4 and Path(result["paths"]["results"]).is_file()
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    by_key = {a.key: a for a in artifacts}
    # the sweep flow's own keys (they were doubled: muflow-sweep-sweep-results)
    assert "| kernel |" in by_key["muflow-sweep-results"].data
    assert not any("sweep-sweep" in key for key in by_key)
    best = by_key["muflow-sweep-best"].data
    b = result["best"]
    assert f"| best configuration | kernel=rbf, C={b['C']}, gamma={b['gamma']} |" in best


def test_a_bad_configuration_fails_the_flow_naming_the_key(tmp_path):
    from muflow.flows.pipeline import pipeline

    with pytest.raises(MuflowInputError, match=r"sweep\.folds"):
        pipeline(config={"sweep": {"folds": 1}}, out_dir=str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()


def _tiny_class_csv(path: Path) -> Path:
    """A CSV whose class 2 has one sample: too few for 3-fold cross-validation."""
    import numpy as np

    rng = np.random.default_rng(0)
    y = np.array([0] * 20 + [1] * 20 + [2])
    np.savetxt(path, np.column_stack([rng.normal(size=(len(y), 3)), y]), delimiter=",",
               header="a,b,c,label", comments="")
    return path


def test_an_input_error_in_a_task_is_not_retried(tmp_path):
    """prepare-data (retried for storage errors) fails once on data it refuses: one run of
    the task, not three identical failures."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from muflow.flows.pipeline import pipeline

    config = {"data": {"path": str(_tiny_class_csv(tmp_path / "tiny.csv")), "label_column": "label"}}
    state = pipeline(config=config, out_dir=str(tmp_path / "run"), return_state=True)
    assert state.is_failed()
    with pytest.raises(MuflowInputError, match="has 1 samples; stratified 3-fold"):
        state.result()
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[state.state_details.flow_run_id])))
    prepare = [r for r in runs if r.name.startswith("prepare-data")]
    assert len(prepare) == 1 and prepare[0].run_count == 1 and prepare[0].state.is_failed()


def test_the_retry_condition_retries_all_but_input_errors():
    from prefect.states import Failed

    from muflow.exceptions import DataFileError
    from muflow.flows.tasks import retry_unless_input_error

    for exc, retried in ((OSError("storage unavailable"), True), (RuntimeError("x"), True),
                         (MuflowInputError("bad"), False), (DataFileError("bad file"), False)):
        assert retry_unless_input_error(None, None, Failed(data=exc)) is retried, exc


def test_a_warning_inside_a_flow_is_one_line_on_stderr(capfd):
    """The command line's warning line reaches stderr from a task of a flow that logs its
    prints (the run command's flows), not Prefect's log on stdout: the run's warnings (a
    test class the model never saw, a sweep cut at its time limit) are the command's."""
    import warnings

    from prefect import flow, task

    from muflow.cli import _warning_line

    @task
    def warn():
        warnings.warn("the test set holds classes the training split does not", UserWarning)

    @flow(log_prints=True)
    def warns():
        warn()

    shown = warnings.showwarning
    warnings.showwarning = _warning_line("run")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warns()
    finally:
        warnings.showwarning = shown
    out, err = capfd.readouterr()
    line = "muflow run: warning: the test set holds classes the training split does not (UserWarning)"
    assert line in err.splitlines()  # as written, not a log record of Prefect's (stdout in `run`)
