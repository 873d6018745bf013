"""A sweep whose Gram does not fit in memory computes rows of K on demand (issue 16, item 4):
no Gram is built, and every configuration scores as with the stored Gram."""

from __future__ import annotations

import numpy as np
import pytest

from muflow import inmemory, memory
from muflow.kernel_rows import KernelRows
from muflow.selection import SweepGrid, run_sweep
from tests._references import a8a


def test_a_sweep_whose_gram_does_not_fit_reads_rows_on_demand(tmp_path, monkeypatch):
    X, y = a8a(400)
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[0.5, 2.0])
    options = dict(folds=3, solver="smo", tol=1e-4, progress=False)
    stored = run_sweep(X, y, grid, out_dir=tmp_path / "stored", **options)

    def refuse(*args, **kwargs):
        raise AssertionError("a Gram was built although it does not fit")

    # 1 MiB free: K of 400 samples (0.6 MiB in float32) takes more than half of it
    monkeypatch.setattr(memory, "available_memory_bytes", lambda: 2**20)
    monkeypatch.setattr(inmemory, "numpy_gram", refuse)
    monkeypatch.setattr(inmemory, "empty_populated", refuse)
    computed = []
    rows_into = KernelRows.rows_into

    def counted(self, idx, data, slots):
        computed.append(len(idx))
        return rows_into(self, idx, data, slots)

    monkeypatch.setattr(KernelRows, "rows_into", counted)
    rows = run_sweep(X, y, grid, out_dir=tmp_path / "rows", **options)
    assert sum(computed) > 0
    assert len(rows.table) == len(stored.table) == 2
    for a, b in zip(rows.table, stored.table):
        assert a.C == b.C
        assert a.mean_cv_accuracy == pytest.approx(b.mean_cv_accuracy, abs=1e-9)
    assert rows.best["C"] == stored.best["C"]


def test_a_sweep_above_the_stored_size_runs_the_working_set_on_rows_and_scores_as_libsvm(
        tmp_path, monkeypatch):
    """Above the sweep's stored-K size (lowered here so the data stay small) the sweep takes
    the path SVC.fit takes: rows on demand, the working-set solver, each fold on its own
    samples, warm-started along C, and the refit by the same engine. Its CV accuracies are
    those of the same sweep on a stored K and of scikit-learn's GridSearchCV (libsvm) on
    the same folds, and it picks the same best C."""
    from sklearn.datasets import make_classification
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC as LibsvmSVC

    from muflow import routing

    X, y = make_classification(n_samples=3000, n_features=20, n_informative=10, flip_y=0.05,
                               random_state=7)
    Cs, gamma = [0.1, 1.0, 10.0], 0.02
    grid = SweepGrid([{"kernel": "rbf", "gamma": [gamma]}], C=Cs)
    # n_jobs=1: the folds' chains in this process, where the restrictions are counted
    options = dict(folds=3, seed=0, tol=1e-3, progress=False, n_jobs=1)
    stored = run_sweep(X, y, grid, out_dir=tmp_path / "stored", **options)
    assert [stored.path_report["settings"][0][k] for k in ("gram", "solver")] == ["stored", "smo"]

    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 2000)
    restricted = []
    restrict = KernelRows.restricted

    def counted(self, idx):
        restricted.append(len(idx))
        return restrict(self, idx)

    monkeypatch.setattr(KernelRows, "restricted", counted)
    rows = run_sweep(X, y, grid, out_dir=tmp_path / "rows", **options)
    report = rows.path_report["settings"][0]
    assert (report["gram"], report["solver"], report["path"]) == ("rows", "working_set", "continuation")
    assert rows.best_model.solver_ == "working_set"
    # each fold's problem on its own 2,000 training samples, one operator for its whole C
    # path; then each fold's scores from its support vectors alone (a subset of its
    # training samples)
    assert restricted[:3] == [2000] * 3
    assert len(restricted) == 6 and all(0 < k <= 2000 for k in restricted[3:])

    search = GridSearchCV(LibsvmSVC(kernel="rbf", gamma=gamma, tol=1e-3), {"C": Cs},
                          cv=StratifiedKFold(3, shuffle=True, random_state=0)).fit(X, y)
    for k, (a, b) in enumerate(zip(rows.table, stored.table)):
        assert a.C == b.C == Cs[k]
        assert abs(a.mean_cv_accuracy - b.mean_cv_accuracy) <= 1e-3
        assert abs(a.mean_cv_accuracy - search.cv_results_["mean_test_score"][k]) <= 1e-3
    assert rows.best["C"] == stored.best["C"] == search.best_params_["C"]
    # the refit is SVC.fit's engine on the same rows: the same model
    reference = LibsvmSVC(kernel="rbf", gamma=gamma, C=rows.best["C"], tol=1e-3).fit(X, y)
    assert np.mean(rows.best_model.predict(X) == reference.predict(X)) >= 0.999


def test_one_vs_one_pairs_of_a_sweep_on_rows_are_solved_on_their_folds_samples(tmp_path, monkeypatch):
    """Three classes above the (lowered) stored-K size: every (fold, pair) column is solved on
    rows over the training samples of its fold in its pair, and scores as on a stored K."""
    from sklearn.datasets import make_classification

    from muflow import routing

    X, y = make_classification(n_samples=1500, n_features=12, n_informative=6, n_classes=3,
                               n_clusters_per_class=1, flip_y=0.03, random_state=3)
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[0.5, 5.0])
    # n_jobs=1: the folds' chains in this process, where the restrictions are counted
    options = dict(folds=3, seed=1, tol=1e-3, progress=False, n_jobs=1)
    stored = run_sweep(X, y, grid, out_dir=tmp_path / "stored", **options)

    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 1000)
    sizes = []
    restrict = KernelRows.restricted

    def counted(self, idx):
        sizes.append((self.n, len(idx)))
        return restrict(self, idx)

    monkeypatch.setattr(KernelRows, "restricted", counted)
    rows = run_sweep(X, y, grid, out_dir=tmp_path / "rows", **options)
    report = rows.path_report["settings"][0]
    assert (report["gram"], report["solver"]) == ("rows", "working_set")
    # 3 folds x 3 pairs during the folds (one operator a pair for both C), each fold's
    # scores from its support vectors, then the refit's 3 pairs on all 1,500 samples
    folds_part, scores_part, refit_part = sizes[:9], sizes[9:12], sizes[12:]
    assert all(n == 1500 and 600 <= k <= 720 for n, k in folds_part)  # 2/3 of 2/3 of 1,500
    assert all(0 < k <= 1000 for _, k in scores_part)
    assert len(refit_part) == 3 and all(900 <= k <= 1100 for _, k in refit_part)
    for a, b in zip(rows.table, stored.table):
        assert abs(a.mean_cv_accuracy - b.mean_cv_accuracy) <= 1e-3
    assert rows.best["C"] == stored.best["C"]
    assert np.mean(rows.best_model.predict(X) == stored.best_model.predict(X)) >= 0.999


def test_the_sweep_command_hands_its_cache_size_to_the_solves_on_rows(tmp_path, monkeypatch, capsys):
    from sklearn.datasets import make_classification

    from muflow import routing
    from muflow.cli import main
    from muflow.solvers import working_set

    X, y = make_classification(n_samples=600, n_features=8, random_state=5)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 300)
    sizes = []
    row_cache = working_set.row_cache

    def recorded(operator, cache_mb, *bound):
        sizes.append(cache_mb)
        return row_cache(operator, cache_mb, *bound)

    monkeypatch.setattr(working_set, "row_cache", recorded)
    argv = ["sweep", "--data", str(tmp_path / "train.npz"), "--C", "1,10", "--gamma", "0.1",
            "--folds", "3", "--no-progress", "--n-jobs", "1"]  # the solves here, where counted
    assert main(argv + ["--out", str(tmp_path / "out"), "--cache-size", "3"]) == 0
    assert len(sizes) == 2 * 3 + 1 and set(sizes) == {3.0}  # every fold at every C, the refit
    assert main(argv + ["--out", str(tmp_path / "bad"), "--cache-size", "0"]) == 2
    assert "--cache-size must be a positive" in capsys.readouterr().err


def test_a_fold_keeps_its_rows_and_its_gradient_along_its_C_path(tmp_path, monkeypatch):
    """Above the stored-K size each fold runs its whole C path on one operator over its own
    samples: the rows the first C computed stay in that operator's row cache for the next
    (whose solves compute almost none), and each next start's gradient is the previous
    solution's scaled (no product). The CV accuracies are those of fresh operators per C."""
    from sklearn.datasets import make_classification

    from muflow import routing
    from muflow.selection import continuation

    X, y = make_classification(n_samples=1800, n_features=10, n_informative=6, flip_y=0.05,
                               random_state=2)
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[0.1, 1.0, 10.0])
    # n_jobs=1: the folds' chains in this process, where the solves are recorded
    options = dict(folds=3, seed=0, tol=1e-3, progress=False, n_jobs=1)
    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 1000)
    solves = []
    solve = continuation.ChainState.solve

    def recorded(self, problem, **kwargs):
        sol = solve(self, problem, **kwargs)
        solves.append((float(problem.upper.max()), sol.timings["rows_fetched"],
                       sol.timings["full_gradient"], sol.timings["restricted_samples"]))
        return sol

    monkeypatch.setattr(continuation.ChainState, "solve", recorded)
    kept = run_sweep(X, y, grid, out_dir=tmp_path / "kept", **options)
    assert [C for C, *_ in solves] == [0.1, 1.0, 10.0] * 3  # fold by fold, C ascending
    for f in range(3):
        (_, first, _, samples), *later = solves[3 * f:3 * f + 3]
        assert first >= 0.5 * samples  # the first C computes most of the fold's rows
        assert all(rows <= 0.1 * first for _, rows, _, _ in later)
        assert all(product == 0.0 for _, _, product, _ in later)

    # the same sweep with a fresh operator and cache at every C and the start's gradient
    # computed by a product
    fresh = []

    def fresh_solve(self, problem, *, init=None, callback=None, kept=None):
        init = None if init is None else init[:2]
        sol = solve(self, problem, init=init, callback=callback, kept=None)
        fresh.append(sol.timings["rows_fetched"])
        return sol

    monkeypatch.setattr(continuation.ChainState, "solve", fresh_solve)
    cold = run_sweep(X, y, grid, out_dir=tmp_path / "fresh", **options)
    assert sum(fresh) > 2 * sum(rows for _, rows, _, _ in solves)
    for a, b in zip(kept.table, cold.table):
        assert abs(a.mean_cv_accuracy - b.mean_cv_accuracy) <= 1e-3
    assert kept.best["C"] == cold.best["C"]


def test_the_refit_starts_from_the_folds_products_and_meets_tol(tmp_path, monkeypatch):
    """On rows the refit's start (the mean of the folds' solutions) takes its gradient from
    the folds' (their solvers' gradients at their training samples, the decision values at
    their held-out ones) instead of a product: those products are K @ (y alpha) as a
    float64 K gives them, and the refit certifies on the exact K within tol."""
    from sklearn.datasets import make_classification
    from sklearn.metrics.pairwise import rbf_kernel

    from muflow import routing
    from muflow.operators import DenseGram
    from muflow.selection import kernel_solve
    from muflow.selection import sweep as sweep_module
    from muflow.solvers import DualProblem

    X, y = make_classification(n_samples=1500, n_features=10, n_informative=6, flip_y=0.05,
                               random_state=4)
    gamma, tol = 0.05, 1e-3
    grid = SweepGrid([{"kernel": "rbf", "gamma": [gamma]}], C=[0.5, 5.0])
    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 1000)
    seen = []
    refit = kernel_solve.refit

    def recorded(operator, Y, C, res, c, *args, **kwargs):
        seen.append((Y, C, res.alpha.copy(), None if res.products is None else res.products.copy(),
                     res.block(c)))
        out = refit(operator, Y, C, res, c, *args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(sweep_module, "refit_setting", recorded)
    result = run_sweep(X, y, grid, folds=3, seed=0, tol=tol, progress=False, out_dir=tmp_path)
    (Y, C, alpha, products, block), out = seen
    assert products is not None and np.isfinite(products[:, block]).all()
    K = rbf_kernel(X, X, gamma=gamma)
    exact = K @ (Y[:, [0]] * alpha[:, block])
    np.testing.assert_allclose(products[:, block], exact, atol=1e-4)
    problem = DualProblem(DenseGram(K), Y, upper=C, equality=True)
    violation, _ = problem.kkt_violation(np.asarray(out.alpha))
    assert violation[0] <= tol
    assert result.best_model.solver_ == "working_set"
