"""Invariants of the multiplicative solvers, as property tests on random PSD problems.

- the objective never increases from one iteration to the next (every rule, clipped and
  flipped box, with and without the sum constraint, hard and soft margin);
- iterates stay feasible: 0 <= alpha <= U, and sum y alpha = 0 with the equality;
- solving m problems as columns of one batch equals solving each one alone.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

import muflow
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers import DualProblem
from muflow.solvers.multiplicative import solve_multiplicative
from tests.conftest import reference_libsvm

COMBINATIONS = [(rule, box) for rule in ("m3", "munk", "musik", "seminmf") for box in ("clip",)] + [("m3", "flip")]


@st.composite
def psd_problems(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.integers(4, 24))
    signed = draw(st.booleans())
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, draw(st.integers(1, 6))))
    if signed:
        K = X @ X.T + 1e-3 * np.eye(n)  # linear kernel: entries of both signs
    else:
        gamma = draw(st.floats(0.05, 2.0))
        sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
        K = np.exp(-gamma * sq)  # RBF: non-negative, PSD
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    y[0], y[1] = 1.0, -1.0
    C = draw(st.sampled_from([0.1, 1.0, 10.0, float("inf")]))
    equality = draw(st.booleans())
    return K, y, C, equality, signed


def _increments(curve):
    f = curve[:, 0]
    return np.diff(f), np.abs(f[:-1]) + 1.0


@pytest.mark.parametrize("rule, box", COMBINATIONS)
@settings(max_examples=25, deadline=None)
@given(case=psd_problems())
def test_objective_never_increases_and_iterates_stay_feasible(rule, box, case):
    K, y, C, equality, signed = case
    if rule == "munk" and signed:
        return  # MUNK is defined for non-negative kernels only (refused by the registry)
    if not np.isfinite(C) and box == "flip":
        C = 5.0
    problem = DualProblem(DenseGram(K), y, upper=C, equality=equality)
    seen = []

    def record(iteration, alpha, objective):
        seen.append(alpha.copy())
        return False

    try:
        solution = solve_multiplicative(problem, rule=rule, box=box, tol=1e-9, max_iter=300, callback=record)
    except Exception as exc:  # an unbounded hard-margin problem is refused, never silently wrong
        assert "unbounded" in str(exc)
        return
    steps, scale = _increments(solution.objective_curve)
    assert np.all(steps <= 1e-12 * scale), f"objective rose by {steps.max():.3e}"
    for alpha in seen:
        assert np.all(alpha >= 0)
        assert np.all(alpha <= C * (1 + 1e-12))
        if equality:
            assert abs(np.sum(y * alpha[:, 0])) <= 1e-8 * max(1.0, alpha.sum())


@pytest.mark.parametrize("rule, box", [("m3", "clip"), ("munk", "clip"), ("m3", "flip")])
def test_batched_columns_equal_one_problem_at_a_time(rule, box):
    rng = np.random.default_rng(11)
    n = 60
    X = rng.normal(size=(n, 3))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    Y = np.where(rng.random((n, 3)) < 0.5, 1.0, -1.0)
    upper = np.column_stack([np.full(n, 0.5), np.full(n, 2.0), np.where(rng.random(n) < 0.2, 0.0, 1.0)])
    # the same number of passes for all (tol=0): the columns must follow identical paths
    batch = solve_multiplicative(DualProblem(DenseGram(K), Y, upper=upper, equality=True),
                                 rule=rule, box=box, tol=0.0, max_iter=400)
    for j in range(3):
        alone = solve_multiplicative(DualProblem(DenseGram(K), Y[:, j], upper=upper[:, j], equality=True),
                                     rule=rule, box=box, tol=0.0, max_iter=400)
        np.testing.assert_allclose(batch.objective_curve[:, j], alone.objective_curve[:, 0], rtol=1e-9)
        np.testing.assert_allclose(batch.alpha[:, j], alone.alpha[:, 0], rtol=1e-7, atol=1e-12)
        # pinned samples (U = 0, a fold's held-out rows) stay at exactly zero
        assert np.all(batch.alpha[upper[:, j] == 0, j] == 0)


@pytest.mark.parametrize("rule", ["m3", "seminmf"])
def test_a_float32_gram_converges_where_a_float64_one_does(rule):
    """Near the optimum a pass lowers F by less than the float32 products' rounding of it:
    judged on the rounded values the step looked like a rise, the safeguard put the previous
    iterate back, and the solver stood still for ever (KKT 0.06 after any number of passes).
    A rise within the rounding is no rise (:func:`muflow.solvers.multiplicative.rounding_slack`)."""
    import muflow

    X, y = muflow.datasets.load_sonar()
    X, y = X[::2], y[::2]
    fits = {dtype: muflow.SVC(gamma=0.5, C=10.0, solver=rule, gram_dtype=dtype, max_iter=40_000).fit(X, y)
            for dtype in ("float64", "float32")}
    assert all(bool(f.converged_.all()) for f in fits.values())
    assert abs(fits["float32"].n_iter_[0] - fits["float64"].n_iter_[0]) <= 0.01 * fits["float64"].n_iter_[0]
    np.testing.assert_allclose(fits["float32"].objective_, fits["float64"].objective_, rtol=1e-6)


def test_float32_rows_on_demand_converge_as_a_float32_gram_does():
    """Rows computed on demand in float32 round the products as a stored float32 Gram does,
    but the safeguard judged them with a float64 slack: nearly every pass was rolled back and
    the KKT violation stood still for ever (0.046 after 40,000 passes). The slack follows
    the dtype the operator's products are rounded in (:func:`muflow.operators.operand_dtype`)."""
    import muflow
    from muflow.kernel_rows import KernelRows
    from muflow.kernels import Kernel
    from muflow.operators import operand_dtype
    from tests.conftest import dual_objective, reference_libsvm

    X, y = muflow.datasets.load_sonar()
    X, y = X[::2], y[::2]
    fits = {gram: muflow.SVC(gamma=0.5, C=10.0, solver="munk", gram=gram, gram_dtype="float32",
                             max_iter=10_000).fit(X, y)
            for gram in ("stored", "rows")}
    assert all(bool(f.converged_.all()) for f in fits.values())
    assert fits["rows"].timings_["safeguard_passes"] < 0.1 * fits["rows"].n_iter_[0]
    assert abs(fits["rows"].n_iter_[0] - fits["stored"].n_iter_[0]) <= 0.01 * fits["stored"].n_iter_[0]
    K = Kernel("rbf", gamma=0.5).block(np.asarray(X, dtype=np.float64))
    labels = np.where(y == np.unique(y)[1], 1.0, -1.0)
    f_ref = dual_objective(K, labels, reference_libsvm(K, labels, 10.0)[0])
    np.testing.assert_allclose(fits["rows"].objective_, f_ref, rtol=1e-5)
    assert operand_dtype(KernelRows(X, Kernel("rbf", gamma=0.5), dtype="float32")) == np.float32


def test_work_arrays_given_back_do_not_pile_up():
    """The flipped box (and any kernel with negative entries) takes no work array from the
    scratch but gives three back a pass: they piled up, n x m each, until memory ran out."""
    import tracemalloc

    from muflow.solvers.multiplicative import _Scratch

    scratch = _Scratch()
    for _ in range(100):
        scratch.give(np.empty((50, 2)), np.empty((50, 2)))
    assert sum(len(v) for v in scratch._free.values()) == _Scratch.KEEP
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 4))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=80) > 0, 1.0, -1.0)
    problem = DualProblem(DenseGram(np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))), y,
                          upper=1e5, equality=True)
    solve_multiplicative(problem, rule="m3", box="flip", tol=1e-12, max_iter=300)  # compiled
    peaks = []
    for passes in (200, 2000):
        tracemalloc.start()
        solve_multiplicative(problem, rule="m3", box="flip", tol=1e-12, max_iter=passes)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # the objective curve keeps an (m,) array a pass, under 200 bytes; the leak was three
    # 80 x 1 float64 arrays a pass, 1,920 bytes
    assert (peaks[1] - peaks[0]) / 1800 < 500


@pytest.mark.parametrize("rule", ["m3", "munk", "musik", "seminmf"])
def test_a_fixed_point_above_tol_ends_the_solve_with_a_convergence_warning(rule):
    """A tol below what the arithmetic reaches: the iterate stops changing (floored
    coefficients count 1e-12 in the measure). The solve stops there, unconverged, with the
    warning that names no further progress, instead of running to max_iter (-1: for ever)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=40) > 0, 1, -1)
    model = muflow.SVC(kernel="rbf", gamma=0.5, solver=rule, intercept="none", tol=1e-300,
                       max_iter=200_000)
    with pytest.warns(ConvergenceWarning, match="no further progress"):
        model.fit(X, y)
    assert model.fit_status_ == 1 and model.n_iter_[0] < 200_000


def test_an_iterate_off_the_sum_constraint_is_never_certified():
    """A zero row of K leaves V(b) blind to alpha_15: libsvm's solution with alpha_15 moved
    to its bound has V(b) far below tol and sum_i y_i alpha_i = 0.8. Certifying that start
    (max_iter=0) reports it unconverged, its violation at least the constraint's miss."""
    rng = np.random.RandomState(0)
    X = (3 * rng.uniform(size=(20, 5))).astype(float)
    X[15] = 0.0
    y = np.array([-1.0, 1.0] * 10)
    K = Kernel("poly", gamma=0.5, degree=3, coef0=0.0).block(X)
    alpha, _ = reference_libsvm(K, y, 1.0)
    alpha[15] = 1.0
    off = abs(np.sum(y * alpha))
    assert off > 0.1
    problem = DualProblem(DenseGram(K), y, upper=1.0, equality=True)
    solution = solve_multiplicative(problem, init=alpha, tol=1e-3, max_iter=0)
    assert not solution.converged[0]
    assert solution.kkt_violation[0] >= off - 1e-9  # less the floor lifting zeros
