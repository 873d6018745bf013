"""Fills numba's on-disk cache of muflow's compiled loops before a parallel test session.

Every compiled loop is ``cache=True``: compiled once, its machine code saved beside the
source, loaded by every later process. On a fresh checkout (CI) nothing is saved yet, and
the two pytest processes, each command a test starts and each Dask worker compile the same
loops at the same time (an SMO fit alone takes about 15 s to compile on a 2-core machine):
some 5 of the suite's 14 minutes. ``conftest.pytest_sessionstart`` runs the two halves of
this script side by side, once, before the pytest processes start; anything not compiled
here is compiled where it is first used, as before. No test's checks depend on it: a warm
cache is what every run after the first has.

``python tests/_warm_compiled.py a`` (or ``b``): the loops of one half.
"""

from __future__ import annotations

import sys
import warnings


def _half_a(X, y, Xb, yb):
    import scipy.sparse as sp

    from muflow import SVC, LinearSVC

    for dtype in ("float64", "float32"):
        SVC(solver="smo", gram_dtype=dtype).fit(X, y).predict(X)
        SVC(solver="smo", gram_dtype=dtype, gram="rows").fit(X, y)
    SVC(solver="smo", gram="rows").fit(Xb, yb).predict(Xb)
    for kernel in ("poly", "sigmoid"):
        SVC(kernel=kernel, solver="smo", gram_dtype="float32").fit(X, y)
    LinearSVC(max_iter=20).fit(X, y)
    LinearSVC(max_iter=20).fit(sp.csr_matrix(Xb), yb)


def _half_b(X, y, Xb, yb):
    import numpy as np

    from muflow import SVC

    for dtype in ("float64", "float32"):
        SVC(solver="working_set", gram_dtype=dtype).fit(X, y)
        SVC(solver="working_set", gram_dtype=dtype, gram="rows").fit(X, y)
    weights = np.linspace(0.5, 1.5, len(y))
    for solver in ("munk", "m3", "m3_flipped", "musik", "seminmf"):
        for intercept in ("exact", "none"):
            SVC(solver=solver, intercept=intercept, max_iter=20).fit(X, y)
    SVC(solver="m3", max_iter=20).fit(X, y, sample_weight=weights)


def main(half: str) -> None:
    import numpy as np

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 5))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=120) > 0, 1, -1)
    Xb = (rng.random((300, 40)) < 0.1).astype(float)  # sparse rows
    yb = np.where(Xb[:, :5].sum(axis=1) > 0.5, 1, -1)
    {"a": _half_a, "b": _half_b}[half](X, y, Xb, yb)


if __name__ == "__main__":
    main(sys.argv[1])
