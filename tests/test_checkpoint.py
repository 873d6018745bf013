"""Atomic solver checkpoints and resumption with the solvers' ``callback`` and ``init``."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from muflow.checkpoint import Checkpointer, load_checkpoint, save_checkpoint
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers import DualProblem
from muflow.solvers.registry import SOLVERS

#: Solvers whose whole state is alpha (no intercept multiplier): resuming replays the
#: uninterrupted run exactly. m3_flipped also carries the flip signs of the previous pass,
#: which a resumed run recomputes, so it is compared at a looser tolerance.
EXACT_RESUME = ("m3", "munk", "musik", "seminmf")


@pytest.fixture(scope="module")
def problem_data():
    rng = np.random.default_rng(5)
    n = 200
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    X = rng.normal(size=(n, 3)) + 0.8 * y[:, None]
    return X, y, Kernel("rbf", gamma=0.5).block(X)


def support(alpha):
    return frozenset(np.flatnonzero((alpha > 1e-8 * alpha.max(axis=0)).any(axis=1)))


def test_save_is_atomic_and_refuses_another_run(tmp_path):
    run = str(tmp_path / "run")
    save_checkpoint(run, np.ones(5), 0.5, 10, -3.0, tag={"solver": "m3"})
    assert os.listdir(run) == ["checkpoint.npz"]  # no temporary file left behind
    ckpt = load_checkpoint(run, tag={"solver": "m3"}, n=5, m=1)
    assert ckpt.iteration == 10 and ckpt.alpha.shape == (5, 1) and ckpt.bias.tolist() == [0.5]
    with pytest.raises(MuflowInputError, match="another run.*solver is 'm3', this run's 'munk'"):
        load_checkpoint(run, tag={"solver": "munk"})
    with pytest.raises(MuflowInputError, match="5 samples, the problem 6"):
        load_checkpoint(run, n=6)
    with open(os.path.join(run, "checkpoint.npz"), "wb") as fh:
        fh.write(b"garbage")
    with pytest.raises(MuflowInputError, match="unreadable"):
        load_checkpoint(run)
    assert load_checkpoint(str(tmp_path / "none")) is None


@pytest.mark.parametrize("name, rtol", [(n, 1e-6) for n in EXACT_RESUME] + [("m3_flipped", 1e-4)])
def test_interrupted_then_resumed_ends_at_the_same_solution(name, rtol, problem_data, tmp_path):
    _, y, K = problem_data
    solve = SOLVERS[name].solve
    make = lambda: DualProblem(DenseGram(K), y, upper=1.0)  # noqa: E731
    total = 120
    full = solve(make(), tol=1e-12, max_iter=total)
    run = str(tmp_path / "run")
    problem = make()
    solve(problem, tol=1e-12, max_iter=total, callback=Checkpointer(run, every=20, problem=problem,
                                                                    stop_after=50))
    ckpt = load_checkpoint(run)
    assert ckpt.iteration == 40
    problem = make()
    resumed = solve(problem, init=ckpt.init, tol=1e-12, max_iter=total - ckpt.iteration,
                    callback=Checkpointer(run, every=20, problem=problem, resume=ckpt))
    assert ckpt.iteration + resumed.n_iter == total
    np.testing.assert_allclose(resumed.objective_curve[-1], full.objective_curve[-1], rtol=rtol)
    if rtol <= 1e-6:
        assert support(resumed.alpha) == support(full.alpha)


KILLED_FIT = textwrap.dedent("""
    import sys, time
    import numpy as np
    from muflow.checkpoint import Checkpointer
    from muflow.kernels import Kernel
    from muflow.operators import DenseGram
    from muflow.solvers import DualProblem
    from muflow.solvers.registry import SOLVERS

    if __name__ == "__main__":
        run = sys.argv[1]
        rng = np.random.default_rng(5)
        n = 200
        y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
        X = rng.normal(size=(n, 3)) + 0.8 * y[:, None]
        problem = DualProblem(DenseGram(Kernel("rbf", gamma=0.5).block(X)), y, upper=1.0)
        cp = Checkpointer(run, every=10, problem=problem)
        slow = lambda i, a, f: (time.sleep(0.02), cp(i, a, f))[1]
        SOLVERS["munk"].solve(problem, tol=1e-12, max_iter=10_000, callback=slow)
""")


def test_fit_process_killed_resumes_from_its_last_checkpoint(problem_data, tmp_path):
    _, y, K = problem_data
    run = str(tmp_path / "run")
    script = tmp_path / "fit.py"
    script.write_text(KILLED_FIT)
    proc = subprocess.Popen([sys.executable, str(script), run])
    deadline = time.monotonic() + 120
    ckpt = None
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            ckpt = load_checkpoint(run)
        except MuflowInputError:  # never: the write is atomic
            raise
        if ckpt is not None and ckpt.iteration >= 30:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpt = load_checkpoint(run)  # readable after a kill at any moment
    assert ckpt is not None and ckpt.iteration % 10 == 0 and ckpt.iteration >= 30
    total = ckpt.iteration + 60
    full = SOLVERS["munk"].solve(DualProblem(DenseGram(K), y, upper=1.0), tol=1e-12, max_iter=total)
    resumed = SOLVERS["munk"].solve(DualProblem(DenseGram(K), y, upper=1.0), init=ckpt.init,
                                    tol=1e-12, max_iter=60)
    np.testing.assert_allclose(resumed.objective_curve[-1], full.objective_curve[-1], rtol=1e-6)
    assert support(resumed.alpha) == support(full.alpha)


def test_a_checkpoint_is_written_whenever_the_count_passes_a_multiple(tmp_path):
    """Solvers that report every few iterations (SMO every callback_every steps) or count
    again from 0 at each column still get their checkpoints."""
    run = str(tmp_path / "run")
    cp = Checkpointer(run, every=5)
    alpha, objective = np.ones((3, 1)), np.zeros(1)
    for iteration in (0, 3, 7, 12, 13, 2, 9):  # the last two: the next column
        cp(iteration, alpha, objective)
    assert cp.saved == [7, 12, 9]
    resumed = Checkpointer(run, every=5, resume=load_checkpoint(run))
    for iteration in (1, 2):  # 10, 11 in total: 10 is a multiple
        resumed(iteration, alpha, objective)
    assert resumed.saved == [10]


# -- what is read back is checked (issue 33, item 1) --------------------------------------

def _damage_alpha(run, value, count=100):
    """Rewrite the checkpoint with ``count`` alpha entries set to ``value``: a well-formed
    file (valid zip, correct CRCs) holding a state that means nothing."""
    path = os.path.join(run, "checkpoint.npz")
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["alpha"] = arrays["alpha"].copy()
    arrays["alpha"].flat[:count] = value
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _interrupted_fit(X, y, run):
    """A fit stopped after its first checkpoint: SMO's steps counted in sweeps of n."""
    import muflow

    model = muflow.SVC(C=10.0, gamma=0.5, max_iter=30, tol=1e-9)
    with pytest.warns(Warning):
        model.fit(X, y, checkpoint_dir=run, checkpoint_every=5)
    return model


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_checkpoint_holding_nan_or_inf_is_refused_naming_the_file(problem_data, tmp_path, value):
    import muflow

    X, y, _ = problem_data
    run = str(tmp_path / "run")
    _interrupted_fit(X, y, run)
    _damage_alpha(run, value)
    with pytest.raises(MuflowInputError,
                       match=rf"checkpoint {run}/checkpoint.npz is damaged: 100 of its alpha "
                             rf"values are NaN or inf; delete {run} to start over"):
        muflow.SVC(C=10.0, gamma=0.5).fit(X, y, checkpoint_dir=run)


def test_fit_resume_from_a_nan_checkpoint_fails_in_one_line(problem_data, tmp_path, capsys):
    """The reported case: `fit --resume` used to exit 0 with "converged, KKT violation 0"."""
    from muflow.cli import main

    X, y, _ = problem_data
    data = tmp_path / "d.csv"
    np.savetxt(data, np.column_stack([X, y]), delimiter=",")
    out = tmp_path / "model"
    run = str(out) + ".checkpoint"
    _interrupted_fit(X, y, run)
    _damage_alpha(run, np.nan)
    code = main(["fit", "--data", str(data), "--C", "10", "--gamma", "0.5", "--out", str(out),
                 "--resume", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and f"checkpoint {run}/checkpoint.npz is damaged" in err


def test_a_checkpoint_of_other_data_is_refused(problem_data, tmp_path):
    import muflow

    X, y, _ = problem_data
    run = str(tmp_path / "run")
    _interrupted_fit(X, y, run)
    other = X.copy()
    other[7, 1] += 1e-3  # same shape, same labels: only the fingerprint tells them apart
    with pytest.raises(MuflowInputError, match="written for other data .*; resume with that run's "
                                               f"data and settings, or delete {run} to start over"):
        muflow.SVC(C=10.0, gamma=0.5).fit(other, y, checkpoint_dir=run)
    # another C is named as such, not as other data as well
    with pytest.raises(MuflowInputError, match=r"its C is 10.0, this run's 1.0; resume") as err:
        muflow.SVC(C=1.0, gamma=0.5).fit(X, y, checkpoint_dir=run)
    assert "other data" not in str(err.value)
    weights = np.ones(len(y))
    weights[3] = 2.0
    with pytest.raises(MuflowInputError, match="written for other data"):
        muflow.SVC(C=10.0, gamma=0.5).fit(X, y, sample_weight=weights, checkpoint_dir=run)
    muflow.SVC(C=10.0, gamma=0.5).fit(X, y, checkpoint_dir=run)  # the same data resume


def test_another_kernel_is_named_in_plain_numbers(problem_data, tmp_path):
    """A gamma resolved from "scale" (a NumPy float) is shown as a number in the refusal,
    not as ``np.float64(...)``."""
    import muflow

    X, y, _ = problem_data
    run = str(tmp_path / "run")
    _interrupted_fit(X, y, run)
    with pytest.raises(MuflowInputError, match="its kernel is .*this run's") as err:
        muflow.SVC(C=10.0, gamma="scale").fit(X, y, checkpoint_dir=run)
    assert "np.float64" not in str(err.value)
    assert "'gamma': 0.5" in str(err.value)


def test_a_checkpoint_without_a_fingerprint_is_refused(tmp_path):
    run = str(tmp_path / "run")
    save_checkpoint(run, np.ones(5), 0.5, 10, -3.0, tag={"solver": "smo"})
    with pytest.raises(MuflowInputError, match="it records no data"):
        load_checkpoint(run, tag={"solver": "smo", "data": "abc"})


def test_a_negative_or_misshapen_checkpoint_is_refused(tmp_path):
    run = str(tmp_path / "run")
    save_checkpoint(run, -np.ones(5), 0.5, 10, -3.0)
    with pytest.raises(MuflowInputError, match="is damaged: alpha of shape .*negative values: 5"):
        load_checkpoint(run)


def test_a_resumed_fit_counts_its_iterations_from_the_start(problem_data, tmp_path):
    """A fit resumed from a checkpoint and stopped by max_iter said n_iter_ = the resumed
    part's count and warned "raise tol" (the budget check compared that part with the whole
    budget); it now counts from the fit's beginning and warns as the same fit without a
    resume does."""
    import warnings

    import muflow
    from sklearn.exceptions import ConvergenceWarning

    X, y, _ = problem_data
    ckpt = tmp_path / "ck"
    with pytest.warns(ConvergenceWarning):
        muflow.SVC(gamma=0.5, solver="munk", max_iter=30, tol=1e-12).fit(
            X, y, checkpoint_dir=ckpt, checkpoint_every=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = muflow.SVC(gamma=0.5, solver="munk", max_iter=60, tol=1e-12).fit(
            X, y, checkpoint_dir=ckpt, checkpoint_every=10)
    assert list(resumed.n_iter_) == [60]
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert messages and "max_iter=60" in messages[0] and "raise tol" not in messages[0]
