"""One run directory, one writer (issue 33, item 5): a second ``muflow run`` on a held
``--out`` is refused in one line; a SIGKILLed holder leaves nothing stuck."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from muflow.cli import main
from muflow.runlock import LOCK_NAME, RunDirBusyError, hold_run_dir

REPO = Path(__file__).resolve().parents[1]

HOLDER = """
import sys, time
from muflow.runlock import hold_run_dir
with hold_run_dir(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path):
    """A real process holding ``tmp_path/run`` with the lock `muflow run` takes; killed
    with SIGKILL by the test or at teardown."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE,
                            text=True, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.stdout.readline() == "held\n"
    yield run, proc
    proc.kill()
    proc.wait()


def test_a_second_run_on_a_held_out_is_refused_in_one_line(holder, tmp_path, capsys):
    run, proc = holder
    code = main(["run", "--out", str(run)])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"muflow run: error: {run} is in use by another `muflow run` (pid {proc.pid}); "
                   "wait for it to finish, or choose another --out\n")
    code = main(["run", "--out", str(run), "--resume"])  # nor resumed while it runs
    assert code == 2 and "is in use by another `muflow run`" in capsys.readouterr().err
    assert sorted(os.listdir(run)) == [LOCK_NAME]  # the refused run wrote nothing


def test_a_sigkilled_holder_leaves_the_directory_free(holder, capsys):
    run, proc = holder
    with pytest.raises(RunDirBusyError):
        with hold_run_dir(run):
            pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with hold_run_dir(run) as lock:  # the OS released the killed process's flock
        assert lock.read_text() == f"{os.getpid()}\n"
    # the command gets past the lock to its next check: no run to resume in a directory
    # that holds only the lock file
    code = main(["run", "--out", str(run), "--resume"])
    assert code == 2
    assert capsys.readouterr().err == (f"muflow run: error: --out {str(run)!r} holds no muflow run "
                                       "to resume (no config.json); run without --resume to start "
                                       "it from the beginning\n")


def test_the_lock_file_alone_does_not_make_a_directory_a_run(tmp_path):
    from argparse import Namespace

    from muflow.commands.run import _check_run_dir
    from muflow.config import default_config

    run = tmp_path / "run"
    with hold_run_dir(run):
        pass
    args = Namespace(resume=False, out=str(run))
    _check_run_dir(args, run, default_config())  # only the lock file: a new run may start
    (run / "stray.txt").write_text("x")
    with pytest.raises(Exception, match="exists and is not empty; add --resume"):
        _check_run_dir(args, run, default_config())


def test_a_run_of_another_configuration_is_not_told_to_resume(tmp_path, capsys):
    from muflow.config import default_config
    from muflow.pipeline import start_run

    run = tmp_path / "run"
    start_run(default_config().with_overrides(sweep={"folds": 4}), run)
    for extra in ([], ["--resume"]):
        assert main(["run", "--out", str(run), *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds a run of another configuration" in err, err
        assert "add --resume" not in err
