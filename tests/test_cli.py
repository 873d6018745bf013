"""The command line: fit and predict on every data format, exit codes, no partial output."""

import os
import subprocess
import sys

import numpy as np
import pytest

from muflow.cli import main

FEATURES = np.array([[0.0, 0.1], [0.2, 0.0], [0.1, 0.3], [2.0, 2.1], [2.2, 1.9], [1.9, 2.3]])
LABELS = np.array([0, 0, 0, 1, 1, 1])


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "train.csv"
    lines = ["x1,x2,target"] + [f"{a},{b},{c}" for (a, b), c in zip(FEATURES, LABELS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fit_then_predict_csv_with_named_label_column(csv_file, tmp_path, capsys):
    out = tmp_path / "model"
    assert main(["fit", "--data", str(csv_file), "--label-column", "target", "--kernel", "rbf",
                 "--gamma", "0.5", "--C", "1", "--solver", "munk", "--out", str(out)]) == 0
    assert (out / "model.json").exists()
    assert main(["predict", "--model", str(out), "--data", str(csv_file), "--label-column", "target"]) == 0
    printed = capsys.readouterr().out.split()
    assert [int(p) for p in printed[-6:]] == list(LABELS)


def test_fit_svmlight_and_npz(tmp_path):
    svm = tmp_path / "train.svm"
    svm.write_text("".join(f"{2 * c - 1} 1:{a} 2:{b}\n" for (a, b), c in zip(FEATURES, LABELS)))
    npz = tmp_path / "train.npz"
    np.savez(npz, X=FEATURES, y=LABELS)
    for data in (svm, npz):
        assert main(["fit", "--data", str(data), "--out", str(tmp_path / f"m-{data.suffix[1:]}")]) == 0
    pred_csv = tmp_path / "pred.csv"
    assert main(["predict", "--model", str(tmp_path / "m-npz"), "--data", str(npz), "--out", str(pred_csv)]) == 0
    assert pred_csv.read_text().splitlines()[0].startswith("prediction,decision_0")


def _run(*args):
    return subprocess.run([sys.executable, "-m", "muflow", *args], capture_output=True, text=True, timeout=300)


def _run_in_process(args, capsys):
    try:
        code = main(args)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    return code, capsys.readouterr().err


def test_bad_input_exits_2_with_one_line_and_leaves_nothing(tmp_path, csv_file, capsys):
    out = tmp_path / "model"
    bad = tmp_path / "bad.csv"
    bad.write_text("x1,x2,y\n1,2,0\n3,oops,1\n")
    signed = tmp_path / "signed.csv"
    signed.write_text("x1,x2,y\n-1,2,0\n1,-2,1\n-2,1,0\n2,-1,1\n")
    continuous = tmp_path / "continuous.csv"
    continuous.write_text("x1,x2,y\n1,2,0.31\n3,4,-0.997\n5,6,1.7\n7,8,0.05\n")
    cases = [
        (["fit", "--data", str(tmp_path / "missing.csv"), "--out", str(out)], "does not exist"),
        (["fit", "--data", str(bad), "--out", str(out)], "line 3: 'oops' is not a number"),
        (["fit", "--data", str(csv_file), "--C", "-1", "--out", str(out)], "--C must be positive"),
        (["fit", "--data", str(csv_file), "--solver", "nope", "--out", str(out)], "solver must be one of"),
        (["fit", "--data", str(signed), "--kernel", "linear", "--solver", "munk", "--out", str(out)],
         "non-negative"),
        (["fit", "--data", str(continuous), "--out", str(out)],
         f"the labels (the last column of {continuous}) are continuous numbers, not classes; "
         "choose the column of the classes with --label-column (a name or a 0-based index)"),
        (["fit", "--out", str(out)], "required"),
    ]
    for args, message in cases:
        code, stderr = _run_in_process(args, capsys)
        assert code == 2, (args, stderr)
        assert message in stderr
        assert len(stderr.strip().splitlines()) == 1
        assert not out.exists()
    # the real process: exit status 2, one line, no traceback
    result = _run(*cases[1][0])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".model")]


def test_help_explains_every_command():
    result = _run("--help")
    assert result.returncode == 0
    for command in ("run", "fit", "predict"):
        assert command in result.stdout
    fit_help = _run("fit", "--help").stdout
    for option in ("--data", "--label-column", "--kernel", "--gamma", "--C", "--solver", "--out"):
        assert option in fit_help


def test_fit_killed_midway_resumes_to_the_same_solution(tmp_path, capsys):
    import os
    import signal
    import time

    import muflow
    from muflow.datasets import data_path

    data = str(data_path("breast_cancer.csv"))
    out = tmp_path / "model"
    args = ["fit", "--data", data, "--label-column", "class", "--solver", "munk", "--tol", "1e-4",
            "--max-iter", "200000", "--checkpoint-every", "25", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "muflow", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    checkpoint = tmp_path / "model.checkpoint" / "checkpoint.npz"
    deadline = time.time() + 120
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if not checkpoint.exists():
        pytest.skip("the fit finished before its first checkpoint; nothing to resume")
    assert not out.exists()
    # a plain rerun refuses to overwrite the interrupted state; --resume continues it
    from muflow.checkpoint import load_checkpoint

    held = load_checkpoint(checkpoint.parent).iteration
    assert main(args) == 2
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    # the summary counts the checkpoint's iterations too (it printed this call's alone)
    assert f"iterations after the checkpoint's {held} (" in capsys.readouterr().out
    assert not checkpoint.parent.exists()
    resumed = muflow.load(out)
    X, y = muflow.datasets.load_breast_cancer()
    fresh = muflow.SVC(solver="munk", tol=1e-4, max_iter=200000).fit(X, y)
    assert resumed.objective_[0] == pytest.approx(fresh.objective_[0], rel=1e-4)
    pd = pytest.importorskip("pandas")
    named = pd.DataFrame(X, columns=resumed.feature_names_in_)  # the file's named columns
    assert np.mean(resumed.predict(named) == fresh.predict(X)) >= 0.99


def test_fit_resume_summary_counts_each_iteration_once(tmp_path, capsys):
    """A fit resumed at the checkpoint's 30 passes with --max-iter 50 runs the 20 left: its
    line says so, and its "in all" is the model's n_iter_ (it said "50 iterations after the
    checkpoint's 30 (80 in all)", adding the checkpoint's to a count that held them)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    import muflow

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0.0, 1.0, (40, 3)), rng.normal(1.0, 1.0, (40, 3))])
    y = np.repeat([0, 1], 40)
    data = tmp_path / "train.npz"
    np.savez(data, X=X, y=y)
    out = tmp_path / "model"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        muflow.SVC(solver="munk", gamma=0.5, tol=1e-12, max_iter=30).fit(
            X, y, checkpoint_dir=tmp_path / "model.checkpoint", checkpoint_every=10)
    capsys.readouterr()
    assert main(["fit", "--data", str(data), "--solver", "munk", "--gamma", "0.5", "--tol", "1e-12",
                 "--max-iter", "50", "--checkpoint-every", "10", "--quiet", "--resume",
                 "--out", str(out)]) == 0
    assert muflow.load(out).n_iter_.max() == 50
    assert "20 iterations after the checkpoint's 30 (50 in all)" in capsys.readouterr().out


def test_fit_with_rows_on_demand(csv_file, tmp_path, capsys):
    out = tmp_path / "model"
    assert main(["fit", "--data", str(csv_file), "--label-column", "target", "--gamma", "0.5",
                 "--solver", "smo", "--gram", "rows", "--cache-size", "1", "--out", str(out)]) == 0
    assert "training accuracy 1.0000" in capsys.readouterr().out


def test_fit_prints_iterations_in_the_unit_of_n_iter(csv_file, tmp_path, capsys):
    """SMO: n_iter_ counts libsvm's pair steps, and the line says so (not the solver's sweeps)."""
    import muflow

    out = tmp_path / "model"
    assert main(["fit", "--data", str(csv_file), "--label-column", "target", "--kernel", "rbf",
                 "--gamma", "0.5", "--solver", "smo", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    steps = int(muflow.load(out).n_iter_.max())
    assert f"solver smo: {steps} iterations (pair step)" in printed


def _fit_leaving_a_checkpoint(error, content: bytes):
    """A stand-in for ``SVC.fit`` that writes a checkpoint file holding ``content`` into its
    checkpoint directory and raises ``error``, as a fit stopped midway does."""
    from muflow.checkpoint import FILENAME

    def fit(self, X, y, checkpoint_dir=None, **kwargs):
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        (checkpoint_dir / FILENAME).write_bytes(content)
        raise error

    return fit


def test_fit_refuses_an_out_that_is_not_a_model_before_fitting(csv_file, tmp_path, capsys,
                                                               monkeypatch):
    """``fit --out`` over a directory of other files is refused before any fit (it was
    wiped after one)."""
    import muflow

    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    monkeypatch.setattr(muflow.SVC, "fit", lambda *a, **k: pytest.fail("fitted first"))
    assert main(["fit", "--data", str(csv_file), "--out", str(folder), "--quiet"]) == 2
    assert "holds other things (notes.txt)" in capsys.readouterr().err
    assert (folder / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command, out", [("fit", "locked/model"), ("fit", "locked/new/model"),
                                          ("predict", "locked/predictions.csv"),
                                          ("sweep", "locked/sweep"), ("sweep", "locked")])
def test_an_out_nothing_can_be_written_in_is_refused_in_one_line_before_the_work(
        csv_file, tmp_path, capsys, monkeypatch, command, out):
    """It was a raw PermissionError naming a temporary file (predict: '.predictions.csv.x1y2
    .tmp'), exit code 1, after the fit or the predictions were computed."""
    import muflow
    from tests.read_only import read_only

    model = tmp_path / "m"
    assert main(["fit", "--data", str(csv_file), "--out", str(model), "--quiet"]) == 0
    capsys.readouterr()
    (tmp_path / "locked").mkdir()
    for method in ("fit", "predict"):
        monkeypatch.setattr(muflow.SVC, method, lambda *a, **k: pytest.fail("computed first"))
    args = {"fit": ["--data", str(csv_file), "--quiet"],
            "predict": ["--model", str(model), "--data", str(csv_file)],
            "sweep": ["--data", str(csv_file), "--folds", "2", "--no-progress"]}[command]
    with read_only(tmp_path / "locked"):
        assert main([command, *args, "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"muflow {command}: error: cannot write in {tmp_path / 'locked'} (")
    assert err.endswith("choose another --out, or make it writable") and "\n" not in err
    assert os.listdir(tmp_path / "locked") == []


@pytest.mark.parametrize("command", ["fit", "predict", "sweep"])
def test_an_out_below_a_file_is_named_in_one_line(csv_file, tmp_path, capsys, command):
    """It was a raw NotADirectoryError, exit code 1."""
    model = tmp_path / "m"
    assert main(["fit", "--data", str(csv_file), "--out", str(model), "--quiet"]) == 0
    capsys.readouterr()
    args = {"fit": ["--data", str(csv_file), "--quiet"],
            "predict": ["--model", str(model), "--data", str(csv_file)],
            "sweep": ["--data", str(csv_file), "--folds", "2", "--no-progress"]}[command]
    out = csv_file / "sub" / "out"
    assert main([command, *args, "--out", str(out)]) == 2
    assert (f"--out {out}: {csv_file} is a file, not a directory; choose another --out"
            in capsys.readouterr().err)


def test_an_interrupted_fit_says_how_to_continue(csv_file, tmp_path, capsys, monkeypatch):
    """SIGINT mid-fit: the line names the kept checkpoint and the command with --resume."""
    import muflow

    monkeypatch.setattr(muflow.SVC, "fit", _fit_leaving_a_checkpoint(KeyboardInterrupt, b""))
    out = tmp_path / "model"
    assert main(["fit", "--data", str(csv_file), "--out", str(out), "--quiet"]) == 130
    err = capsys.readouterr().err
    assert f"its last checkpoint is kept in {out}.checkpoint" in err and "--resume`" in err


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_gram_refuses_workers_below_one(csv_file, tmp_path, capsys, workers):
    assert main(["gram", "--data", str(csv_file), "--out", str(tmp_path / "K.zarr"),
                 "--workers", workers]) == 2
    assert "--workers must be a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "K.zarr").exists()


def test_predict_reads_files_without_labels(csv_file, tmp_path, capsys):
    """--no-labels: every column is a feature (CSV, Parquet, an npz of X alone), the same
    predictions as from the labelled file; without it, the message points to it."""
    pd = pytest.importorskip("pandas")
    model = tmp_path / "model"
    assert main(["fit", "--data", str(csv_file), "--gamma", "0.5", "--out", str(model),
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(csv_file)]) == 0
    labelled = capsys.readouterr().out.split()
    features = pd.DataFrame(FEATURES, columns=["x1", "x2"])
    files = [tmp_path / "f.csv", tmp_path / "f.parquet", tmp_path / "f.npz"]
    features.to_csv(files[0], index=False)
    features.to_parquet(files[1])
    np.savez(files[2], X=FEATURES)
    for path in files:
        assert main(["predict", "--model", str(model), "--data", str(path), "--no-labels"]) == 0
        assert capsys.readouterr().out.split() == labelled, path
    assert main(["predict", "--model", str(model), "--data", str(files[0])]) == 2
    assert "for a file without a label column, --no-labels" in capsys.readouterr().err


def test_a_warning_is_one_line_and_a_closed_pipe_ends_quietly(csv_file, tmp_path, capsys,
                                                              monkeypatch):
    """A warning prints as ``muflow fit: warning: ...`` (not Python's file and line of
    code); a reader that went away (``| head``) ends the command with 141 and no traceback
    or error line."""
    import muflow.commands.predict as predict

    assert main(["fit", "--data", str(csv_file), "--out", str(tmp_path / "m"), "--max-iter", "1",
                 "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "muflow fit: warning: " in err and "(ConvergenceWarning)" in err
    assert ".py:" not in err and len(err.strip().splitlines()) == 1

    def closed(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(predict, "run", closed)
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(csv_file)]) == 141
    assert capsys.readouterr().err == ""


def test_a_feature_column_taken_for_labels_and_a_binary_file_read_as_csv_are_named(
        csv_file, tmp_path, capsys):
    assert main(["fit", "--data", str(csv_file), "--label-column", "x1", "--out",
                 str(tmp_path / "m"), "--quiet"]) == 2
    assert "labels (column x1 of" in capsys.readouterr().err
    binary = tmp_path / "data.csv"
    binary.write_bytes(bytes(range(128, 256)) * 4)
    assert main(["fit", "--data", str(binary), "--out", str(tmp_path / "m"), "--quiet"]) == 2
    assert "not a text file, so not CSV" in capsys.readouterr().err


def test_predict_warns_of_labels_the_model_does_not_know_and_refuses_a_directory_out(
        csv_file, tmp_path, capsys):
    """Labels of another coding (-1/+1 against a model of 0/1) made a low accuracy without a
    word; an --out directory raised IsADirectoryError."""
    model = tmp_path / "m"
    assert main(["fit", "--data", str(csv_file), "--out", str(model), "--quiet"]) == 0
    other = tmp_path / "pm.csv"
    other.write_text("x1,x2,target\n" + "".join(f"{a},{b},{2 * c - 1}\n"
                                                for (a, b), c in zip(FEATURES, LABELS)))
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--data", str(other)]) == 0
    assert "labels -1 are none of the model's classes (0, 1)" in capsys.readouterr().err
    assert main(["predict", "--model", str(model), "--data", str(csv_file), "--out",
                 str(tmp_path)]) == 2
    assert "is a directory; give the CSV file to write" in capsys.readouterr().err


def test_predict_given_a_sweeps_or_a_runs_directory_names_the_model_inside(csv_file, tmp_path,
                                                                            capsys):
    """`--model runs/sweep` (the sweep's --out) said "'runs/sweep' is not a muflow model
    directory (no model.json)", and a --model that does not exist "(not a readable
    directory)"; neither said what to give."""
    sweep, run = tmp_path / "sweep", tmp_path / "run"
    assert main(["sweep", "--data", str(csv_file), "--gamma", "0.5", "--folds", "2", "--out",
                 str(sweep), "--no-progress"]) == 0
    assert main(["fit", "--data", str(csv_file), "--out", str(run / "model"), "--quiet"]) == 0
    (run / "stages.log").write_text("refit computed 0.1\n")  # as `muflow run` leaves it
    capsys.readouterr()
    for given, inner, what in ((sweep, "best_model", "a sweep's"), (run, "model", "a run's")):
        assert main(["predict", "--model", str(given), "--data", str(csv_file)]) == 2
        assert capsys.readouterr().err == (
            f"muflow predict: error: --model {given} is {what} directory, not a model; its "
            f"model is {given / inner}: give --model {given / inner}\n")
    missing = tmp_path / "no-such-model"
    assert main(["predict", "--model", str(missing), "--data", str(csv_file)]) == 2
    assert capsys.readouterr().err == (
        f"muflow predict: error: --model {missing} does not exist; give the directory that "
        "`fit --out` wrote (or a sweep's best_model/, a run's model/)\n")


def test_predict_reads_npz_labels_as_the_other_formats_do(tmp_path, capsys):
    """An npz file's labels 1.0 / -1.0 (as load_svmlight_file gives them) were classes of
    their own: a model fitted on them scored 0.0000 on a CSV of labels 1 / -1, and the
    reverse; they are read as the class 1 of a CSV file now."""
    y = np.where(LABELS > 0, 1.0, -1.0)
    np.savez(tmp_path / "train.npz", X=FEATURES, y=y)
    (tmp_path / "test.csv").write_text("x1,x2,target\n" + "".join(
        f"{a},{b},{int(c)}\n" for (a, b), c in zip(FEATURES, y)))
    for fit_on, predict_on in (("train.npz", "test.csv"), ("test.csv", "train.npz")):
        model = tmp_path / f"m-{fit_on}"
        assert main(["fit", "--data", str(tmp_path / fit_on), "--out", str(model), "--quiet"]) == 0
        capsys.readouterr()
        assert main(["predict", "--model", str(model), "--data", str(tmp_path / predict_on)]) == 0
        out, err = capsys.readouterr()
        assert "accuracy 1.0000 on 6 samples" in err and "none of the model's classes" not in err
        assert sorted(set(out.split())) == ["-1", "1"]


def test_predict_out_quotes_labels_holding_a_comma(tmp_path):
    import csv

    path = tmp_path / "train.csv"
    names = np.where(LABELS > 0, "mine, metal", "rock")
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["x1", "x2", "label"])
        writer.writerows([a, b, c] for (a, b), c in zip(FEATURES, names))
    assert main(["fit", "--data", str(path), "--out", str(tmp_path / "m"), "--quiet"]) == 0
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(path),
                 "--out", str(tmp_path / "p.csv")]) == 0
    with open(tmp_path / "p.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["prediction", "decision_0"] and [r[0] for r in rows[1:]] == list(names)


def test_an_svmlight_file_is_known_by_its_lines_and_not_told_no_labels(tmp_path, capsys):
    """libsvm's files have no suffix (a8a, a8a.t): they were read as CSV ('14 fields where
    the first row has 15'); a test file of one feature fewer was told to use --no-labels,
    which an svmlight file never needs."""
    lines = "".join(f"{2 * c - 1} 1:{a} 2:{b} 3:1\n" for (a, b), c in zip(FEATURES, LABELS))
    (tmp_path / "train").write_text(lines)
    (tmp_path / "test.t").write_text(lines.replace(" 3:1", ""))
    assert main(["fit", "--data", str(tmp_path / "train"), "--out", str(tmp_path / "m"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "test.t")]) == 2
    err = capsys.readouterr().err
    assert "--n-features 3" in err and "--no-labels" not in err
    assert main(["predict", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "test.t"),
                 "--n-features", "3"]) == 0


def test_an_option_is_named_as_the_command_line_spells_it(csv_file, tmp_path, capsys):
    """Errors from the estimator's checks name its parameter; on the command line they
    name the option ("--cache-size must be ...", not "cache_size must be ...")."""
    assert main(["fit", "--data", str(csv_file), "--out", str(tmp_path / "m"),
                 "--cache-size", "-1"]) == 2
    assert "error: --cache-size must be a positive number" in capsys.readouterr().err


@pytest.mark.parametrize("command, option, value, said", [
    ("fit", "--checkpoint-every", "0", "--checkpoint-every must be an integer >= 1, got 0"),
    ("fit", "--time-limit", "0", "--time-limit must be a positive number of seconds (or left "
                                 "out for no limit), got 0.0"),
    ("sweep", "--time-limit", "-1", "--time-limit must be a positive number of seconds (or left "
                                    "out for no limit), got -1.0")])
def test_a_bad_option_is_refused_in_the_command_lines_words(csv_file, tmp_path, capsys, command,
                                                            option, value, said):
    """They said "checkpoint interval must be >= 1 iteration" (no option named) and "(or
    None for no limit)", a value no option takes."""
    assert main([command, "--data", str(csv_file), "--out", str(tmp_path / "o"), option, value,
                 *(["--no-progress"] if command == "sweep" else ["--quiet"])]) == 2
    assert capsys.readouterr().err == f"muflow {command}: error: {said}\n"


def test_fit_out_names_a_directory_by_dot_dotdot_or_a_trailing_slash(csv_file, tmp_path, capsys,
                                                                       monkeypatch):
    """``--out .`` crashed (``PosixPath('.') has an empty name``) and ``--out ..`` put the
    checkpoint at ``...checkpoint``: the path is made absolute first; one that is the
    current directory or holds it is refused in one line (saving would replace it)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for out in (".", "..", str(work) + "/.."):
        code, stderr = _run_in_process(["fit", "--data", str(csv_file), "--out", out], capsys)
        assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
        assert f"--out {out} is the current directory or holds it" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.csv", "work"]
    (work / "models").mkdir()
    assert main(["fit", "--data", str(csv_file), "--out", "models/m/", "--quiet"]) == 0
    assert (work / "models" / "m" / "model.json").is_file()
    monkeypatch.chdir(work / "models")
    assert main(["fit", "--data", str(csv_file), "--out", "../models/./m2/", "--quiet"]) == 0
    assert sorted(p.name for p in (work / "models").iterdir()) == ["m", "m2"]


def test_predict_with_a_precomputed_kernel_model_asks_for_kernel_values(tmp_path, capsys):
    """A model of kernel="precomputed" given features was told to give "the model's
    features (for svmlight, --n-features 6)": it needs K(test, train), a column per
    training sample."""
    import muflow

    K = FEATURES @ FEATURES.T
    muflow.save(muflow.SVC(kernel="precomputed").fit(K, LABELS), tmp_path / "model")
    data = tmp_path / "test.csv"
    data.write_text("".join(f"{a},{b},{c}\n" for (a, b), c in zip(FEATURES, LABELS)))
    code, stderr = _run_in_process(["predict", "--model", str(tmp_path / "model"),
                                    "--data", str(data)], capsys)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert ("has a precomputed kernel: give the kernel values K(test, train), one column per "
            "training sample (6)") in stderr and "--n-features" not in stderr
    np.savetxt(data, np.c_[K, LABELS], delimiter=",")
    assert main(["predict", "--model", str(tmp_path / "model"), "--data", str(data)]) == 0
    assert [int(p) for p in capsys.readouterr().out.split()] == list(LABELS)


def _overlapping_classes(path, n=60, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.8 * rng.normal(size=n) > 0).astype(int)
    np.savetxt(path, np.c_[X, y], delimiter=",", fmt="%.6g")
    return path


def test_a_failed_fit_leaves_no_checkpoint_to_refuse_the_next(tmp_path, capsys):
    """The hard margin on classes that overlap fails ("use a finite C") after its first
    checkpoints: the checkpoint it left made the next fit refuse ("holds the checkpoint of
    an interrupted fit"), and --resume fail again. A failure that a resume cannot get past
    removes it; the next fit starts over."""
    from muflow.checkpoint import FILENAME

    data = _overlapping_classes(tmp_path / "d.csv")
    out = tmp_path / "m"
    args = ["fit", "--data", str(data), "--kernel", "linear", "--checkpoint-every", "2",
            "--quiet", "--out", str(out)]
    code, stderr = _run_in_process(args + ["--C", "inf"], capsys)
    assert code == 1 and "use a finite C" in stderr, stderr
    assert not (tmp_path / "m.checkpoint" / FILENAME).exists()
    assert main(args + ["--C", "1"]) == 0
    assert (out / "model.json").is_file() and not (tmp_path / "m.checkpoint").exists()


@pytest.mark.parametrize("failure", ["scheduler lost", "disk full", "checkpoint of another run"])
def test_a_fit_stopped_from_outside_keeps_its_checkpoint(csv_file, tmp_path, capsys, monkeypatch,
                                                         failure):
    """A lost scheduler (whose line says the checkpoint is kept), a full disk or a resume
    refused for its settings: a resume can continue once that is fixed."""
    import errno

    import muflow
    from muflow.checkpoint import FILENAME
    from muflow.exceptions import MuflowInputError, SchedulerLostError

    error = {"scheduler lost": SchedulerLostError("the Dask scheduler at tcp://x:1 is gone"),
             "disk full": OSError(errno.ENOSPC, "No space left on device"),
             "checkpoint of another run": MuflowInputError("belongs to another run")}[failure]

    monkeypatch.setattr(muflow.SVC, "fit", _fit_leaving_a_checkpoint(error, b"held"))
    out = tmp_path / "model"
    assert main(["fit", "--data", str(csv_file), "--out", str(out), "--quiet"]) in (1, 2)
    assert (tmp_path / "model.checkpoint" / FILENAME).read_bytes() == b"held"


@pytest.fixture
def named_columns(tmp_path):
    """A training file with columns a, b, c, label and test rows of the same features:
    ``(train, test_rows, test_labels)``."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = np.where(X[:, 0] > 0, "pos", "neg")
    train = pd.DataFrame(X[:80], columns=["a", "b", "c"]).assign(label=y[:80])
    train.to_csv(tmp_path / "train.csv", index=False)
    return tmp_path / "train.csv", X[80:], y[80:]


def _predicted(capsys, *args):
    """``(exit code, stdout words, stderr)`` of ``predict args`` (what was printed before
    left out)."""
    capsys.readouterr()
    code = main(["predict", *args])
    captured = capsys.readouterr()
    return code, captured.out.split(), captured.err


def test_fit_keeps_named_columns_and_predict_matches_them_by_name(named_columns, tmp_path,
                                                                  capsys):
    """The model of a file with named columns keeps them (feature_names_in_, as a fit on a
    DataFrame does), and predict picks them by name: a test file with its columns in
    another order was predicted by position (accuracy 0.98 -> 0.6), warning that "X does
    not have valid feature names"."""
    pd = pytest.importorskip("pandas")
    import muflow

    train, X, y = named_columns
    model = tmp_path / "model"
    assert main(["fit", "--data", str(train), "--kernel", "linear", "--out", str(model),
                 "--quiet"]) == 0
    assert list(muflow.load(model).feature_names_in_) == ["a", "b", "c"]
    expected = muflow.load(model).predict(pd.DataFrame(X, columns=["a", "b", "c"]))
    test = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y, extra=1.0)
    test[["c", "extra", "b", "label", "a"]].to_csv(tmp_path / "test.csv", index=False)
    code, predicted, err = _predicted(capsys, "--model", str(model), "--data",
                                      str(tmp_path / "test.csv"), "--label-column", "label")
    assert code == 0 and predicted == list(expected), err
    assert "feature names" not in err
    # a file without names (no header) is still matched by position
    np.savetxt(tmp_path / "plain.csv", X, delimiter=",")
    code, predicted, err = _predicted(capsys, "--model", str(model), "--data",
                                      str(tmp_path / "plain.csv"), "--no-labels")
    assert code == 0 and predicted == list(expected), err


def test_predict_by_name_refuses_missing_columns_and_a_label_among_the_features(
        named_columns, tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    train, X, y = named_columns
    model = tmp_path / "model"
    assert main(["fit", "--data", str(train), "--kernel", "linear", "--out", str(model),
                 "--quiet"]) == 0
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y)
    frame[["c", "label"]].assign(d=1.0).to_csv(tmp_path / "narrow.csv", index=False)
    code, _, err = _predicted(capsys, "--model", str(model), "--data", str(tmp_path / "narrow.csv"))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "lacks the model's feature columns a, b (the model has a, b, c)" in err
    # --label-column 0 names the feature c: the label was read as a feature by position
    frame[["c", "b", "a", "label"]].to_csv(tmp_path / "test.csv", index=False)
    code, _, err = _predicted(capsys, "--model", str(model), "--data", str(tmp_path / "test.csv"),
                              "--label-column", "0")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the label column 'c' (--label-column 0) is one of the model's features" in err


def test_a_model_fitted_without_names_predicts_by_position(tmp_path, capsys):
    """A file without a header (or of pandas' default names) gives a model without names;
    a named file is then matched by position, as before."""
    import muflow

    np.savetxt(tmp_path / "train.csv", np.c_[FEATURES, LABELS], delimiter=",")
    model = tmp_path / "model"
    assert main(["fit", "--data", str(tmp_path / "train.csv"), "--out", str(model),
                 "--quiet"]) == 0
    assert getattr(muflow.load(model), "feature_names_in_", None) is None
    (tmp_path / "named.csv").write_text("q,p,label\n" + "".join(
        f"{a},{b},{c}\n" for (a, b), c in zip(FEATURES, LABELS)))
    code, predicted, err = _predicted(capsys, "--model", str(model), "--data",
                                      str(tmp_path / "named.csv"))
    assert code == 0 and [int(p) for p in predicted] == list(LABELS), err


def test_predict_reads_an_svmlight_file_indexed_as_the_training_file(tmp_path, capsys):
    """Each svmlight file's indexing was guessed on its own: a test file whose rows never
    use feature 0 (zero-based, as dump_svmlight_file writes) was read one-based, every
    feature one column to the left. The model records how its training file was read and
    predict reads the test file alike; a file wider than the model is named as such (the
    advice --n-features N then failed: "input file contains N+1 features")."""
    from sklearn.datasets import dump_svmlight_file

    import muflow

    from tests.conftest import zero_based_svmlight_pair

    X_test, y_test = zero_based_svmlight_pair(tmp_path, n_train=40)
    model = tmp_path / "model"
    assert main(["fit", "--data", str(tmp_path / "train.svm"), "--kernel", "linear",
                 "--out", str(model), "--quiet"]) == 0
    assert muflow.load(model)._svmlight_zero_based is True  # recorded in model.json
    expected = muflow.load(model).predict(X_test)
    assert not np.array_equal(expected, muflow.load(model).predict(np.c_[X_test[:, 1:], 0 * y_test]))
    code, predicted, err = _predicted(capsys, "--model", str(model), "--data",
                                      str(tmp_path / "test.svm"), "--n-features", "5")
    assert code == 0 and [int(p) for p in predicted] == list(expected), err
    dump_svmlight_file(np.c_[X_test, np.ones(20)], y_test, str(tmp_path / "wide.svm"))
    for n_features in ([], ["--n-features", "5"]):
        code, _, err = _predicted(capsys, "--model", str(model), "--data",
                                  str(tmp_path / "wide.svm"), *n_features)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert ("uses feature indices beyond the model's 5 features" in err if not n_features
                else "uses feature indices beyond n_features=5: it holds 6 features" in err), err
        assert "(for svmlight, --n-features" not in err
