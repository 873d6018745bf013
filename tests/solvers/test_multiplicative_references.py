"""Every multiplicative solver, every intercept mode, against an independent reference.

- intercept "exact": libsvm through scikit-learn's SVC(kernel="precomputed");
- "none" and "regularized" (kernel + 1): the box-constrained dual solved to high precision
  with SciPy's L-BFGS-B.

Agreement: dual objective within 1e-3 relative, predictions on held-out points agreeing on
at least 99%.
"""

import numpy as np
import pytest

import muflow
from muflow.exceptions import SolverCombinationError
from muflow.kernels import Kernel
from tests.conftest import dual_objective, reference_box_qp, reference_libsvm

SOLVER_NAMES = ("m3", "m3_flipped", "munk", "musik", "seminmf")
INTERCEPTS = ("exact", "regularized", "none")
C = 1.0


def _reference(kernel, X_train, y_train, X_test, intercept):
    K = kernel.block(X_train)
    K_test = kernel.block(X_test, X_train)
    if intercept == "exact":
        alpha, ref = reference_libsvm(K, y_train, C)
        return dual_objective(K, y_train, alpha), ref.predict(K_test)
    offset = 1.0 if intercept == "regularized" else 0.0
    alpha = reference_box_qp(K + offset, y_train, C)
    scores = (K_test + offset) @ (y_train * alpha)
    return dual_objective(K + offset, y_train, alpha), np.where(scores > 0, 1, -1)


@pytest.fixture(scope="module")
def references(breast_cancer_split, sonar_split, generated_split):
    cases = {}
    for name, split in (("breast_cancer", breast_cancer_split), ("sonar", sonar_split),
                        ("generated", generated_split)):
        X_train, X_test, y_train, y_test = split
        X_train, y_train = X_train[:150], y_train[:150]
        kernel = Kernel("rbf", gamma=1.0 / X_train.shape[1])
        for intercept in INTERCEPTS:
            cases[name, intercept] = (kernel, X_train, y_train, X_test,
                                      _reference(kernel, X_train, y_train, X_test, intercept))
    return cases


@pytest.mark.parametrize("intercept", INTERCEPTS)
@pytest.mark.parametrize("solver", SOLVER_NAMES)
@pytest.mark.parametrize("dataset", ("breast_cancer", "sonar", "generated"))
def test_solver_matches_reference(references, dataset, solver, intercept):
    kernel, X_train, y_train, X_test, (f_ref, pred_ref) = references[dataset, intercept]
    model = muflow.SVC(kernel="rbf", gamma=kernel.gamma, C=C, solver=solver, intercept=intercept,
                       tol=1e-3, max_iter=30_000).fit(X_train, y_train)
    rel = abs(model.objective_[0] - f_ref) / abs(f_ref)
    assert rel < 1e-3, f"objective {model.objective_[0]} vs reference {f_ref} (rel {rel:.1e})"
    agreement = np.mean(model.predict(X_test) == pred_ref)
    assert agreement >= 0.99


@pytest.mark.parametrize("solver", ("m3", "m3_flipped", "musik", "seminmf"))
@pytest.mark.parametrize("intercept", INTERCEPTS)
def test_signed_kernel_matches_reference(generated_split, solver, intercept):
    """Linear kernel on signed features: a kernel with negative entries (A = A+ - A-)."""
    X_train, X_test, y_train, _ = generated_split
    kernel = Kernel("linear")
    f_ref, pred_ref = _reference(kernel, X_train, y_train, X_test, intercept)
    model = muflow.SVC(kernel="linear", C=C, solver=solver, intercept=intercept, tol=1e-3,
                       max_iter=30_000).fit(X_train, y_train)
    assert abs(model.objective_[0] - f_ref) / abs(f_ref) < 1e-3
    assert np.mean(model.predict(X_test) == pred_ref) >= 0.99


def test_munk_refuses_a_signed_kernel_and_names_the_alternatives(generated_split):
    X_train, _, y_train, _ = generated_split
    with pytest.raises(SolverCombinationError, match="non-negative.*musik.*seminmf"):
        muflow.SVC(kernel="linear", solver="munk").fit(X_train, y_train)


def test_auto_picks_a_valid_solver(generated_split):
    X_train, _, y_train, _ = generated_split
    assert muflow.SVC(kernel="linear").fit(X_train, y_train).solver_ != "munk"
    assert muflow.SVC(kernel="rbf").fit(X_train, y_train).solver_ in muflow.solvers.SOLVERS


def test_hard_margin_on_separable_data_matches_libsvm_with_huge_C():
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(size=(25, 2)) + 3, rng.normal(size=(25, 2)) - 3])
    y = np.repeat([1, -1], 25)
    model = muflow.SVC(kernel="rbf", gamma=0.5, C=float("inf"), solver="munk", tol=1e-6).fit(X, y)
    K = Kernel("rbf", gamma=0.5).block(X)
    alpha, _ = reference_libsvm(K, y, 1e10)
    f_ref = dual_objective(K, y, alpha)
    assert abs(model.objective_[0] - f_ref) / abs(f_ref) < 1e-3
    assert model.score(X, y) == 1.0


@pytest.fixture(scope="module")
def zero_row_problem():
    """scikit-learn's check_estimators_dtypes data: 20 x 5 integers in 0..2, one row all
    zeros (sample 15). Under a polynomial kernel with coef0 = 0 that row of K is zero, so its
    factor jumps from 0 to the bound where its linear term c_i + lambda y_i crosses zero, and
    the solution puts lambda on that jump with alpha_15 strictly inside the box."""
    rng = np.random.RandomState(0)
    X = (3 * rng.uniform(size=(20, 5))).astype(np.int64)
    y = np.array([-1, 1] * 10)
    assert not X[15].any()
    gamma = 1.0 / (X.shape[1] * X.var())
    K = Kernel("poly", gamma=gamma, degree=3, coef0=0.0).block(X.astype(float))
    alpha, _ = reference_libsvm(K, y, C)
    return X, y, gamma, dual_objective(K, y, alpha)


@pytest.mark.parametrize("solver", ("m3", "munk", "musik", "seminmf"))
def test_zero_kernel_row_exact_intercept_matches_libsvm(zero_row_problem, solver):
    """The root of M3 eq. (17) on the jump of a zero row of K: a feasible iterate (sum_i
    y_i alpha_i = 0) that converges to libsvm's objective, not one above tol for ever."""
    X, y, gamma, f_ref = zero_row_problem
    model = muflow.SVC(kernel="poly", gamma=gamma, C=C, solver=solver, tol=1e-3,
                       max_iter=20_000).fit(X, y)
    coef = model.dual_coef_[0]
    assert abs(coef.sum()) <= 1e-9 * np.abs(coef).sum(), "sum_i y_i alpha_i != 0"
    assert model.fit_status_ == 0
    assert abs(model.objective_[0] - f_ref) <= 1e-3 * abs(f_ref)
    assert model.objective_[0] >= f_ref - 1e-9 * abs(f_ref)  # below the minimum: infeasible
