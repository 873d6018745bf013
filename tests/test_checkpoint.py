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
