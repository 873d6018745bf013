"""``python -m muflow run`` in a subprocess: the embedded default, and every refusal."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from muflow.exceptions import MuflowInputError
from tests.prefect_home import prefect_home

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def muflow_env(cwd, *, first_run: bool = False) -> dict:
    """The environment of a run: no Prefect setting of this shell, its own PREFECT_HOME,
    whose database Prefect has already created (:mod:`tests.prefect_home`) unless
    ``first_run``: then an empty home, as on a person's first run."""
    home = Path(cwd) / ".prefect"
    if not first_run:
        prefect_home(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_HOME=str(home), COLUMNS="120")
    return env


def muflow(*args, cwd, env_extra=None, timeout=300, first_run=False):
    env = muflow_env(cwd, first_run=first_run)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "muflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_default_run_prints_the_summary_and_writes_the_report(tmp_path):
    out = tmp_path / "run"
    res = muflow("run", "--out", str(out), cwd=tmp_path, first_run=True)
    assert res.returncode == 0, res.stderr[-4000:]
    for row in ("bundled breast cancer (683 x 9", "configurations", "best CV accuracy",
                "best configuration", "test accuracy", "wall time (s)"):
        assert row in res.stdout, row
    assert f"report: {out / 'report.md'}" in res.stdout.replace("\n", "")
    # distributed's INFO lines go to run.log, not the console (87 of them did, session 39)
    assert "distributed." not in res.stdout + res.stderr
    assert "distributed." in (out / "run.log").read_text()
    report = (out / "report.md").read_text()
    for link in ("sweep/results.csv", "model/", "sweep/convergence.png", "sweep/heatmap_rbf.png",
                 "sweep/heatmap_poly.png", "objective.png"):
        assert f"({link})" in report and (out / link).exists(), link
    assert "| rbf |" in report and "| poly |" in report  # the results table, both kernels
    assert (out / "model" / "model.json").is_file()
    assert not list(out.rglob(".*tmp*"))  # no temporary leftovers


def _config(tmp_path, text) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, key", [
    ("[sweep]\nfoldz = 3\n", "sweep.foldz"),
    ("[sweep]\nfolds = 1\n", "sweep.folds"),
    ("[grid]\nC = [-1.0]\n", "grid.C[0]"),
    ("[grid]\nkernels = [{ kernel = \"rbf\", degree = [2] }]\n", "grid.kernels[0].degree"),
    ("[cluster]\nscheduler = \"localhost\"\n", "cluster.scheduler"),
    # found by the sweep stage, after the data and Gram stages wrote the run directory
    ("[sweep]\nsolver = \"nope\"\n", "sweep.solver"),
    ("[sweep]\nsolver = \"munk\"\n[grid]\nC = [1]\n"
     "kernels = [{kernel=\"sigmoid\", gamma=0.1, coef0=-1.0}]\n", "sweep.solver"),
])
def test_a_bad_config_exits_2_naming_the_key_and_writes_nothing(tmp_path, text, key):
    out = tmp_path / "run"
    res = muflow("run", str(_config(tmp_path, text)), "--out", str(out), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert key in res.stderr and "Traceback" not in res.stderr  # quoted or not
    assert not out.exists()


@pytest.mark.slow
def test_a_relative_out_runs_on_a_scheduler_whose_workers_have_another_working_directory(
        tmp_path, monkeypatch):
    """`run --scheduler ADDRESS --out relout` from one directory, the scheduler's workers
    started in another: the workers are sent the absolute run directory, so the Gram store
    they build is the one the stages read (they wrote relout/gram into their own working
    directory, and the run failed: "relout/gram/gram-....zarr does not exist")."""
    import json

    from muflow.dask.cluster import local_cluster

    workers_cwd, here = tmp_path / "workers", tmp_path / "here"
    workers_cwd.mkdir(), here.mkdir()
    config = _config(here, '[grid]\nC = [1.0]\nkernels = [{ kernel = "rbf", gamma = [0.1] }]\n'
                           '[sweep]\nfolds = 2\n')
    monkeypatch.chdir(workers_cwd)  # the worker processes start here
    with local_cluster(n_workers=1) as cluster:
        monkeypatch.chdir(REPO)
        res = muflow("run", config.name, "--scheduler", cluster.scheduler_address, "--out", "relout",
                     cwd=here)
    assert res.returncode == 0, res.stderr[-3000:]
    out = here / "relout"
    assert f"run directory {out}" in res.stdout
    gram = json.loads((out / "gram.json").read_text())
    assert gram["cache_dir"] == str(out / "gram") and len(gram["stores"]) == 1
    assert Path(gram["stores"][0]["store"]).parent == out / "gram"
    assert not list(workers_cwd.iterdir())  # nothing written where the workers run


def test_a_scheduler_address_without_its_protocol_is_refused_naming_the_option(tmp_path):
    res = muflow("run", "--scheduler", "127.0.0.1:8786", "--out", "run", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.startswith("muflow run: error: --scheduler must be an address such as "
                                 "tcp://host:8786, got '127.0.0.1:8786' (tcp://127.0.0.1:8786?)")
    assert not (tmp_path / "run").exists()


def test_a_missing_data_file_exits_2(tmp_path):
    cfg = _config(tmp_path, "[data]\npath = \"no-such.csv\"\n")
    res = muflow("run", str(cfg), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert res.returncode == 2 and "data.path" in res.stderr and "no-such.csv" in res.stderr
    assert not (tmp_path / "run").exists()


def test_an_unreachable_scheduler_exits_1_with_a_clear_message(tmp_path):
    cfg = _config(tmp_path, "[cluster]\ntimeout = 2.0\n")
    address = f"tcp://127.0.0.1:{_free_port()}"
    res = muflow("run", str(cfg), "--scheduler", address, "--out", str(tmp_path / "run"),
                 cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert f"no Dask scheduler answered at {address}" in res.stderr and "dask scheduler" in res.stderr
    assert not (tmp_path / "run").exists()


def test_a_prefect_api_that_does_not_answer_exits_1_and_writes_nothing(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/api"
    res = muflow("run", "--out", str(tmp_path / "run"), cwd=tmp_path,
                 env_extra={"PREFECT_API_URL": url}, timeout=90)
    assert res.returncode == 1, res.stderr
    assert f"the Prefect API at {url} does not answer" in res.stderr and "prefect server start" in res.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "muflow-runs").exists()


def test_a_non_empty_out_dir_needs_resume(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "something").write_text("x")
    res = muflow("run", "--out", str(out), cwd=tmp_path)
    assert res.returncode == 2 and "--resume" in res.stderr
    res = muflow("run", "--resume", "--out", str(tmp_path / "nothing"), cwd=tmp_path)
    assert res.returncode == 2 and "no muflow run to resume" in res.stderr


def test_an_out_nothing_can_be_written_in_is_refused_in_one_line(tmp_path):
    """It was a raw PermissionError, exit code 1."""
    from tests.read_only import read_only

    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        res = muflow("run", "--out", str(locked / "run"), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    err = res.stderr.strip()
    assert err.startswith(f"muflow run: error: cannot write in {locked} (") and "\n" not in err
    assert err.endswith("where the run directory must be written; choose another --out, or make "
                        "it writable")
    assert os.listdir(locked) == []


def _stopped_before_its_configuration(out: Path) -> Path:
    """What a run killed in its first seconds leaves: its lock and run.log, no config.json."""
    from muflow.runlock import hold_run_dir

    with hold_run_dir(out):
        (out / "run.log").write_text("2024-01-01 00:00:00 distributed.scheduler INFO ...\n")
    return out


def test_a_run_killed_before_writing_its_configuration_can_be_started_again(tmp_path):
    """A directory holding only the lock and run.log counts as empty for a new run, and
    --resume on it, with nothing to resume, says to run without --resume (the two
    refusals used to point at each other, and the directory had to be deleted by hand)."""
    from argparse import Namespace

    from muflow.commands.run import _check_run_dir
    from muflow.config import default_config

    cfg = default_config()
    out = _stopped_before_its_configuration(tmp_path / "run")
    _check_run_dir(Namespace(resume=False), out, cfg)  # not refused as "not empty"
    with pytest.raises(MuflowInputError, match="no muflow run to resume.*run without --resume"):
        _check_run_dir(Namespace(resume=True), out, cfg)
    # anything else in it is someone's: refused both ways, without sending one to the other
    (out / "notes.txt").write_text("x")
    with pytest.raises(MuflowInputError, match="not empty"):
        _check_run_dir(Namespace(resume=False), out, cfg)
    with pytest.raises(MuflowInputError, match=r"no muflow run to resume \(no config.json\); check --out"):
        _check_run_dir(Namespace(resume=True), out, cfg)


def test_help_explains_the_options(tmp_path):
    res = muflow("run", "--help", cwd=tmp_path)
    assert res.returncode == 0
    for option in ("CONFIG.toml", "--scheduler", "--out", "--resume", "Exit codes"):
        assert option in res.stdout


def test_importing_muflow_does_not_import_prefect(tmp_path):
    # the command line's parser imports every command module; the run command and the
    # muflow.flows package import Prefect only when a flow is run
    code = ("import sys, muflow, muflow.config, muflow.pipeline, muflow.cli, muflow.flows; "
            "muflow.cli.build_parser(); print('prefect' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.stdout.strip() == "False", res.stderr


def test_a_run_resumes_on_another_scheduler_and_a_changed_key_is_named(tmp_path):
    """Where the work runs (cluster.scheduler, workers, timeout; data.timeout) is no part of
    what a run computes: `run --out DIR --resume --scheduler ADDR` continues a run started
    on a LocalCluster or on a scheduler that came back at another address (it was refused
    as "a run of another configuration"). A change that does matter is refused naming the
    key and both values (it named none)."""
    from argparse import Namespace

    from muflow.commands.run import _check_run_dir
    from muflow.config import default_config
    from muflow.run_directory import log_stage, start_run

    cfg = default_config()
    out = tmp_path / "run"
    start_run(cfg, out)
    log_stage(out, "data", "computed", 0.1)
    elsewhere = cfg.with_overrides(cluster={"scheduler": "tcp://10.0.0.2:8786", "workers": 4,
                                            "timeout": 30.0}, data={"timeout": 60.0})
    _check_run_dir(Namespace(resume=True), out, elsewhere)
    with pytest.raises(MuflowInputError, match=r"holds a run of another configuration \(grid.C "
                       r"is \[1.0\] here, \[0.1, 1.0, 10.0\] in its config.json\)"):
        _check_run_dir(Namespace(resume=True), out, cfg.with_overrides(grid={"C": [1.0]}))
