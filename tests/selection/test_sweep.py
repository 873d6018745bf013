"""muflow.selection.run_sweep: batched CV against one-configuration fits and GridSearchCV,
outputs, resume, successive halving, the solve paths and the CLI.

Every sweep here runs the real solvers on real data (breast cancer scaled by 1/10, sonar,
iris), on subsets of about 200 rows and small grids. BLAS is held to one thread: the
products are tiny and the CI machine is shared, where BLAS threads only contend.
"""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
from sklearn.model_selection import StratifiedKFold

import muflow
from muflow.exceptions import MuflowInputError
from muflow.selection import SweepGrid, run_sweep


@pytest.fixture(autouse=True)
def one_blas_thread():
    """BLAS on one thread, held as muflow holds it: a threadpoolctl limit of the test's
    own would be a caller's limit, and cap the sweeps' thread budget to 1."""
    from muflow.threads import blas_single_threaded

    with blas_single_threaded():
        yield


@pytest.fixture(scope="module")
def breast_cancer_200():
    """200 rows of breast cancer (seeded draw), features / 10, labels 2 / 4."""
    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 200, replace=False)
    return X[idx] / 10.0, y[idx]


@pytest.fixture(scope="module")
def sonar():
    """All 208 rows of sonar, labels "M" / "R"."""
    return muflow.datasets.load_sonar()


@pytest.fixture(scope="module")
def iris():
    """Iris: three classes (one-vs-rest columns), 150 rows."""
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    return X, y


def _without_times(table):
    """Rows as plain dicts without their solve times (which differ run to run)."""
    return [{k: v for k, v in row.to_dict().items() if k != "time_s"} for row in table]


def _alone_fold_accuracies(X, y, row, folds, seed, **svc):
    """Fit the row's configuration alone with muflow.SVC on each training fold."""
    accs = []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y):
        model = muflow.SVC(**row.params, **svc).fit(X[train], y[train])
        accs.append(model.score(X[test], y[test]))
    return np.array(accs)


# -- refused before any work --------------------------------------------------------------
@pytest.mark.parametrize("grid, options", [
    (SweepGrid([{"kernel": "rbf", "gamma": [-1.0]}], C=[1.0]), {}),
    (SweepGrid([{"kernel": "rbf"}], C=[1.0]), {"folds": 1}),
    (SweepGrid([{"kernel": "rbf"}], C=[1.0]), {"solver": "nonesuch"}),
])
def test_bad_grid_or_option_is_refused_before_any_work(grid, options, breast_cancer_200, tmp_path):
    X, y = breast_cancer_200
    with pytest.raises(MuflowInputError):
        run_sweep(X, y, grid, out_dir=tmp_path / "run", progress=False, **options)
    assert not (tmp_path / "run").exists()


def test_more_folds_than_the_smallest_class_is_refused(breast_cancer_200, tmp_path):
    X, y = breast_cancer_200
    y = y.copy()
    y[np.flatnonzero(y == 4)[3:]] = 2  # 3 samples left in class 4
    with pytest.raises(MuflowInputError, match=r"the smallest class \(4\) has only 3 samples"):
        run_sweep(X, y, SweepGrid([{"kernel": "rbf"}], C=[1.0]), folds=5,
                  out_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_class_of_one_sample_and_continuous_labels_are_refused_in_words(breast_cancer_200, tmp_path):
    """A class of one sample was refused as "use at most 1 folds" (folds must be >= 2), and
    continuous y the same way, where the command line says "continuous numbers, not
    classes"."""
    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf"}], C=[1.0])
    lonely = y.copy()
    lonely[0] = 99
    with pytest.raises(MuflowInputError, match=r"^the class 99 has only 1 sample; .* at least 2 "
                                               r"samples of every class: drop it or merge it"):
        run_sweep(X, lonely, grid, folds=2, out_dir=tmp_path / "run", progress=False)
    continuous = np.random.default_rng(0).normal(size=len(y))
    with pytest.raises(MuflowInputError, match=r"the labels \(y\) are continuous numbers, not classes"):
        run_sweep(X, continuous, grid, folds=2, out_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


# -- batched CV against one configuration at a time -----------------------------------------
@pytest.mark.parametrize("path", ["continuation", "batched"])
def test_every_configuration_matches_svc_fitted_alone_breast_cancer(breast_cancer_200, tmp_path, path):
    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]},
                      {"kernel": "poly", "degree": [2], "gamma": [0.5], "coef0": [1.0]}],
                     C=[0.1, 1.0, 10.0])
    result = run_sweep(X, y, grid, folds=5, seed=3, out_dir=tmp_path, solver="smo", path=path,
                       tol=1e-5, progress=False)
    assert len(result.table) == 6
    for row in result.table:
        alone = _alone_fold_accuracies(X, y, row, 5, 3, solver="smo", tol=1e-5)
        np.testing.assert_allclose(row.split_accuracies, alone, atol=1e-12, err_msg=str(row))
        assert row.mean_cv_accuracy == pytest.approx(alone.mean())


def test_every_configuration_matches_svc_fitted_alone_sonar(sonar, tmp_path):
    X, y = sonar
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05, 0.2]}], C=[1.0, 10.0])
    result = run_sweep(X, y, grid, folds=4, seed=0, out_dir=tmp_path, tol=1e-5, progress=False)
    assert {row.path for row in result.table} == {"continuation"}
    for row in result.table:
        alone = _alone_fold_accuracies(X, y, row, 4, 0, solver="smo", tol=1e-5)
        np.testing.assert_allclose(row.split_accuracies, alone, atol=1e-12, err_msg=str(row))


def test_multiplicative_batch_matches_svc_alone(breast_cancer_200, tmp_path):
    """The m3 batch: all (C, fold) columns advance with one K @ V per pass."""
    X, y = breast_cancer_200
    X, y = X[:120], y[:120]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path, solver="m3", path="batched",
                       tol=1e-2, max_iter=3000, progress=False)
    assert result.best_model.converged_.all()
    assert {row.solver for row in result.table} == {"m3"}
    for row in result.table:
        alone = _alone_fold_accuracies(X, y, row, 3, 0, solver="m3", tol=1e-2, max_iter=3000)
        np.testing.assert_allclose(row.split_accuracies, alone, atol=1e-12, err_msg=str(row))


@pytest.mark.parametrize("dataset", ["iris", "blobs4"])
def test_multiclass_one_vs_one_columns_match_svc_alone(dataset, iris, tmp_path):
    """Sweeps pose the one-vs-one pairs and vote as muflow.SVC does (one shared function,
    muflow.multiclass.predict_index): every fold's accuracy is SVC's on that fold. Four
    classes make 6 pairs, where one-vs-rest would have 4 columns."""
    from sklearn.datasets import make_blobs

    if dataset == "iris":
        X, y = iris
    else:
        X, y = make_blobs(n_samples=120, centers=4, cluster_std=2.5, random_state=1)
    k = len(np.unique(y))
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.2]}], C=[0.5, 5.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path, tol=1e-5, progress=False)
    for row in result.table:
        alone = _alone_fold_accuracies(X, y, row, 3, 0, solver="smo", tol=1e-5)
        np.testing.assert_allclose(row.split_accuracies, alone, atol=1e-12)
    model = result.best_model
    assert model.dual_coef_.shape == (k - 1, len(model.support_))  # libsvm's layout
    assert model.intercept_.shape == (k * (k - 1) // 2,)
    best = result.best
    refit = muflow.SVC(kernel="rbf", gamma=best["gamma"], C=best["C"], tol=1e-5).fit(X, y)
    assert np.mean(model.predict(X) == refit.predict(X)) >= 0.99


@pytest.mark.parametrize("dataset", ["breast_cancer_200", "sonar"])
def test_best_configuration_agrees_with_gridsearchcv(dataset, request, tmp_path):
    from sklearn.model_selection import GridSearchCV
    from sklearn.svm import SVC as LibsvmSVC

    X, y = request.getfixturevalue(dataset)
    gammas, Cs = [0.05, 0.5], [0.1, 1.0, 10.0]
    result = run_sweep(X, y, SweepGrid([{"kernel": "rbf", "gamma": gammas}], C=Cs), folds=5,
                       seed=0, out_dir=tmp_path, progress=False)
    cv = StratifiedKFold(5, shuffle=True, random_state=0)
    search = GridSearchCV(LibsvmSVC(), {"C": Cs, "gamma": gammas}, cv=cv).fit(X, y)
    ours = {(row.gamma, row.C): row.mean_cv_accuracy for row in result.table}
    theirs = {(p["gamma"], p["C"]): s for p, s in zip(search.cv_results_["params"],
                                                      search.cv_results_["mean_test_score"])}
    best = result.best
    same = (best["gamma"], best["C"]) == (search.best_params_["gamma"], search.best_params_["C"])
    # the acceptance rule: the same best configuration, or one within 0.2 points of it
    assert same or abs(best["cv_accuracy"] - search.best_score_) <= 0.002
    # libsvm's CV accuracy of our pick is also within 0.2 points of its best
    assert theirs[(best["gamma"], best["C"])] >= search.best_score_ - 0.002
    # and the whole tables agree to within one held-out sample per fold
    one_sample = 1.0 / (len(y) // 5)
    for key, acc in ours.items():
        assert abs(acc - theirs[key]) <= one_sample, key


# -- outputs ------------------------------------------------------------------------------
def test_outputs_best_model_test_metrics_and_plots(breast_cancer_200, tmp_path):
    X, y = breast_cancer_200
    Xtr, ytr, Xte, yte = X[:150], y[:150], X[150:], y[150:]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5, 2.0]}], C=[0.1, 1.0])
    result = run_sweep(Xtr, ytr, grid, folds=3, out_dir=tmp_path / "run", X_test=Xte, y_test=yte,
                       tol=1e-5, progress=True)
    paths = result.paths
    with open(paths["results"]) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4
    assert {"kernel", "gamma", "C", "mean_cv_accuracy", "std_cv_accuracy", "n_iter", "n_support",
            "time_s"} <= set(rows[0])
    best = json.loads(paths["best"].read_text())
    assert set(best) == {"kernel", "gamma", "C", "cv_accuracy", "cv_accuracy_std"}
    assert best["cv_accuracy"] == max(float(r["mean_cv_accuracy"]) for r in rows)
    # the best model is the refit on all training data: as muflow.SVC fitted there
    loaded = muflow.load(paths["best_model"])
    refit = muflow.SVC(kernel="rbf", gamma=best["gamma"], C=best["C"], solver="smo", tol=1e-5).fit(Xtr, ytr)
    np.testing.assert_allclose(loaded.decision_function(Xte), refit.decision_function(Xte), atol=1e-3)
    np.testing.assert_array_equal(result.best_model.predict(Xte), refit.predict(Xte))
    metrics = json.loads(paths["test_metrics"].read_text())
    assert metrics["accuracy"] == pytest.approx(refit.score(Xte, yte))
    for name in ("heatmap_rbf", "convergence"):
        assert paths[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".")]
    t = result.timings
    assert t["total"] == pytest.approx(t["gram"] + t["solve"] + t["refit"] + t["overhead"])
    assert t["refit"] > 0  # the best configuration was refitted on all rows
    per_c = {k: v for k, v in t.items() if k.startswith("solve C=")}
    assert len(per_c) == len(result.table) // 2 and all(v > 0 for v in per_c.values())


def test_best_model_keeps_the_parameters_as_the_grid_named_them(breast_cancer_200, tmp_path):
    """gamma "scale" stays "scale" in the best model's parameters, saved and loaded (as
    SVC.fit keeps it), while its kernel holds the value resolved on the training data: a
    clone refitted on other data resolves it there again."""
    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "poly", "degree": 2}], C=[0.1, 1.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "run", progress=False)
    model, loaded = result.best_model, muflow.load(result.paths["best_model"])
    alone = muflow.SVC(kernel="poly", degree=2, C=model.C).fit(X, y)
    for fitted in (model, loaded):
        assert fitted.get_params()["gamma"] == "scale"
        assert fitted.get_params()["degree"] == 2
        np.testing.assert_array_equal(fitted.predict(X), alone.predict(X))
    assert json.loads(result.paths["best"].read_text())["gamma"] == "scale"


@pytest.mark.parametrize("path", ["continuation", "batched"])
def test_forked_columns_equal_one_process(breast_cancer_200, tmp_path, path, monkeypatch):
    """n_jobs=2 splits the folds' columns (continuation chains, or cold solves) over
    forked processes sharing the budget of 2 threads (3 chains: 3 processes of one thread,
    time-shared, muflow.threads.divide_budget); the columns are independent, so the results
    are those of one process."""
    import muflow.selection.fork_pool as fork_pool

    forks = []
    real = fork_pool.forked_map

    def spy(run, n_tasks, processes, *, threads=None):
        forks.append((n_tasks, processes, threads))
        return real(run, n_tasks, processes, threads=threads)

    monkeypatch.setattr(fork_pool, "forked_map", spy)
    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0, 10.0])
    one = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "one", solver="smo", path=path,
                    progress=False, n_jobs=1)
    two = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "two", solver="smo", path=path,
                    progress=False, n_jobs=2)
    assert _without_times(one.table) == _without_times(two.table)
    np.testing.assert_array_equal(one.best_model.dual_coef_, two.best_model.dual_coef_)
    assert forks and all(processes * threads <= max(2, n_tasks) and threads == 1
                         for n_tasks, processes, threads in forks), forks


def test_compare_path_times_both_and_keeps_the_faster(breast_cancer_200, tmp_path):
    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5, 2.0]}], C=[0.1, 1.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path, solver="smo", path="compare",
                       progress=False)
    report = result.path_report["compare"]
    assert report["faster"] in ("batched", "continuation")
    assert report["batched_seconds"] > 0 and report["continuation_seconds"] > 0
    assert result.path_report["settings"][1]["path"] == report["faster"]


# -- resume -------------------------------------------------------------------------------
class _Interrupted(Exception):
    pass


def test_resume_skips_the_finished_kernel(breast_cancer_200, tmp_path, monkeypatch):
    """Interrupted after the first kernel setting, the resumed sweep neither rebuilds its Gram
    nor solves its configurations again; the final table equals an uninterrupted run's."""
    import muflow.inmemory
    from muflow.solvers.registry import SOLVERS

    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5, 2.0]}], C=[0.1, 1.0])
    grams, solves = [], []
    real_gram, real_smo = muflow.inmemory.numpy_gram, SOLVERS["smo"]

    def counting_gram(X, kernel, **kw):
        grams.append(kernel.gamma)
        return real_gram(X, kernel, **kw)

    def counting_solve(problem, **kw):
        solves.append(problem.m)
        return real_smo.solve(problem, **kw)

    monkeypatch.setattr(muflow.inmemory, "numpy_gram", counting_gram)
    monkeypatch.setitem(SOLVERS, "smo", dataclasses.replace(real_smo, solve=counting_solve))

    def fail_after_first(setting, rows):
        raise _Interrupted(setting)

    run = tmp_path / "run"
    with pytest.raises(_Interrupted):
        run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False,
                  on_kernel_done=fail_after_first, n_jobs=1)  # solves counted here, not forked
    assert grams == [0.5] and len(solves) == 3  # one solve per C (continuation), one refit
    assert not (run / "results.csv").exists()
    grams.clear(), solves.clear()
    resumed = run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False, resume=True,
                        n_jobs=1)
    # a refit only where the setting beats the finished one (the best model's setting)
    assert grams == [2.0] and len(solves) == (3 if resumed.best["gamma"] == 2.0 else 2)
    assert resumed.counts == {"grams_built": 1, "kernels_solved": 1, "kernels_resumed": 1}
    fresh = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "fresh", solver="smo", progress=False)
    assert _without_times(resumed.table) == _without_times(fresh.table)
    assert resumed.best == fresh.best
    # other options than the interrupted run's are refused rather than mixed in
    with pytest.raises(MuflowInputError, match=r"other settings \(folds differs\)"):
        run_sweep(X, y, grid, folds=4, out_dir=run, solver="smo", progress=False, resume=True)


def test_resume_takes_the_same_C_values_in_another_order(breast_cancer_200, tmp_path):
    """The sweep runs its C values ascending, so C = [1, 0.1] is the sweep of C = [0.1, 1];
    resuming with the values in another order was refused as a sweep of "other settings"
    (grid differ). Now it resumes, and the finished settings are not solved again."""
    X, y = breast_cancer_200
    run = tmp_path / "run"
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    first = run_sweep(X, y, grid, folds=3, out_dir=run, solver="smo", progress=False)
    reordered = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[1.0, 0.1])
    resumed = run_sweep(X, y, reordered, folds=3, out_dir=run, solver="smo", progress=False,
                        resume=True)
    assert resumed.counts["kernels_resumed"] == 1 and resumed.counts["kernels_solved"] == 0
    assert _without_times(resumed.table) == _without_times(first.table)
    with pytest.raises(MuflowInputError, match="grid differ"):
        run_sweep(X, y, SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[1.0, 10.0]),
                  folds=3, out_dir=run, solver="smo", progress=False, resume=True)


def test_resume_takes_the_same_grid_written_another_way(breast_cancer_200, tmp_path):
    """A grid of the same kernel settings written another way (``gamma=0.5`` or
    ``[0.5]``; gamma left out or given as its default "scale", as ``sweep --gamma scale``
    gives it) was refused on resume as a sweep of "other settings" (grid differ). Now it
    resumes without solving the finished settings again; other settings are still refused."""
    X, y = breast_cancer_200
    run = tmp_path / "run"
    first = run_sweep(X, y, SweepGrid([{"kernel": "rbf", "gamma": 0.5}, {"kernel": "rbf"}], C=[1.0]),
                      folds=3, out_dir=run, progress=False, n_jobs=1)
    written_otherwise = SweepGrid([{"kernel": "rbf", "gamma": [0.5]},
                                   {"kernel": "rbf", "gamma": "scale"}], C=1.0)
    resumed = run_sweep(X, y, written_otherwise, folds=3, out_dir=run, progress=False,
                        resume=True, n_jobs=1)
    assert resumed.counts["kernels_resumed"] == 2 and resumed.counts["kernels_solved"] == 0
    assert _without_times(resumed.table) == _without_times(first.table)
    with pytest.raises(MuflowInputError, match="grid differ"):  # the settings in another order
        run_sweep(X, y, SweepGrid([{"kernel": "rbf"}, {"kernel": "rbf", "gamma": 0.5}], C=[1.0]),
                  folds=3, out_dir=run, progress=False, resume=True)


def test_a_grid_of_numpy_values_runs_and_resumes(breast_cancer_200, tmp_path):
    """``gamma=np.logspace(...)`` (or a NumPy integer degree) stopped the sweep with
    "TypeError: Object of type ndarray is not JSON serializable" while it wrote sweep.json.
    Now the grid is recorded in Python's numbers, and resuming with the same NumPy grid
    (or the same values as a list) reads the finished settings back."""
    X, y = breast_cancer_200
    run = tmp_path / "run"
    grid = SweepGrid([{"kernel": "rbf", "gamma": np.logspace(-1, 0, 2)},
                      {"kernel": "poly", "degree": np.int64(2)}], C=np.array([0.1, 1.0]))
    first = run_sweep(X, y, grid, folds=3, out_dir=run, progress=False, n_jobs=1)
    assert json.loads((run / "sweep.json").read_text())["grid"]["kernels"][0]["gamma"] == [0.1, 1.0]
    as_lists = SweepGrid([{"kernel": "rbf", "gamma": [0.1, 1.0]}, {"kernel": "poly", "degree": 2}],
                         C=[0.1, 1.0])
    for again in (grid, as_lists):
        resumed = run_sweep(X, y, again, folds=3, out_dir=run, progress=False, resume=True, n_jobs=1)
        assert resumed.counts["kernels_resumed"] == 3 and resumed.counts["kernels_solved"] == 0
        assert _without_times(resumed.table) == _without_times(first.table)


# -- successive halving -------------------------------------------------------------------
def test_halving_stops_configurations_that_fall_behind(breast_cancer_200, tmp_path):
    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.01, 0.1, 1.0, 10.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path, solver="m3", path="batched",
                       halving=2, halving_min_iter=5, max_iter=400, progress=False)
    stopped = [row.stopped_early for row in result.table]
    # rung 1 keeps ceil(4/2) = 2, rung 2 keeps 1: three configurations stop early
    assert sum(stopped) == 3
    best_row = max(result.table, key=lambda r: r.mean_cv_accuracy)
    assert not best_row.stopped_early
    assert best_row.n_iter > max(r.n_iter for r in result.table if r.stopped_early)
    with pytest.raises(MuflowInputError, match="halving"):
        run_sweep(X, y, grid, out_dir=tmp_path / "b", path="continuation", halving=2, progress=False)


def test_a_configuration_halving_stopped_is_never_the_best(tmp_path):
    """The best is chosen among the configurations halving let run, which are solved to tol:
    on 300 USPS digits (3, 5, 8) C=100 stopped after a rung of 35 pair steps at a rung
    accuracy of 0.8967, above the survivor C=10's 0.8867 (its solution's is 0.8867 too), and
    became the best model, best.json reporting the rung's score."""
    from tests.conftest import shared_data

    digits = np.loadtxt(shared_data("zip.test"), usecols=range(257))  # a line has a trailing blank
    y_all = digits[:, 0].astype(int)
    rng = np.random.default_rng(0)
    idx = rng.choice(np.flatnonzero(np.isin(y_all, [3, 5, 8])), 300, replace=False)
    X, y = digits[idx, 1:], y_all[idx]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.005, 0.02]}], C=[0.01, 0.1, 1.0, 10.0, 100.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path, halving=2, halving_min_iter=5,
                       progress=False)
    stopped = [row for row in result.table if row.stopped_early]
    assert max(r.mean_cv_accuracy for r in stopped) > result.best["cv_accuracy"]  # the trap
    best = next(r for r in result.table if (r.gamma, r.C) == (result.best["gamma"], result.best["C"]))
    assert not best.stopped_early and best.converged
    assert best.mean_cv_accuracy == max(r.mean_cv_accuracy for r in result.table
                                        if not r.stopped_early)
    assert result.best_model.C == result.best["C"]


def test_halving_on_the_default_path_of_a_solver_that_reads_rows(sonar, tmp_path):
    """path="auto" with halving takes the batched path for SMO too (it took the continuation
    path, which has no rungs, and halving was dropped without a word)."""
    X, y = sonar
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.05]}], C=[0.1, 1.0, 10.0, 100.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path, solver="smo", halving=2,
                       halving_min_iter=1, progress=False)
    assert result.path_report["settings"][0]["path"] == "batched"
    assert sum(row.stopped_early for row in result.table) == 3


# -- command line -------------------------------------------------------------------------
def test_cli_sweep_writes_the_run_directory(breast_cancer_200, tmp_path, capsys):
    from muflow.cli import main

    X, y = breast_cancer_200
    np.savez(tmp_path / "train.npz", X=X[:150], y=y[:150])
    np.savez(tmp_path / "test.npz", X=X[150:], y=y[150:])
    out = tmp_path / "out"
    code = main(["sweep", "--data", str(tmp_path / "train.npz"), "--test-data", str(tmp_path / "test.npz"),
                 "--kernel", "rbf,poly", "--gamma", "0.5", "--degree", "2", "--C", "0.1,1",
                 "--folds", "3", "--out", str(out), "--no-progress"])
    assert code == 0
    best = json.loads((out / "best.json").read_text())
    assert best["kernel"] in ("rbf", "poly") and "cv_accuracy" in best
    assert len(list(csv.DictReader(open(out / "results.csv")))) == 4
    assert "best:" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--C", "0,1"], "--C must be positive"),
    (["--kernel", "rbf", "--degree", "2"], "none of the kernels"),
    (["--folds", "500"], "smallest class"),
    (["--kernel", "rbf", "--gamma", "-1"], "--gamma must be positive"),
    # the sweep's C is finite: its messages neither offer 'inf' nor call it not a number
    (["--C", "-1"], "--C must be positive, got -1"),
    (["--C", "inf"], "--C must be finite in a sweep (C=inf, the hard margin, is `fit --C inf`), got inf"),
    (["--kernel", ""], "--kernel is empty"),
])
def test_cli_bad_input_exits_2(breast_cancer_200, tmp_path, capsys, argv, message):
    from muflow.cli import main

    X, y = breast_cancer_200
    np.savez(tmp_path / "train.npz", X=X, y=y)
    code = main(["sweep", "--data", str(tmp_path / "train.npz"), "--out", str(tmp_path / "out"),
                 "--no-progress", *argv])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_gram_store_cache_is_reused_across_sweeps(breast_cancer_200, tmp_path, monkeypatch):
    """With cache_dir, each kernel setting's Gram goes to the zarr store cache of muflow.gram;
    a second sweep over the same data reads the stores and computes no tile."""
    import muflow.gram.build

    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5, 2.0]}], C=[0.1, 1.0])
    reports = []
    real_build = muflow.gram.build.build_gram

    def recording_build(*args, **kwargs):
        reports.append(real_build(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(muflow.gram.build, "build_gram", recording_build)
    first = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "a", cache_dir=tmp_path / "cache",
                      progress=False)
    assert len(reports) == 2 and all(r.computed for r in reports)
    assert len(list((tmp_path / "cache").glob("gram-*.zarr"))) == 2
    written = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*") if p.is_file()}
    reports.clear()
    second = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "b", cache_dir=tmp_path / "cache",
                       progress=False)
    # a complete store is opened as it is, read-only: no build is asked for, nothing written
    assert not any(r.computed for r in reports)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").rglob("*") if p.is_file()} == written
    assert [r.mean_cv_accuracy for r in first.table] == [r.mean_cv_accuracy for r in second.table]


def test_sweep_on_a_dask_cluster_matches_the_in_memory_sweep(breast_cancer_200, tmp_path):
    """With a client, "auto" runs the working-set solver on X partitioned over the workers
    (continuation over C); "munk" runs on the same partitions with their kernel panels,
    every column (C x folds) in one round trip a pass (muflow.dask.panels), no Gram store.
    Same CV accuracies as in memory."""
    from tests.dask_cluster import local_client

    X, y = breast_cancer_200
    X, y = X[:120], y[:120]
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.5]}], C=[0.1, 1.0])
    options = dict(folds=3, solver="auto", path="auto", tol=1e-2, max_iter=3000, progress=False)
    with local_client(2) as client:
        remote = run_sweep(X, y, grid, out_dir=tmp_path / "dask", client=client,
                           cache_dir=tmp_path / "cache", **options)
        remote_munk = run_sweep(X, y, grid, out_dir=tmp_path / "dask-munk", client=client,
                                cache_dir=tmp_path / "cache", **dict(options, solver="munk"))
    local = run_sweep(X, y, grid, out_dir=tmp_path / "local", **dict(options, solver="working_set"))
    local_munk = run_sweep(X, y, grid, out_dir=tmp_path / "local-munk", **dict(options, solver="munk"))
    assert {r.solver for r in remote.table} == {"working_set"}
    assert {r.path for r in remote.table} == {"continuation"}
    assert {(r.solver, r.path) for r in remote_munk.table} == {("munk", "batched")}
    assert not list((tmp_path / "cache").glob("*.zarr"))
    for a, b in zip(remote.table, local.table):
        assert a.mean_cv_accuracy == pytest.approx(b.mean_cv_accuracy, abs=0.01)
    for a, b in zip(remote_munk.table, local_munk.table):
        assert a.mean_cv_accuracy == pytest.approx(b.mean_cv_accuracy, abs=1e-12)
    assert remote.best_model.predict(X).shape == (len(y),)
    with pytest.raises(MuflowInputError, match="reads rows of K"):
        run_sweep(X, y, grid, out_dir=tmp_path / "x", client=object(), solver="smo", progress=False)


def test_pool_size_ends_uneven_folds_together():
    from muflow.forking import makespan, pool_size

    assert pool_size(5, 2) == 3  # 3 + 2 tasks: 1.5 + 1 rounds instead of 1 + 1 + 1
    assert makespan(5, 3, 2) == 2.5 < makespan(5, 2, 2) == 3
    assert pool_size(4, 2) == 2 and pool_size(1, 4) == 1 and pool_size(3, 4) == 3


def test_long_curves_are_thinned_for_plotting_keeping_both_ends():
    from muflow.report import _plotted_points

    assert np.array_equal(_plotted_points(10, True), np.arange(10))
    at = _plotted_points(200_000, True)
    assert at[0] == 0 and at[-1] == 199_999 and len(at) <= 4002 and np.all(np.diff(at) > 0)
    # log axis: the early iterations, where the curve falls fastest, are all kept
    assert np.array_equal(at[:100], np.arange(100))


@pytest.mark.parametrize("path", ["continuation", "batched"])
def test_iterations_are_reported_in_the_unit_of_svc_n_iter(breast_cancer_200, tmp_path, path):
    """SMO counts sweeps of n pair steps; SVC's n_iter_ counts libsvm's pair steps (a sweep
    of a large problem is 1). The sweep's table and its best model count as SVC does."""
    from muflow.solvers.registry import svc_iteration_unit

    X, y = breast_cancer_200
    grid = SweepGrid([{"kernel": "rbf", "gamma": 0.5}], C=[1.0, 10.0])
    result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "run", solver="smo", path=path,
                       tol=1e-5, progress=False)
    alone = muflow.SVC(kernel="rbf", gamma=0.5, C=10.0, solver="smo", tol=1e-5).fit(X, y)
    # fewer pair steps than samples: 1 sweep begun, and SVC counts the steps
    assert 1 < alone.n_iter_[0] < len(y)
    assert min(row.n_iter for row in result.table) > 1
    model = result.best_model
    assert 1 < model.n_iter_.max() < len(y)
    assert muflow.load(result.paths["best_model"]).n_iter_.max() == model.n_iter_.max()
    assert svc_iteration_unit("smo") == "pair step" and svc_iteration_unit("m3") == "pass"


# -- solves that stop short of tol --------------------------------------------------------
def test_unconverged_solves_are_flagged_and_warned(sonar, tmp_path):
    """Solves stopped at max_iter above tol were reported finished=True without a word (the
    best model's KKT violation far above tol, fit_status_=1). Each row now says whether
    every fold solve of it reached tol, and the sweep warns once: how many configurations
    did not converge, the worst KKT violation, and what to raise."""
    from sklearn.exceptions import ConvergenceWarning

    X, y = sonar
    grid = SweepGrid([{"kernel": "rbf", "gamma": [1.0]}], C=[1.0, 100.0])
    with pytest.warns(ConvergenceWarning, match=r"2 of 2 configurations did not converge") as caught:
        result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "run", solver="munk",
                           max_iter=5, progress=False)
    message = str([w for w in caught if "did not converge" in str(w.message)][0].message)
    assert "max_iter" in message and "KKT violation" in message and "best model" in message
    rows = list(csv.DictReader(open(result.paths["results"])))
    assert [r["converged"] for r in rows] == ["False", "False"]
    assert all(float(r["kkt_violation"]) > 1e-3 for r in rows)
    assert result.best_model.fit_status_ == 1

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        done = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "smo", solver="smo", progress=False)
    assert all(row.converged for row in done.table)
    assert all(r["converged"] == "True" for r in csv.DictReader(open(done.paths["results"])))

# -- the command line's grid over --config ------------------------------------------------
_TWO_KERNELS = """[grid]
C = [0.1, 1.0]
kernels = [
  { kernel = "poly", degree = [2, 3], gamma = [0.1], coef0 = [1.0] },
  { kernel = "rbf", gamma = [0.01, 0.05] },
]
"""


def _cli_grid(*argv):
    from muflow.cli import build_parser
    from muflow.commands.sweep import grid_from_args

    args = build_parser().parse_args(["sweep", "--data", "d.npz", "--out", "o", *argv])
    return grid_from_args(args)[0]


def test_cli_kernel_parameters_override_the_config_kernels_that_take_them(tmp_path):
    """--gamma, --degree or --coef0 with --config replaced the file's whole kernel list by
    rbf (a poly and rbf grid became rbf alone), and --degree on an rbf file was refused as
    "none of the kernels (rbf)". Now a parameter from the command line overrides that
    parameter on the file's kernels that take it; --kernel replaces the kernels."""
    g2 = tmp_path / "g2.toml"
    g2.write_text(_TWO_KERNELS)
    grid = _cli_grid("--config", str(g2), "--gamma", "0.5")
    assert grid.kernels == [{"kernel": "poly", "degree": [2, 3], "gamma": [0.5], "coef0": [1.0]},
                            {"kernel": "rbf", "gamma": [0.5]}]
    assert grid.C == [0.1, 1.0]
    grid = _cli_grid("--config", str(g2), "--degree", "4", "--coef0", "0,2")
    assert grid.kernels == [{"kernel": "poly", "degree": [4], "gamma": [0.1], "coef0": [0.0, 2.0]},
                            {"kernel": "rbf", "gamma": [0.01, 0.05]}]
    grid = _cli_grid("--config", str(g2), "--kernel", "linear,rbf", "--gamma", "2")
    assert grid.kernels == [{"kernel": "linear"}, {"kernel": "rbf", "gamma": [2.0]}]
    g1 = tmp_path / "g1.toml"
    g1.write_text('[grid]\nC = [1.0]\nkernels = [{ kernel = "rbf", gamma = [0.1] }]\n')
    with pytest.raises(MuflowInputError, match=r"--degree is given but none of the kernels "
                                               r"\(rbf\) of .*g1.toml takes degree"):
        _cli_grid("--config", str(g1), "--degree", "3")


def test_max_iter_defaults_to_no_limit_as_svc(tmp_path):
    """The sweep's default budget is SVC's: -1, no limit (in SVC's unit a fixed default of
    10,000 pair steps leaves these noisy C=1e4 solves short of tol); -1 is accepted where given,
    and 0 is refused in words naming it."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from sklearn.datasets import make_classification

    X, y = make_classification(400, n_features=5, flip_y=0.2, random_state=0)
    grid = SweepGrid([{"kernel": "rbf", "gamma": [1.0]}], C=[1.0, 1e4])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "run", solver="smo",
                           progress=False)
    assert all(row.converged for row in result.table)
    assert result.best_model.max_iter == -1 and result.best_model.fit_status_ == 0
    assert max(row.n_iter for row in result.table) > 10_000  # more than a fixed default gave
    with pytest.raises(MuflowInputError, match="max_iter must be an integer >= 1.*-1 for no limit"):
        run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "bad", max_iter=0, progress=False)


def test_max_iter_counts_in_the_unit_of_svc(sonar, tmp_path):
    """max_iter=20 with SMO let each solve take 20 sweeps of n pair steps (rows with n_iter
    226 and 493; a best model saying max_iter=20, n_iter_=257, fit_status_=0), where
    SVC(max_iter=20) stops at 20 pair steps. The sweep now takes max_iter in SVC's unit."""
    from sklearn.exceptions import ConvergenceWarning

    X, y = sonar
    grid = SweepGrid([{"kernel": "rbf", "gamma": [1.0]}], C=[1.0, 100.0])
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        result = run_sweep(X, y, grid, folds=3, out_dir=tmp_path / "run", solver="smo",
                           max_iter=20, progress=False)
    assert all(row.n_iter <= 20 and not row.converged for row in result.table)
    model = result.best_model
    with pytest.warns(ConvergenceWarning):
        alone = muflow.SVC(kernel="rbf", gamma=1.0, C=model.C, solver="smo", max_iter=20).fit(X, y)
    assert model.max_iter == 20 and model.n_iter_.max() <= 20
    assert model.fit_status_ == alone.fit_status_ == 1
    assert model.n_iter_.max() == alone.n_iter_.max() == 20


def test_cli_sets_the_first_rung_of_successive_halving(tmp_path):
    """--halving-min-iter reaches the sweep's options (the command line had no way to set
    the first rung, which run_sweep and [sweep] halving_min_iter take); alone, without
    --halving, it is refused in words saying what to add."""
    from muflow.cli import build_parser
    from muflow.commands.sweep import grid_from_args
    from muflow.selection.grid import check_options

    def options(*argv):
        args = build_parser().parse_args(["sweep", "--data", "d.npz", "--out", "o", *argv])
        return grid_from_args(args)[1]

    assert options("--halving", "3", "--halving-min-iter", "4")["halving_min_iter"] == 4
    assert "halving_min_iter" not in options("--halving", "3")
    with pytest.raises(MuflowInputError, match="add --halving ETA"):
        options("--halving-min-iter", "4")
    with pytest.raises(MuflowInputError, match="halving_min_iter must be an integer >= 1"):
        check_options({"halving": 2, "halving_min_iter": 0})


def test_a_config_file_rung_waits_for_halving_from_the_command_line(tmp_path):
    """`sweep --config f.toml --halving 3` with halving_min_iter in the file's [sweep]: the
    file alone has halving off, but the command line turns it on, so the file's rung is
    taken; without --halving it is refused naming the file."""
    from muflow.cli import build_parser
    from muflow.commands.sweep import grid_from_args

    cfg = tmp_path / "g.toml"
    cfg.write_text('[grid]\nC = [1.0]\nkernels = [{ kernel = "rbf", gamma = [0.1] }]\n'
                   '[sweep]\nhalving_min_iter = 4\n')

    def options(*argv):
        args = build_parser().parse_args(["sweep", "--data", "d.npz", "--out", "o",
                                          "--config", str(cfg), *argv])
        return grid_from_args(args)[1]

    assert options("--halving", "3")["halving_min_iter"] == 4
    with pytest.raises(MuflowInputError, match=r"g.toml: sweep.halving_min_iter = 4 .*halving"):
        options()


def test_a_config_files_gram_storage_options_go_with_its_url_cache(tmp_path, monkeypatch):
    """`sweep --config f.toml`: the file's [gram] cache at a URL reaches run_sweep with its
    storage_options ("${NAME}" read from the environment); a local --cache-dir on the
    command line replaces that cache, and options no local store takes are not given."""
    from muflow.cli import build_parser
    from muflow.commands.sweep import grid_from_args

    cfg = tmp_path / "g.toml"
    cfg.write_text('[grid]\nC = [1.0]\nkernels = [{ kernel = "rbf", gamma = [0.1] }]\n'
                   '[gram]\ncache_dir = "s3://b/gram"\n'
                   'storage_options = { endpoint_url = "${GRAM_ENDPOINT}" }\n')
    monkeypatch.setenv("GRAM_ENDPOINT", "http://minio:9000")

    def options(*argv):
        args = build_parser().parse_args(["sweep", "--data", "d.npz", "--out", "o",
                                          "--config", str(cfg), *argv])
        return grid_from_args(args)[1]

    assert options()["storage_options"] == {"endpoint_url": "http://minio:9000"}
    local = options("--cache-dir", str(tmp_path / "cache"))
    assert local["cache_dir"] == str(tmp_path / "cache") and "storage_options" not in local
