"""Columns solved on K over their own samples (muflow.subproblems, issue 30 item 1): the same
solution as the column of the batch on K over all n samples, and one-vs-one on rows computed
on demand predicting as one-vs-one on a stored K and as libsvm."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.svm import SVC as LibsvmSVC

import muflow
from muflow.inmemory import numpy_gram
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.multiclass import binary_problems, ovo_pairs
from muflow.operators import DenseGram
from muflow.routing import solves_on_own_samples
from muflow.solvers.problem import DualProblem
from muflow.solvers.working_set import solve_working_set
from muflow.subproblems import solve_on_own_samples
from tests._references import usps_digits


def _four_classes(n=1200, seed=3):
    return make_classification(n_samples=n, n_features=20, n_informative=12, n_classes=4,
                               flip_y=0.05, random_state=seed)


def _pair_batch(operator, y, C=1.0):
    Y, member = binary_problems(y, int(y.max()) + 1)
    return DualProblem(operator, Y, upper=C * member, equality=True), member


def test_each_pair_on_its_own_samples_solves_the_column_of_the_batch():
    X, y = _four_classes()
    kernel = Kernel("rbf", gamma=0.05)
    K = numpy_gram(X, kernel, dtype=np.float64)
    batch, member = _pair_batch(DenseGram(K), y)
    reference = solve_working_set(batch, tol=1e-6)
    problem, _ = _pair_batch(KernelRows(X, kernel, dtype="float64"), y)
    solution = solve_on_own_samples(problem, member,
                                    lambda p, **kw: solve_working_set(p, tol=1e-6, **kw))
    assert solution.alpha.shape == reference.alpha.shape == (len(y), 6)
    assert np.all(solution.alpha[~member] == 0)  # the samples outside a pair stay pinned
    np.testing.assert_allclose(solution.objective, reference.objective, rtol=1e-7)
    # certified on the whole batch problem, on the stored K: the same KKT measure
    violation, _ = batch.kkt_violation(solution.alpha)
    assert np.all(violation <= 1e-6)
    np.testing.assert_allclose(solution.bias, reference.bias, atol=1e-4)
    assert solution.converged.all()
    assert solution.timings["restricted_samples"] == int(member.sum())


def test_the_batch_callback_sees_every_column_in_place_and_can_stop():
    X, y = _four_classes(400)
    problem, member = _pair_batch(KernelRows(X, Kernel("rbf", gamma=0.05), dtype="float64"), y)
    seen = []

    def callback(iteration, alpha, objective):
        seen.append((alpha.shape, np.isnan(objective).sum(), np.all(alpha[~member] == 0)))
        return len(seen) >= 3

    solution = solve_on_own_samples(problem, member,
                                    lambda p, **kw: solve_working_set(p, q=8, **kw),
                                    callback=callback)
    shape, pending, pinned = seen[0]
    assert shape == (400, 6) and pending == 5 and pinned
    # told to stop, it starts no other pair (issue 38: a time limit overran by a first step
    # per pair): those stay at their start, certified there
    assert len(seen) == 3
    started = np.any(solution.alpha != 0, axis=0)
    assert started.sum() == 1 and np.all(np.isfinite(solution.kkt_violation))
    assert np.all(solution.kkt_violation[~started] > 0) and not solution.converged[~started].any()
    np.testing.assert_array_equal(solution.gradient[:, ~started][member[:, ~started]], -1.0)


def test_a_stop_in_one_pair_reaches_the_later_pairs_before_their_first_step():
    """Every later pair heard the stop only at its first check, after a step that fetches the
    working set's rows; now none is started once the callback said stop."""
    X, y = _four_classes(400)
    problem, member = _pair_batch(KernelRows(X, Kernel("rbf", gamma=0.05), dtype="float64"), y)
    calls = []

    def solve(p, **kw):
        calls.append(p.m)
        return solve_working_set(p, q=8, **kw)

    solution = solve_on_own_samples(problem, member, solve, callback=lambda *a: True)
    assert calls == [1]  # the first (largest) pair only, stopped at its first check
    assert solution.alpha.shape == (400, 6) and solution.solver == "working_set"


def test_a_warm_start_is_read_on_each_columns_samples():
    X, y = _four_classes(600)
    problem, member = _pair_batch(KernelRows(X, Kernel("rbf", gamma=0.05), dtype="float64"), y)
    solve = lambda p, **kw: solve_working_set(p, tol=1e-6, **kw)  # noqa: E731
    cold = solve_on_own_samples(problem, member, solve)
    warm = solve_on_own_samples(problem, member, solve, init=(cold.alpha, cold.bias))
    assert warm.n_iter * 4 <= cold.n_iter  # started at the solution: a few certifying steps
    np.testing.assert_allclose(warm.objective, cold.objective, rtol=1e-9)


def test_the_rule_restricts_pairs_only_for_row_readers_on_rows_on_demand():
    X, y = _four_classes(300)
    kernel = Kernel("rbf", gamma=0.05)
    _, member = binary_problems(y, 4)
    rows = KernelRows(X, kernel)
    stored = DenseGram(numpy_gram(X, kernel, dtype=np.float64))
    assert solves_on_own_samples(rows, "working_set", member)
    assert solves_on_own_samples(rows, "smo", member)
    assert not solves_on_own_samples(stored, "working_set", member)  # K read in place
    assert not solves_on_own_samples(rows, "munk", member)  # one product for every column
    assert not solves_on_own_samples(rows, "working_set", np.ones((300, 1), dtype=bool))


def test_the_rule_solves_pairs_side_by_side_only_where_it_pays():
    from muflow.routing import FORK_MIN_SAMPLES, subproblem_processes

    big = [FORK_MIN_SAMPLES] * 6
    assert subproblem_processes(big, cores=2) == 2
    assert subproblem_processes(big[:3], cores=2) == 3  # 1.5 rounds of work, not 2
    assert subproblem_processes(big, cores=1) == 1
    assert subproblem_processes(big[:1], cores=2) == 1
    assert subproblem_processes(big[:5] + [FORK_MIN_SAMPLES - 1], cores=2) == 1
    assert subproblem_processes(big, cores=2, callback=print) == 1  # hears every iteration
    assert subproblem_processes(big, cores=2, nested=True) == 1


def test_pairs_side_by_side_in_forked_processes_solve_as_one_after_the_other(monkeypatch):
    """The same solution, each pair solved in a forked child on one thread (its solve
    reports the threads it may use)."""
    import muflow.routing
    from muflow.threads import thread_budget

    X, y = _four_classes(600)
    problem, member = _pair_batch(KernelRows(X, Kernel("rbf", gamma=0.05), dtype="float64"), y)

    def solve(p, **kw):
        sol = solve_working_set(p, tol=1e-6, **kw)
        sol.timings["threads"] = thread_budget()
        return sol

    alone = solve_on_own_samples(problem, member, solve)
    monkeypatch.setattr(muflow.routing, "FORK_MIN_SAMPLES", 1)
    forked = solve_on_own_samples(problem, member, solve)
    assert (alone.timings["processes"], forked.timings["processes"]) == (1, 2)
    assert forked.timings["threads"] == 6  # summed over the six pairs: one thread each
    np.testing.assert_allclose(forked.alpha, alone.alpha, atol=1e-12)
    np.testing.assert_allclose(forked.bias, alone.bias, atol=1e-12)
    np.testing.assert_allclose(forked.kkt_violation, alone.kkt_violation, atol=1e-8)
    assert forked.timings["restricted_samples"] == alone.timings["restricted_samples"]


@pytest.fixture(scope="module")
def usps_split():
    X, y = usps_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    train, test = order[:1500], order[1500:]
    return X[train], y[train], X[test], y[test]


@pytest.mark.parametrize("kernel", ["rbf", "poly"])
def test_ovo_on_rows_predicts_as_ovo_on_a_stored_gram_on_usps(usps_split, kernel):
    """Every pair on rows over its own samples against the pairs as columns of a stored K:
    the same problems, so the same objective per pair and the same predictions; and libsvm's."""
    Xtr, ytr, Xte, yte = usps_split
    params = dict(kernel=kernel, C=10.0, gamma=0.01, degree=3, coef0=1.0, solver="working_set",
                  tol=1e-4)
    rows = muflow.SVC(gram="rows", **params).fit(Xtr, ytr)
    stored = muflow.SVC(gram="stored", **params).fit(Xtr, ytr)
    assert rows.timings_["restricted_samples"] == sum(
        int(np.isin(ytr, pair).sum()) for pair in ovo_pairs(10))
    assert "restricted_samples" not in stored.timings_
    np.testing.assert_allclose(rows.objective_, stored.objective_, rtol=1e-5)
    assert rows.dual_coef_.shape[0] == stored.dual_coef_.shape[0] == 9
    assert rows.intercept_.shape == stored.intercept_.shape == (45,)
    assert np.mean(rows.predict(Xte) == stored.predict(Xte)) >= 0.995
    libsvm = LibsvmSVC(kernel=kernel, C=10.0, gamma=0.01, degree=3, coef0=1.0, tol=1e-4).fit(Xtr, ytr)
    assert np.mean(rows.predict(Xte) == libsvm.predict(Xte)) >= 0.995
    np.testing.assert_allclose(np.sort(rows.decision_function(Xte), axis=1),
                               np.sort(libsvm.decision_function(Xte), axis=1), atol=0.05)


def test_ovo_on_rows_above_the_stored_size_agrees_with_a_stored_gram():
    """gram="auto" above ROWS_MIN_SAMPLES: rows on demand, the working-set solver, pairs on
    their own samples; the same predictions and pair objectives as the pairs on a stored K,
    and libsvm's predictions."""
    X, y = make_classification(n_samples=10000, n_features=30, n_informative=15, n_classes=4,
                               flip_y=0.05, random_state=3)
    Xtr, ytr, Xte, yte = X[:8500], y[:8500], X[8500:], y[8500:]
    auto = muflow.SVC(gamma=0.03, cache_size=500).fit(Xtr, ytr)
    assert auto.solver_ == "working_set" and auto.rows_computed_ > 0
    assert "restricted_samples" in auto.timings_
    stored = muflow.SVC(gamma=0.03, gram="stored", solver="working_set").fit(Xtr, ytr)
    np.testing.assert_allclose(auto.objective_, stored.objective_, rtol=1e-5)
    assert np.mean(auto.predict(Xte) == stored.predict(Xte)) >= 0.995
    libsvm = LibsvmSVC(gamma=0.03, cache_size=500).fit(Xtr, ytr)
    assert np.mean(auto.predict(Xte) == libsvm.predict(Xte)) >= 0.995
    np.testing.assert_array_equal(auto.classes_, libsvm.classes_)
    assert auto.dual_coef_.shape[0] == libsvm.dual_coef_.shape[0]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_ovo_on_rows_resumes_from_a_checkpoint(tmp_path):
    """The checkpoint holds the batch's (n, m) alpha saved from the pairs' restricted solves;
    a fit resumed from it warm-starts every pair on its own samples and ends where a fit
    without a break ends."""
    X, y = _four_classes(900, seed=5)
    params = dict(gamma=0.05, gram="rows", solver="working_set", tol=1e-5)
    whole = muflow.SVC(**params).fit(X, y)
    cut = muflow.SVC(**params, max_iter=2).fit(X, y, checkpoint_dir=tmp_path, checkpoint_every=1)
    assert cut.fit_status_ == 1
    resumed = muflow.SVC(**params).fit(X, y, checkpoint_dir=tmp_path, checkpoint_every=1)
    assert resumed.fit_status_ == 0 and resumed.n_iter_.max() <= whole.n_iter_.max()
    np.testing.assert_allclose(resumed.objective_, whole.objective_, rtol=1e-7)
    np.testing.assert_array_equal(resumed.predict(X), whole.predict(X))


def test_svc_pairs_side_by_side_fit_as_one_after_the_other(monkeypatch):
    """SVC.fit on rows with its pairs in forked children: the model of the fit in process
    on one thread, as each child runs (more threads cut the row batches into other panels,
    whose products round apart in the last bits, and the solver's path drifts within tol)."""
    import muflow.routing

    X, y = _four_classes(800, seed=7)
    params = dict(gamma=0.05, gram="rows", tol=1e-5)
    alone = muflow.SVC(**params, n_jobs=1).fit(X, y)  # a budget of one thread: no fork
    monkeypatch.setattr(muflow.routing, "FORK_MIN_SAMPLES", 1)
    forked = muflow.SVC(**params, n_jobs=2).fit(X, y)  # two children of one thread each
    assert (alone.timings_["processes"], forked.timings_["processes"]) == (1, 2)
    np.testing.assert_array_equal(forked.support_, alone.support_)
    np.testing.assert_allclose(forked.dual_coef_, alone.dual_coef_, atol=1e-9)
    np.testing.assert_allclose(forked.intercept_, alone.intercept_, atol=1e-9)
    bounded = muflow.SVC(**params, time_limit=60.0).fit(X, y)  # a deadline hears every step
    assert bounded.timings_["processes"] == 1
