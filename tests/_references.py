"""References and data shared by several test modules (read when a test asks, never at import)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize

from muflow.kernels import Kernel

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def box_qp(K, y, upper, linear):
    """min 1/2 a'Qa + p'a, 0 <= a <= U, Q = diag(y) K diag(y), by L-BFGS-B at
    machine-precision tolerances: the reference of the solvers without the sum constraint."""
    Q = (y[:, None] * y[None, :]) * K

    def f(a):
        qa = Q @ a
        return 0.5 * a @ qa + linear @ a, qa + linear

    res = minimize(f, np.zeros(len(y)), jac=True, method="L-BFGS-B",
                   bounds=[(0.0, float(u)) for u in upper],
                   options={"maxiter": 100_000, "maxfun": 200_000, "ftol": 1e-16, "gtol": 1e-11})
    return res.x, res.fun


def a8a(rows: int):
    """The first ``rows`` samples of a8a (CSR, 123 features) and their labels; the test is
    skipped where the shared data folder does not hold a8a."""
    from sklearn.datasets import load_svmlight_file

    path = SHARED_DATA / "a8a"
    if not path.exists():
        pytest.skip(f"{path} not present (the shared data folder sits beside the repository)")
    X, y = load_svmlight_file(str(path), n_features=123)
    return X[:rows], y[:rows]


def usps_digits():
    """USPS ``zip.test`` (2007 x 256, digits 0-9, pixels in [-1, 1]) as (X, y); the test is
    skipped where the shared data folder does not hold it. One line carries a trailing
    extra field: the label and the 256 pixels are kept."""
    path = SHARED_DATA / "zip.test"
    if not path.exists():
        pytest.skip(f"{path} not present (the shared data folder sits beside the repository)")
    rows = [line.split()[:257] for line in path.read_text().splitlines() if line.strip()]
    M = np.array(rows, dtype=np.float64)
    return M[:, 1:], M[:, 0].astype(int)


#: One of every kernel muflow builds, with an offset (the regularized intercept) once.
KERNELS = [
    Kernel("linear"),
    Kernel("poly", gamma=0.3, degree=3, coef0=1.0),
    Kernel("rbf", gamma=0.2),
    Kernel("rbf", gamma=0.2, offset=1.0),
    Kernel("sigmoid", gamma=0.05, coef0=-0.5),
    Kernel("laplacian", gamma=0.1),
]


def mostly_zeros(n: int, d: int, zeros: float, seed: int) -> np.ndarray:
    """Standard normal samples of shape (n, d) with a fraction ``zeros`` of the entries set to
    0 (seeded): dense arrays that exercise the sparse-row paths."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random(X.shape) < zeros] = 0.0
    return X
