"""Hybrid (multiplicative then SMO on the support set) against libsvm and SciPy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.hybrid import solve_hybrid
from muflow.solvers.problem import DualProblem


def libsvm(K, y, C):
    from sklearn.svm import SVC

    ref = SVC(kernel="precomputed", C=C, tol=1e-8, max_iter=10**8).fit(K, y)
    alpha = np.zeros(len(y))
    alpha[ref.support_] = np.abs(ref.dual_coef_[0])
    return alpha, ref


@pytest.mark.parametrize("data, gamma, C, rule", [
    ("breast_cancer_split", 0.5, 1.0, None),
    ("sonar_split", 1.0, 10.0, "m3"),
])
def test_hybrid_exact_matches_libsvm(data, gamma, C, rule, request):
    Xtr, Xte, ytr, _ = request.getfixturevalue(data)
    y = np.where(np.asarray(ytr) > 0, 1.0, -1.0)
    K = Kernel("rbf", gamma=gamma).block(Xtr, Xtr)
    problem = DualProblem(DenseGram(K), y, upper=C, equality=True)
    sol = solve_hybrid(problem, tol=1e-3, rule=rule)
    assert sol.converged.all() and sol.solver == "hybrid"
    assert problem.kkt_violation(sol.alpha)[0][0] <= 1e-3 * (1 + 1e-9)
    for phase in ("multiplicative", "subset", "kkt", "total"):
        assert sol.timings[phase] >= 0.0
    alpha_ref, ref = libsvm(K, y, C)
    f_ref = problem.objective(alpha_ref[:, None])[0]
    assert abs(sol.objective[0] - f_ref) <= 1e-3 * abs(f_ref)
    Kte = Kernel("rbf", gamma=gamma).block(Xte, Xtr)
    ours = Kte @ (y * sol.alpha[:, 0]) + sol.bias[0]
    assert np.mean(np.sign(ours) == np.sign(ref.decision_function(Kte))) >= 0.99


def test_hybrid_without_intercept_matches_box_qp(generated_split):
    Xtr, Xte, ytr, _ = generated_split
    y = ytr.astype(float)
    kern = Kernel("rbf", gamma=0.3, offset=1.0)
    K = kern.block(Xtr, Xtr)
    upper = np.random.default_rng(2).uniform(0.5, 2.0, len(y))  # weighted
    problem = DualProblem(DenseGram(K), np.stack([y, -y], 1), upper=upper)
    sol = solve_hybrid(problem, tol=1e-4)
    Q = (y[:, None] * y[None, :]) * K
    res = minimize(lambda a: (0.5 * a @ Q @ a - a.sum(), Q @ a - 1), np.zeros(len(y)), jac=True,
                   method="L-BFGS-B", bounds=[(0, u) for u in upper],
                   options={"ftol": 1e-16, "gtol": 1e-11, "maxiter": 100_000})
    # Q is the same for y and -y: both columns share the reference
    np.testing.assert_allclose(sol.objective, res.fun, rtol=1e-3)
    Kte = kern.block(Xte, Xtr)
    agree = np.mean(np.sign(Kte @ (y * sol.alpha[:, 0])) == np.sign(Kte @ (y * res.x)))
    assert agree >= 0.99


def test_the_subset_phase_hears_the_callback_and_stops_when_told():
    """The callback reached the multiplicative passes only: the SMO phase, where the time
    goes, ran to the end whatever the callback (a deadline) answered."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    y = np.where(rng.random(300) < 0.5, 1.0, -1.0)
    problem = DualProblem(DenseGram(Kernel("rbf", gamma=0.05).block(X)), y, upper=1e4, equality=True)
    passes = 5
    heard = []

    def stop_in_subset_phase(iteration, alpha, objective):
        heard.append(iteration)
        return iteration > passes

    sol = solve_hybrid(problem, tol=1e-6, max_passes=passes, callback=stop_in_subset_phase)
    assert max(heard) > passes  # heard after the multiplicative passes
    assert sum(it > passes for it in heard) == 1  # and stopped at the first answer there
    assert not sol.converged.all() and sol.kkt_violation.max() > 1e-6
    assert np.all(sol.alpha >= 0) and np.all(sol.alpha <= 1e4)
    np.testing.assert_allclose(y @ sol.alpha, 0.0, atol=1e-6)


def test_a_hybrid_fit_stopped_by_its_time_limit_says_so():
    """SVC(solver="hybrid", time_limit=...) stopped only the multiplicative phase: the fit
    overran its limit by the whole SMO phase and reported fit_status_ = 0 with no warning.
    (The unlimited fit takes thousands of sweeps; the limit is a small part of it.)"""
    import warnings

    import muflow
    from sklearn.exceptions import ConvergenceWarning

    rng = np.random.default_rng(0)
    X = rng.normal(size=(800, 5))
    y = np.where(rng.random(800) < 0.5, 1, -1)
    muflow.SVC(C=1.0, gamma=1.0, solver="hybrid").fit(X[:100], y[:100])  # loops loaded first
    model = muflow.SVC(C=1e4, gamma=0.05, tol=1e-6, solver="hybrid", time_limit=0.2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert any(m.startswith("Solver stopped at time_limit=0.2 s") for m in messages), messages
    assert model.fit_status_ == 1 and not model.converged_.all()
    assert np.all(np.isfinite(model.dual_coef_))  # what was reached (maybe nothing yet, loaded)
