"""The working-set decomposition solver: libsvm for the exact bias, SciPy references for the
variants, the estimator, and the solver's own invariants (rows only, shared cache, shrinking)."""

from __future__ import annotations

from functools import partial


import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import muflow
from muflow import inmemory
from muflow.exceptions import MuflowInputError
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.operators import DenseGram, GramOperator
from muflow.solvers.problem import DualProblem
from muflow.solvers.registry import SOLVERS
from muflow.solvers.smo import solve_smo
from muflow.solvers.working_set import default_q, solve_working_set
from tests._references import a8a, box_qp
from tests.solvers._operators import RowsOnlyGram
from tests.solvers.test_smo import libsvm, primal_reference, rbf

#: Our tolerance on the KKT measure: tight enough that F is within 1e-4 relative of libsvm's
#: optimum (run at 1e-8) and at most one test prediction in 200 differs.
TOL = 1e-4
OBJECTIVE_RTOL = 1e-4
AGREEMENT = 0.995


def same_sign(a, b):
    return np.mean(np.sign(a) == np.sign(b))


class ProductsRefused(RowsOnlyGram):
    """Rows and the diagonal only: a product (what the solver must not need from a cold
    start) fails, as it would cost a pass over K computed on demand."""

    def matmul(self, V):
        raise AssertionError("the working-set solver asked for a product K @ V")

    def matmul_precise(self, V):
        return self.matmul(V)


def operator(kind, K):
    """K in memory (rows read in place) or behind ``rows`` only (rows fetched and evicted)."""
    return DenseGram(K) if kind == "in_place" else ProductsRefused(K)


@pytest.fixture
def a8a_subset():
    X, y = a8a(1200)
    return X[:800], X[800:], y[:800], y[800:]


@pytest.mark.parametrize("kind", ["in_place", "rows"])
@pytest.mark.parametrize("data, gamma, C", [
    ("breast_cancer_split", 0.5, 1.0),
    ("sonar_split", 1.0, 10.0),
    ("generated_split", 0.3, 1.0),
    ("a8a_subset", 0.05, 1.0),  # sparse X
])
def test_matches_libsvm(data, gamma, C, kind, request):
    Xtr, Xte, ytr, _ = request.getfixturevalue(data)
    ytr = np.where(np.asarray(ytr) > 0, 1.0, -1.0)
    K = rbf(Xtr, Xtr, gamma)
    problem = DualProblem(operator(kind, K), ytr, upper=C, equality=True)
    # a cache of ~40 rows: the working set is cut to fit it and rows are evicted
    sol = solve_working_set(problem, tol=TOL, cache_mb=40 * 8 * len(ytr) / 2**20)
    assert sol.converged.all() and sol.solver == "working_set"
    if kind == "rows":
        assert sol.timings["q"] <= 40 and sol.timings["rows_fetched"] > 0
    a = sol.alpha[:, 0]
    assert np.all(a >= 0) and np.all(a <= C)
    assert abs(ytr @ a) <= 1e-10 * max(1.0, a.sum())
    reference = DualProblem(DenseGram(K), ytr, upper=C, equality=True)
    assert reference.kkt_violation(sol.alpha)[0][0] <= TOL * (1 + 1e-9)
    alpha_ref, ref = libsvm(K, ytr, C)
    f_ref = reference.objective(alpha_ref[:, None])[0]
    assert abs(sol.objective[0] - f_ref) <= OBJECTIVE_RTOL * abs(f_ref)
    Kte = rbf(Xte, Xtr, gamma)
    ours = Kte @ (ytr * a) + sol.bias[0]
    assert same_sign(ours, ref.decision_function(Kte)) >= AGREEMENT


@pytest.mark.parametrize("form, dtype", [("dense", "float64"), ("dense", "float32"),
                                         ("sparse", "float32")])
def test_on_rows_computed_from_X_matches_libsvm(form, dtype, monkeypatch):
    """Rows on demand (:class:`KernelRows`, never K): a8a's binary features, dense or kept
    sparse (the CSR product path), rows in float32 or float64; libsvm on the float64 K."""
    X, y = a8a(1500)
    if form == "sparse":
        monkeypatch.setattr(inmemory, "DENSIFY_MAX_FEATURES", 0)
    else:
        X = X.toarray()
    kernel = Kernel("rbf", gamma=0.05)
    op = KernelRows(X, kernel, dtype=dtype)
    sol = solve_working_set(DualProblem(op, y, upper=1.0, equality=True), tol=TOL, cache_mb=4.0)
    assert sol.converged.all() and op.rows_computed == sol.timings["rows_fetched"] < len(y)
    K = kernel.block_reference(sp.csr_matrix(X) if form == "sparse" else X)
    exact = DualProblem(DenseGram(K), y, upper=1.0, equality=True)
    alpha_ref, ref = libsvm(K, y, 1.0)
    f_ref = exact.objective(alpha_ref[:, None])[0]
    assert abs(exact.objective(sol.alpha)[0] - f_ref) <= OBJECTIVE_RTOL * abs(f_ref)
    decision = K @ (y * sol.alpha[:, 0]) + sol.bias[0]
    assert same_sign(decision, ref.decision_function(K)) >= AGREEMENT


def test_many_outer_iterations_of_four_variables_agree(breast_cancer_split):
    Xtr, Xte, ytr, _ = breast_cancer_split
    ytr = ytr.astype(float)
    K = rbf(Xtr, Xtr, 0.5)
    problem = DualProblem(ProductsRefused(K), ytr, upper=1.0, equality=True)
    sol = solve_working_set(problem, tol=TOL, q=4, cache_mb=0.05)
    assert sol.converged.all() and sol.timings["q"] == 4 and sol.n_iter > 50
    alpha_ref, ref = libsvm(K, ytr, 1.0)
    f_ref = DualProblem(DenseGram(K), ytr, upper=1.0, equality=True).objective(alpha_ref[:, None])[0]
    assert abs(sol.objective[0] - f_ref) <= OBJECTIVE_RTOL * abs(f_ref)
    Kte = rbf(Xte, Xtr, 0.5)
    ours = Kte @ (ytr * sol.alpha[:, 0]) + sol.bias[0]
    assert same_sign(ours, ref.decision_function(Kte)) >= AGREEMENT


@pytest.mark.parametrize("solver", ["working_set", "smo"])
def test_weighted_matches_libsvm_sample_weight(breast_cancer_split, solver):
    """Per-sample bounds C w_i against libsvm's sample_weight; SMO on K stored (tol 1e-3),
    the working set on its rows only."""
    Xtr, Xte, ytr, _ = breast_cancer_split
    ytr = ytr.astype(float)
    w = np.random.default_rng(3).uniform(0.2, 3.0, len(ytr))
    K = rbf(Xtr, Xtr, 0.5)
    if solver == "smo":
        operator, solve, rtol = DenseGram(K), partial(solve_smo, tol=1e-3), 1e-3
    else:
        operator, solve, rtol = ProductsRefused(K), partial(solve_working_set, tol=TOL, q=64, cache_mb=0.5), OBJECTIVE_RTOL
    sol = solve(DualProblem(operator, ytr, upper=2.0 * w, equality=True))
    alpha_ref, ref = libsvm(K, ytr, 2.0, sample_weight=w)
    f_ref = DualProblem(DenseGram(K), ytr, upper=2.0 * w, equality=True).objective(alpha_ref[:, None])[0]
    assert abs(sol.objective[0] - f_ref) <= rtol * abs(f_ref)
    Kte = rbf(Xte, Xtr, 0.5)
    ours = Kte @ (ytr * sol.alpha[:, 0]) + sol.bias[0]
    assert same_sign(ours, ref.decision_function(Kte)) >= AGREEMENT


@pytest.mark.parametrize("solver", ["working_set", "smo"])
@pytest.mark.parametrize("intercept", [True, False])
def test_weighted_drifted_matches_scipy_primal(sonar_split, intercept, solver):
    """Linear kernel: the primal (beta, b, xi) is a small QP that SciPy solves exactly. SMO
    reads K stored, the working set only its rows (products refused)."""
    Xtr, Xte, ytr, _ = sonar_split
    X, y = Xtr[:80], ytr[:80].astype(float)
    rng = np.random.default_rng(5)
    upper = 0.5 * rng.uniform(0.5, 2.0, len(y))
    offset = rng.normal(scale=0.3, size=len(y))
    if solver == "smo":
        operator, solve, rtol = DenseGram(X @ X.T), partial(solve_smo, tol=1e-4), 1e-3
    else:
        operator, solve, rtol = ProductsRefused(X @ X.T), partial(solve_working_set, tol=1e-6, q=16), OBJECTIVE_RTOL
    sol = solve(DualProblem(operator, y, upper=upper, linear=-1.0 + y * offset, equality=intercept))
    beta_ref, b_ref, p_ref = primal_reference(X, y, upper, offset, intercept=intercept)
    assert abs(-sol.objective[0] - p_ref) <= rtol * abs(p_ref)  # strong duality
    beta = X.T @ (y * sol.alpha[:, 0])
    assert same_sign(Xte @ beta + sol.bias[0], Xte @ beta_ref + b_ref) >= AGREEMENT


@pytest.mark.parametrize("intercept", ["none", "regularized"])
def test_box_constrained_modes_match_a_precise_qp_and_smo(generated_split, intercept):
    """Without the sum constraint ("regularized" is the kernel plus one): L-BFGS-B at machine
    precision, per-sample bounds and a drifted linear term."""
    Xtr, _, ytr, _ = generated_split
    y = ytr.astype(float)
    K = rbf(Xtr, Xtr, 0.3) + (1.0 if intercept == "regularized" else 0.0)
    rng = np.random.default_rng(2)
    upper = rng.uniform(0.2, 2.0, len(y))
    linear = -1.0 + y * rng.normal(scale=0.2, size=len(y))
    sol = solve_working_set(DualProblem(ProductsRefused(K), y, upper=upper, linear=linear),
                            tol=1e-6, q=16)
    assert sol.converged.all() and sol.bias.tolist() == [0.0]
    _, f_ref = box_qp(K, y, upper, linear)
    assert abs(sol.objective[0] - f_ref) <= 1e-7 * abs(f_ref)
    smo = solve_smo(DualProblem(DenseGram(K), y, upper=upper, linear=linear), tol=1e-6)
    np.testing.assert_allclose(sol.alpha, smo.alpha, atol=1e-4)


def test_warm_start_reaches_the_same_solution_in_fewer_outer_iterations(a8a_subset):
    Xtr, _, ytr, _ = a8a_subset
    K = rbf(Xtr, Xtr, 0.05)
    problem = lambda C: DualProblem(RowsOnlyGram(K), ytr, upper=C, equality=True)  # noqa: E731
    previous = solve_working_set(problem(1.0), tol=TOL, q=64)
    cold = solve_working_set(problem(1.2), tol=TOL, q=64)
    warm = solve_working_set(problem(1.2), init=previous, tol=TOL, q=64)
    assert cold.converged.all() and warm.converged.all()
    assert warm.n_iter < cold.n_iter
    np.testing.assert_allclose(warm.objective, cold.objective, rtol=1e-5)


def test_a_warm_start_costs_one_product_and_a_cold_start_none(generated_split):
    """A start of alpha alone (or a DualSolution, which may be another problem's): one
    product for the batch; a start that carries its gradient, ``(alpha, bias, gradient)``
    from a solution of this solver (:attr:`DualSolution.gradient`): none, and the same
    result."""
    Xtr, _, ytr, _ = generated_split
    K = rbf(Xtr, Xtr, 0.3)
    Y = np.stack([ytr, -ytr], axis=1).astype(float)
    products = []

    class Counting(RowsOnlyGram):
        def matmul(self, V):
            products.append(V.shape)
            return super().matmul(V)

    cold = solve_working_set(DualProblem(Counting(K), Y, upper=1.0, equality=True), tol=TOL)
    assert products == []
    solve_working_set(DualProblem(Counting(K), Y, upper=1.0, equality=True), init=cold, tol=TOL)
    assert products == [(len(ytr), 2)]  # both columns' start in one product
    products.clear()
    warm = solve_working_set(DualProblem(Counting(K), Y, upper=2.0, equality=True),
                             init=(2.0 * cold.alpha, cold.bias), tol=TOL)
    assert products == [(len(ytr), 2)]
    np.testing.assert_allclose(cold.gradient, rbf_gradient(K, Y, cold.alpha), atol=1e-9)
    # scaled with its gradient (continuation.scaled_start): no product, the same solution
    carried = solve_working_set(DualProblem(Counting(K), Y, upper=2.0, equality=True),
                                init=(2.0 * cold.alpha, cold.bias, 2.0 * cold.gradient + 1.0),
                                tol=TOL)
    assert products == [(len(ytr), 2)]
    assert carried.n_iter == warm.n_iter
    np.testing.assert_allclose(carried.alpha, warm.alpha, atol=1e-9)
    # a gradient that does not hold at the feasible start (clipped) is not used
    solve_working_set(DualProblem(Counting(K), Y, upper=0.5, equality=True),
                      init=(2.0 * cold.alpha, cold.bias, 2.0 * cold.gradient + 1.0), tol=TOL)
    assert len(products) == 2


def rbf_gradient(K, Y, alpha):
    """Q alpha + p column by column, p = -1."""
    return Y * (K @ (Y * alpha)) - 1.0


def test_batch_equals_columns_and_shares_the_row_cache(generated_split):
    Xtr, _, ytr, _ = generated_split
    Y = np.stack([ytr, -ytr, np.where(Xtr[:, 1] > 0, 1, -1)], axis=1).astype(float)
    K = rbf(Xtr, Xtr, 0.3)
    batch = solve_working_set(DualProblem(ProductsRefused(K), Y, upper=1.0, equality=True),
                              tol=1e-7, q=16)
    fetched = 0
    for j in range(3):
        one = solve_working_set(DualProblem(ProductsRefused(K), Y[:, j], upper=1.0, equality=True),
                                tol=1e-7, q=16)
        # the same solution, not the same path: rows a column finds cached let it rank
        # both sides by the second-order rule where a fresh cache ranks one by first order
        np.testing.assert_allclose(batch.alpha[:, j], one.alpha[:, 0], atol=1e-5)
        np.testing.assert_allclose(batch.objective[j], one.objective[0], rtol=1e-10)
        fetched += one.timings["rows_fetched"]
    # the rows the first column fetched serve the others
    assert batch.timings["rows_fetched"] < fetched
    assert batch.timings["cache_hits"] > 0


def test_shrinking_narrows_the_selection_and_the_certificate_is_exact(a8a_subset):
    Xtr, _, ytr, _ = a8a_subset
    K = rbf(Xtr, Xtr, 0.05)
    make = lambda: DualProblem(ProductsRefused(K), ytr, upper=1.0, equality=True)  # noqa: E731
    shrunk = solve_working_set(make(), tol=TOL, q=64)
    plain = solve_working_set(make(), tol=TOL, q=64, shrinking=False)
    assert shrunk.timings["max_shrunk"] > len(ytr) // 4 and "max_shrunk" not in plain.timings
    # the certificate was taken on the maintained gradient: an independent product agrees
    independent = DualProblem(DenseGram(K), ytr, upper=1.0, equality=True)
    violation, _ = independent.kkt_violation(shrunk.alpha)
    np.testing.assert_allclose(shrunk.kkt_violation, violation, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(shrunk.objective, independent.objective(shrunk.alpha), rtol=1e-12)
    np.testing.assert_allclose(shrunk.objective, plain.objective, rtol=1e-5)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), C=st.floats(0.05, 20.0), n=st.integers(5, 60),
       q=st.sampled_from([2, 4, 8, 64]), equality=st.booleans(), shrinking=st.booleans())
def test_feasible_monotone_and_certified(seed, C, n, q, equality, shrinking):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    y[0], y[1] = 1.0, -1.0
    upper = C * rng.uniform(0.0, 2.0, n)
    upper[rng.random(n) < 0.2] = 0.0  # pinned samples (a fold's held-out part)
    upper[:2] = C
    K = rbf(X, X, 0.7)
    problem = DualProblem(ProductsRefused(K), y, upper=upper, equality=equality)
    sol = solve_working_set(problem, tol=1e-5, q=q, shrinking=shrinking, cache_mb=0.001)
    a = sol.alpha[:, 0]
    assert np.all(a >= 0) and np.all(a <= upper)
    if equality:
        assert abs(y @ a) <= 1e-9 * max(1.0, a.sum())
    assert sol.converged.all()
    independent = DualProblem(DenseGram(K), y, upper=upper, equality=equality)
    assert independent.kkt_violation(sol.alpha)[0][0] <= 1e-5 * (1 + 1e-7)
    curve = sol.objective_curve[:, 0]
    assert np.all(np.diff(curve) <= 1e-9 * (1 + abs(curve[0])))


def test_max_iter_callback_and_q(breast_cancer_split):
    Xtr, _, ytr, _ = breast_cancer_split
    K = rbf(Xtr, Xtr, 0.5)
    problem = DualProblem(DenseGram(K), ytr.astype(float), upper=1.0, equality=True)
    capped = solve_working_set(problem, tol=1e-12, max_iter=3, q=8)
    assert capped.n_iter == 3 and not capped.converged.any()
    seen = []
    stopped = solve_working_set(problem, tol=1e-12, q=8,
                                callback=lambda it, alpha, F: seen.append(it) or it == 2)
    assert stopped.n_iter == 2 and seen == [1, 2]
    assert solve_working_set(problem, tol=1e-3, max_iter=0).n_iter == 0
    with pytest.raises(MuflowInputError, match="even integer"):
        solve_working_set(problem, q=5)
    assert [default_q(n) for n in (100, 22_696, 100_000, 10**7)] == [64, 512, 1024, 2048]


def test_registered_as_a_rows_solver_for_every_intercept():
    info = SOLVERS["working_set"]
    assert info.needs == "rows" and set(info.intercepts) == {"exact", "regularized", "none"}
    assert info.iteration_unit.startswith("outer iteration")


def test_svc_fits_and_predicts_like_smo_dense_and_sparse(a8a_subset):
    Xtr, Xte, ytr, _ = a8a_subset
    params = dict(kernel="rbf", gamma=0.05, C=1.0, tol=TOL)
    smo = muflow.SVC(solver="smo", **params).fit(Xtr, ytr)
    sparse = muflow.SVC(solver="working_set", **params).fit(Xtr, ytr)
    dense = muflow.SVC(solver="working_set", **params).fit(Xtr.toarray(), ytr)
    on_rows = muflow.SVC(solver="working_set", gram="rows", cache_size=1.0, **params).fit(Xtr, ytr)
    assert sparse.solver_ == "working_set" and sparse.converged_.all() and on_rows.converged_.all()
    np.testing.assert_allclose(sparse.objective_, smo.objective_, rtol=OBJECTIVE_RTOL)
    np.testing.assert_allclose(on_rows.objective_, smo.objective_, rtol=OBJECTIVE_RTOL)
    assert sp.issparse(sparse.dual_coef_) and sp.issparse(sparse.support_vectors_)  # as scikit-learn
    np.testing.assert_allclose(dense.dual_coef_, sparse.dual_coef_.toarray(), atol=1e-8)
    for model in (sparse, on_rows):
        assert np.mean(model.predict(Xte) == smo.predict(Xte)) >= AGREEMENT


def test_svc_one_vs_rest(generated_split):
    Xtr, Xte, _, _ = generated_split
    y = np.digitize(Xtr[:, 0] + Xtr[:, 1], [-0.7, 0.7])  # three classes: three columns
    params = dict(kernel="rbf", gamma=0.3, C=1.0, tol=TOL)
    smo = muflow.SVC(solver="smo", **params).fit(Xtr, y)
    ws = muflow.SVC(solver="working_set", **params).fit(Xtr, y)
    assert ws.converged_.all() and len(ws.classes_) == 3
    np.testing.assert_allclose(ws.objective_, smo.objective_, rtol=OBJECTIVE_RTOL)
    assert np.mean(ws.predict(Xte) == smo.predict(Xte)) >= AGREEMENT


def test_without_rows_it_is_refused():
    class ProductsOnly(GramOperator):
        n, nonnegative = 4, True

        def matmul(self, V):
            return V

    from muflow.exceptions import SolverCombinationError

    with pytest.raises(SolverCombinationError, match="solver 'working_set' reads rows"):
        solve_working_set(DualProblem(ProductsOnly(), np.array([1.0, -1, 1, -1]), equality=True))
