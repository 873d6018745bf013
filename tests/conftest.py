"""Shared fixtures: real data sets (read when a test asks, never at import) and references."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared_data(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} not present (the shared data folder sits beside the repository)")
    return path


@pytest.fixture(scope="module")
def client():
    """A client of a real LocalCluster of 2 worker processes, one per test module
    (:func:`dask_cluster.local_client`)."""
    from dask_cluster import local_client

    with local_client(2) as c:
        yield c


@pytest.fixture(scope="session")
def breast_cancer_split():
    """Breast cancer, standardised to [0, 1] features, stratified 80/20 split (seed 0)."""
    from sklearn.model_selection import train_test_split

    import muflow

    X, y = muflow.datasets.load_breast_cancer()
    X = X / 10.0
    return train_test_split(X, np.where(y == 4, 1, -1), test_size=0.2, random_state=0, stratify=y)


@pytest.fixture(scope="session")
def sonar_split():
    """Sonar, stratified 50/50 split (seed 0), labels +1 (M) / -1 (R)."""
    from sklearn.model_selection import train_test_split

    import muflow

    X, y = muflow.datasets.load_sonar()
    y = np.where(y == "M", 1, -1)
    return train_test_split(X, y, test_size=0.5, random_state=0, stratify=y)


@pytest.fixture(scope="session")
def generated_split():
    """Two overlapping Gaussian blobs with signed features, 240 points, 50/50 split."""
    from sklearn.model_selection import train_test_split

    rng = np.random.default_rng(7)
    n = 240
    y = np.where(rng.random(n) < 0.5, 1, -1)
    X = rng.normal(size=(n, 4)) + 1.2 * y[:, None] * np.array([1.0, -0.5, 0.3, 0.0])
    return train_test_split(X, y, test_size=0.5, random_state=0, stratify=y)


def dual_objective(K, y, alpha):
    """1/2 a'Qa - sum a with Q = diag(y) K diag(y)."""
    ya = y * alpha
    return 0.5 * ya @ K @ ya - alpha.sum()


def reference_box_qp(K, y, upper):
    """The bias-free dual (box constraints only) solved to high precision with SciPy.

    L-BFGS-B with the exact gradient and tolerances at machine precision; the problem is a
    convex QP, so its minimiser is the reference for intercept "none" and "regularized".
    """
    from scipy.optimize import minimize

    Q = (y[:, None] * y[None, :]) * K
    n = len(y)
    upper = np.broadcast_to(np.asarray(upper, dtype=float), (n,))
    bounds = [(0.0, None if not np.isfinite(u) else float(u)) for u in upper]

    def f(a):
        qa = Q @ a
        return 0.5 * a @ qa - a.sum(), qa - 1.0

    x0 = np.zeros(n)
    res = minimize(f, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                   options={"maxiter": 100_000, "maxfun": 200_000, "ftol": 1e-16, "gtol": 1e-11,
                            "maxcor": 50})
    return res.x


def reference_libsvm(K, y, C):
    """libsvm's exact-bias solution through scikit-learn's SVC(kernel="precomputed")."""
    from sklearn.svm import SVC

    ref = SVC(kernel="precomputed", C=C, tol=1e-10, max_iter=10**8).fit(K, y)
    alpha = np.zeros(len(y))
    alpha[ref.support_] = np.abs(ref.dual_coef_[0])
    return alpha, ref


#: What a Dask Nanny writes into the environment of the process that starts it (its workers'
#: settings, distributed's ``pre-spawn-environ``) and leaves there.
_NANNY_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MALLOC_TRIM_THRESHOLD_")


def _restore(values) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


#: Those variables as the test session found them (read when this file is imported, before
#: any cluster is started).
_SESSION_VALUES = {name: os.environ.get(name) for name in _NANNY_VARIABLES}


@pytest.fixture(autouse=True)
def _environment_as_the_session_found_it():
    """A LocalCluster leaves OMP_NUM_THREADS=1 in this process's environment, which every
    later command a test starts would inherit as its caller's thread limit (a sweep told
    ``--n-jobs 2`` would then run on one thread, in one process). A cluster started by a
    module- or session-scoped fixture does it before any test's own fixtures run, so each
    test starts, and ends, with these variables as the session found them."""
    _restore(_SESSION_VALUES)
    yield
    _restore(_SESSION_VALUES)


def zero_based_svmlight_pair(folder, n_train: int, n_test: int = 20):
    """``folder/train.svm`` and ``folder/test.svm`` of 5 features, zero-based (as
    ``dump_svmlight_file`` writes them), the test rows never using feature 0: a reader that
    guesses each file's indexing on its own reads the test file one column to the left.
    Returns ``(X_test, y_test)``."""
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(3)
    X = rng.normal(size=(n_train + n_test, 5))
    y = np.where(X[:, 1] + X[:, 2] > 0, 1, -1)
    dump_svmlight_file(X[:n_train], y[:n_train], str(folder / "train.svm"))
    X_test = X[n_train:].copy()
    X_test[:, 0] = 0.0
    dump_svmlight_file(X_test, y[n_train:], str(folder / "test.svm"))
    return X_test, y[n_train:]


def pytest_sessionstart(session):
    """With ``-n 2`` (the suite's default), fill numba's cache of muflow's compiled loops
    once, two processes side by side, before the pytest processes start
    (:mod:`tests._warm_compiled`): on a fresh checkout every process of the suite compiled
    the same loops at the same time. Runs in the controlling process only; a failure here
    is no test's, and is left for the test that meets it."""
    import subprocess
    import sys

    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    script = Path(__file__).with_name("_warm_compiled.py")
    paths = [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    halves = [subprocess.Popen([sys.executable, str(script), half], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for half in ("a", "b")]
    for proc in halves:
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
