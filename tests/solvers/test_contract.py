"""The one solver contract: ``max_iter`` caps, and ``n_iter_`` counts, each solver's own
iterations (``SolverInfo.iteration_unit``), and a resumed fit spends the same budget."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import muflow
import muflow.checkpoint
from muflow.checkpoint import load_checkpoint
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers import DualProblem
from muflow.solvers.registry import SOLVERS
from muflow.solvers.smo import solve_smo

#: Far below what 50 iterations reach for the multiplicative solvers, so the cap binds.
TOL = 1e-8


def params_for(name, **extra):
    """An SVC for solver ``name`` with an intercept it supports (the exact one if it can)."""
    intercept = "exact" if "exact" in SOLVERS[name].intercepts else "regularized"
    return dict(kernel="rbf", gamma=2.0, C=10.0, solver=name, intercept=intercept, **extra)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_max_iter_caps_n_iter_in_the_solvers_unit(name, breast_cancer_split):
    Xtr, _, ytr, _ = breast_cancer_split
    model = muflow.SVC(**params_for(name, max_iter=50, tol=TOL)).fit(Xtr, ytr)
    assert SOLVERS[name].iteration_unit
    assert model.n_iter_.max() <= 50
    assert model.converged_.all() or model.n_iter_.max() == 50


@pytest.mark.parametrize("name", ["m3", "munk", "m3_flipped"])
def test_the_cap_binds_for_the_multiplicative_solvers(name, breast_cancer_split):
    Xtr, _, ytr, _ = breast_cancer_split
    model = muflow.SVC(**params_for(name, max_iter=50, tol=TOL)).fit(Xtr, ytr)
    assert model.n_iter_.tolist() == [50] and not model.converged_.any()


def test_smo_counts_sweeps_alone_and_libsvm_pair_steps_in_svc(breast_cancer_split):
    Xtr, _, ytr, _ = breast_cancer_split
    n = len(ytr)
    y = np.where(ytr == ytr.max(), 1.0, -1.0)
    problem = DualProblem(DenseGram(Kernel("rbf", gamma=2.0).block(Xtr)), y, upper=10.0,
                          equality=True)
    one = solve_smo(problem, max_iter=1, tol=1e-12)
    assert one.n_iter == 1 and one.timings["pair_steps"] == n  # a sweep: n pair steps
    # muflow.SVC counts pair steps, as libsvm (scikit-learn's max_iter and n_iter_)
    seven = muflow.SVC(**params_for("smo", max_iter=7, tol=1e-12)).fit(Xtr, ytr)
    assert seven.n_iter_.tolist() == [7] and seven.timings_["pair_steps"] == 7
    assert seven.fit_status_ == 1
    full = muflow.SVC(**params_for("smo", tol=1e-3)).fit(Xtr, ytr)
    assert full.converged_.all() and full.n_iter_.tolist() == [full.timings_["pair_steps"]]


def test_the_hybrid_counts_passes_and_sweeps_together(breast_cancer_split):
    Xtr, _, ytr, _ = breast_cancer_split
    n = len(ytr)
    model = muflow.SVC(**params_for("hybrid", tol=1e-3)).fit(Xtr, ytr)
    t = model.timings_
    assert model.n_iter_.tolist() == [t["multiplicative_passes"] + -(-t["subset_steps"] // n)]
    capped = muflow.SVC(**params_for("hybrid", max_iter=3, tol=1e-12)).fit(Xtr, ytr)
    assert capped.n_iter_.tolist() == [3]
    # one objective value an iteration, as every solver's (it had one per SMO pair step)
    for fitted in (model, capped):
        assert fitted.objective_curve_.shape == (fitted.n_iter_[0] + 1, 1)
        assert fitted.objective_curve_[-1, 0] == pytest.approx(fitted.objective_[0], rel=1e-12)


@pytest.mark.parametrize("name", ["smo", "cd", "m3"])
def test_a_resumed_fit_spends_the_rest_of_the_same_budget(name, breast_cancer_split, tmp_path,
                                                          monkeypatch):
    Xtr, _, ytr, _ = breast_cancer_split
    run = tmp_path / "ckpt"
    # SVC counts smo's pair steps (libsvm's unit); its callbacks come once a sweep of n steps
    per = len(ytr) if name == "smo" else 1
    # the first fit is interrupted after its first callback by its checkpoint
    interrupted = functools.partial(muflow.checkpoint.Checkpointer, stop_after=1)
    monkeypatch.setattr(muflow.checkpoint, "Checkpointer", interrupted)
    first = muflow.SVC(**params_for(name, max_iter=4 * per, tol=TOL)).fit(
        Xtr, ytr, checkpoint_dir=run, checkpoint_every=1)
    monkeypatch.undo()
    done = load_checkpoint(run).iteration
    assert done == first.n_iter_.max() == per and not first.converged_.any()
    resumed = muflow.SVC(**params_for(name, max_iter=4 * per, tol=TOL)).fit(
        Xtr, ytr, checkpoint_dir=run, checkpoint_every=1)
    # n_iter_ counts the whole fit's iterations, the checkpoint's included
    assert done + 1 <= resumed.n_iter_.max() <= 4 * per
    assert load_checkpoint(run).iteration == resumed.n_iter_.max()
    # a budget the checkpoint has spent: the start is certified, nothing more is done
    spent = muflow.SVC(**params_for(name, max_iter=per, tol=TOL)).fit(
        Xtr, ytr, checkpoint_dir=run, checkpoint_every=1)
    assert spent.n_iter_.max() == resumed.n_iter_.max()
    np.testing.assert_allclose(spent.objective_, resumed.objective_, rtol=1e-9)


def _hard_margin_data(separable: bool):
    """Points in the unit square (a linear kernel on them has no negative entry, so MUNK
    applies too), labelled by a line: with a band of width 0.1 left empty around it, or
    with a quarter of the labels flipped (not separable by any line)."""
    rng = np.random.default_rng(1)
    X = rng.random((120, 2))
    side = X[:, 0] + X[:, 1] - 1.0
    if separable:
        X, side = X[np.abs(side) > 0.05], side[np.abs(side) > 0.05]
        return X, np.where(side > 0, 1, -1)
    y = np.where(side > 0, 1, -1)
    y[rng.random(len(y)) < 0.25] *= -1
    return X, y


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_hard_margin_on_data_that_are_not_separable_is_refused(name):
    """C = inf on data no line separates: the dual is unbounded and the coefficients grow
    for ever; every solver ran until its time limit (or, without one, for ever) and
    returned a meaningless model. Each now raises, certified by the iterate's direction
    (:mod:`muflow.solvers.unbounded`); the time limit only ends the old behaviour here."""
    X, y = _hard_margin_data(separable=False)
    intercept = "exact" if "exact" in SOLVERS[name].intercepts else "regularized"
    model = muflow.SVC(kernel="linear", C=float("inf"), solver=name, intercept=intercept,
                       tol=1e-3, time_limit=5.0)
    with pytest.raises(muflow.MuflowError, match="use a finite C"):
        model.fit(X, y)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_a_hard_margin_on_separable_data_is_solved(name):
    """The test for an unbounded dual never fires on separable data: the margin here,
    0.05 on points within sqrt(2) of the origin, puts (R / rho)^2 near 1e3."""
    X, y = _hard_margin_data(separable=True)
    intercept = "exact" if "exact" in SOLVERS[name].intercepts else "regularized"
    model = muflow.SVC(kernel="linear", C=float("inf"), solver=name, intercept=intercept,
                       tol=1e-3, max_iter=10**6).fit(X, y)
    assert model.converged_.all() and model.score(X, y) == 1.0


@pytest.mark.parametrize("name", sorted(n for n in SOLVERS if "exact" in SOLVERS[n].intercepts))
def test_a_column_with_one_label_left_stops_at_zero(name, breast_cancer_split):
    """With the sum constraint, a column whose -1 samples all have the bound 0 (a one-vs-one
    pair of which one class is weighted 0) is feasible at alpha = 0 alone. SMO looped for
    ever there; the multiplicative solvers raised that the hard margin (C=inf) has no
    solution; each now returns alpha = 0, certified, and a bias that puts the column's
    samples on the +1 side, next to an ordinary column solved as before."""
    Xtr, ytr = breast_cancer_split[0][:120], breast_cancer_split[2][:120]
    y = np.where(ytr == ytr.max(), 1.0, -1.0)
    U = np.ones((len(y), 2))
    U[y < 0, 1] = 0.0
    problem = DualProblem(DenseGram(Kernel("rbf", gamma=0.5).block(Xtr)), np.c_[y, y], upper=U,
                          equality=True)
    np.testing.assert_array_equal(problem.one_sided(), [False, True])
    sol = SOLVERS[name].solve(problem, tol=1e-3, max_iter=100_000)
    reference = SOLVERS[name].solve(DualProblem(problem.operator, y, upper=1.0, equality=True),
                                    tol=1e-3, max_iter=100_000)
    assert sol.converged.all() and sol.kkt_violation.max() <= 1e-3
    np.testing.assert_array_equal(sol.alpha[:, 1], 0.0)
    assert sol.bias[1] >= 1.0 - 1e-3
    np.testing.assert_allclose(sol.objective[0], reference.objective[0], rtol=1e-3)
