"""The pipeline's stages read back what earlier stages wrote, checked (issue 33, item 1)."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.exceptions import MuflowInputError
from muflow.pipeline import load_split


def test_a_split_holding_nan_is_refused_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    X_train, X_test = rng.normal(size=(10, 3)), rng.normal(size=(4, 3))
    X_test[2, 1] = np.inf
    np.savez(tmp_path / "data.npz", X_train=X_train, X_test=X_test, y_train=np.arange(10) % 2,
             y_test=np.arange(4) % 2)
    with pytest.raises(MuflowInputError, match=rf"{tmp_path}/data.npz is damaged \(X_test holds "
                                               "NaN or inf\\); delete it and data.json"):
        load_split(tmp_path)


def test_a_split_cut_short_is_refused_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", X_train=rng.normal(size=(10, 3)), X_test=rng.normal(size=(4, 3)),
             y_train=np.arange(10) % 2, y_test=np.arange(4) % 2)
    content = (tmp_path / "data.npz").read_bytes()
    (tmp_path / "data.npz").write_bytes(content[: len(content) // 2])
    with pytest.raises(MuflowInputError, match=rf"{tmp_path}/data.npz is damaged \(BadZipFile: .*\); "
                                               "delete it and data.json, then resume"):
        load_split(tmp_path)


def test_the_refit_reports_iterations_in_the_unit_of_n_iter(tmp_path):
    """refit.json and the summary count as SVC's n_iter_ does, and name the unit: SMO's pair
    steps (libsvm's), where the solver's own sweeps of n steps read 1 on a whole fit."""
    import dataclasses

    import muflow
    from muflow.config import default_config
    from muflow.pipeline import refit_best, summary_rows

    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 250, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    np.savez(tmp_path / "data.npz", X_train=X[:200], X_test=X[200:], y_train=y[:200],
             y_test=y[200:])
    cfg = default_config()
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, solver="smo"))
    (tmp_path / "data.json").write_text(  # the data stage's record, which the refit reads
        '{"source": "bc", "n_samples": 250, "n_features": 30, "n_train": 200, "n_test": 50}')
    info = refit_best(cfg, tmp_path, {"kernel": "rbf", "gamma": 0.5, "C": 10.0})
    model = muflow.load(tmp_path / "model")
    assert info["iterations"] == int(model.n_iter_.max()) > 1
    assert info["iteration_unit"] == "pair step"
    rows = dict(summary_rows(tmp_path))
    assert rows["iterations"] == f"{info['iterations']} (pair step)"
    assert info["converged"] and "not converged" not in rows


def test_a_best_model_stopped_short_of_tol_is_named_in_the_summary(tmp_path):
    """A model stopped at sweep.max_iter above tol was reported like a converged one (the
    report, the printed summary and the artifact said nothing; SVC.fit warns)."""
    import dataclasses
    import warnings

    import muflow
    from muflow.config import default_config
    from muflow.pipeline import refit_best, summary_rows

    X, y = muflow.datasets.load_breast_cancer()
    np.savez(tmp_path / "data.npz", X_train=X[:200] / 10, X_test=X[200:250] / 10, y_train=y[:200],
             y_test=y[200:250])
    (tmp_path / "data.json").write_text(
        '{"source": "bc", "n_samples": 250, "n_features": 9, "n_train": 200, "n_test": 50}')
    cfg = default_config()
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, solver="m3", max_iter=5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        info = refit_best(cfg, tmp_path, {"kernel": "rbf", "gamma": 0.5, "C": 10.0})
    assert info["converged"] is False and info["kkt_violation"] > info["tol"]
    line = dict(summary_rows(tmp_path))["not converged"]
    assert line.startswith(f"the model stopped at 5 iterations with KKT violation "
                           f"{info['kkt_violation']:.3g} > tol 0.001; raise sweep.max_iter")


def _generated_run(tmp_path, n=600):
    """A CSV of ``make_classification`` rows and the run configuration of one RBF setting,
    C=1, 3 folds, 20 % held out."""
    from sklearn.datasets import make_classification

    from muflow.config import from_dict

    X, y = make_classification(n_samples=n, n_features=10, n_informative=5, flip_y=0.05,
                               random_state=11)
    path = tmp_path / "data.csv"
    np.savetxt(path, np.column_stack([X, y]), delimiter=",", header=",".join(
        [f"f{i}" for i in range(X.shape[1])] + ["label"]), comments="")
    return from_dict({"data": {"path": str(path), "label_column": "label"},
                      "grid": {"C": [1.0], "kernels": [{"kernel": "rbf", "gamma": [0.05]}]},
                      "sweep": {"folds": 3}})


def _run_stages(cfg, run_dir):
    from muflow import pipeline as stages

    stages.start_run(cfg, run_dir)
    stages.prepare_data(cfg, run_dir)
    gram = stages.build_gram_stores(cfg, run_dir, None)
    stages.sweep(cfg, run_dir, None, progress=False)
    stages.refit_best(cfg, run_dir)
    stages.evaluate(cfg, run_dir)
    return gram, stages.write_report(cfg, run_dir).read_text()


def test_a_run_on_rows_on_demand_writes_no_gram_store_and_says_why(tmp_path, monkeypatch):
    """Above the sweep's stored-K size (lowered here) the Gram stage writes no store, the
    sweep reads none, and gram.json, report.md and the summary name the path and why; a
    resumed sweep reports the same from its kernel records."""
    from muflow import pipeline as stages
    from muflow import routing

    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 100)
    cfg, run = _generated_run(tmp_path), tmp_path / "run"
    stages.prepare_data(cfg, stages.start_run(cfg, run))
    assert not stages.needs_cluster(cfg, run)  # no store, sweep in process: no LocalCluster
    gram, report = _run_stages(cfg, run)
    assert not stages.needs_cluster(cfg, run)  # and so says gram.json on a resumed run
    assert gram["stores"] == [] and not (run / "gram").exists() and not list(tmp_path.rglob("*.zarr"))
    (setting,) = gram["settings"]
    assert (setting["path"], setting["store"], setting["store_url"]) == ("rows", False, None)
    assert setting["reason"].startswith("480 samples > 100: K of 480 samples (1.8 MiB float64) "
                                        "would be read by 4 solves")
    assert "## Kernel paths" in report
    assert f"| rbf(gamma=0.05) | rows on demand | working_set (continuation) | {setting['reason']} |" in report
    assert dict(stages.summary_rows(run))["kernel path"] == "rows on demand (1 setting)"
    assert json_of(run / "metrics.json")["accuracy"] > 0.8

    # the sweep resumed from its kernel records reports the same path and reason
    (run / "sweep-summary.json").unlink()
    again = stages.sweep(cfg, run, None, progress=False)
    assert again["counts"]["kernels_resumed"] == 1
    assert again["kernel_paths"][0]["reason"] == setting["reason"]


def test_a_small_run_stores_its_gram_and_a_second_run_reuses_it(tmp_path):
    from muflow import pipeline as stages

    cfg = _generated_run(tmp_path)
    cfg = cfg.with_overrides(gram={"cache_dir": str(tmp_path / "cache")})
    gram, report = _run_stages(cfg, tmp_path / "a")
    (store,) = gram["stores"]
    assert store["computed"] == store["tiles"] > 0
    assert gram["settings"][0]["path"] == "stored" and gram["settings"][0]["store_url"] == store["store"]
    assert "reused by 4 solves" in gram["settings"][0]["reason"]
    assert "| rbf(gamma=0.05) | stored Gram | smo (continuation) |" in report
    assert dict(stages.summary_rows(tmp_path / "a"))["kernel path"] == "stored Gram (1 setting)"
    assert stages.needs_cluster(cfg, tmp_path / "a")
    second, _ = _run_stages(cfg, tmp_path / "b")
    assert [s["computed"] for s in second["stores"]] == [0]
    assert "(its store is there already)" in second["settings"][0]["reason"]


def test_a_gram_cache_at_a_url_is_reached_with_gram_storage_options(tmp_path, monkeypatch):
    """``gram.cache_dir`` an fsspec URL whose file system needs options (an S3-compatible
    store's ``endpoint_url``; tests/gram_store_fs.py): the Gram stage plans, writes and the
    sweep reads its stores with ``gram.storage_options``, their ``"${NAME}"`` read from the
    environment, and a second run finds them there. No option reached the stores before.
    config.json names the variable; no file of the run directory holds its value, and a
    run resumed with other options (an endpoint that moved) is the same run."""
    from muflow import pipeline as stages
    from tests.gram_store_fs import ENDPOINT, register, url

    register()
    monkeypatch.setenv("MUFLOW_TEST_GRAM_ENDPOINT", ENDPOINT)
    options = {"endpoint_url": "${MUFLOW_TEST_GRAM_ENDPOINT}"}
    cfg = _generated_run(tmp_path, n=150).with_overrides(
        gram={"cache_dir": url(tmp_path / "cache"), "storage_options": options})
    gram, _ = _run_stages(cfg, tmp_path / "a")
    (store,) = gram["stores"]
    assert store["computed"] == store["tiles"] > 0 and store["store"].startswith("gramtest://")
    assert [p.name for p in (tmp_path / "cache").glob("gram-*.zarr")] == [store["store"].rsplit("/", 1)[1]]
    assert json_of(tmp_path / "a" / "sweep-summary.json")["kernel_paths"][0]["path"] == "stored"
    assert json_of(tmp_path / "a" / "config.json")["gram"]["storage_options"] == options
    assert not [p for p in (tmp_path / "a").rglob("*") if p.is_file() and ENDPOINT.encode() in p.read_bytes()]
    second, _ = _run_stages(cfg, tmp_path / "b")
    assert [s["computed"] for s in second["stores"]] == [0]
    assert "(its store is there already)" in second["settings"][0]["reason"]
    stages.start_run(cfg.with_overrides(gram={"storage_options": {"endpoint_url": "${MOVED}"}}),
                     tmp_path / "a")


def json_of(path):
    import json

    return json.loads(path.read_text())


def test_with_the_sweep_on_the_cluster_the_working_set_gets_no_gram_store(tmp_path):
    """sweep.on_cluster with the working-set solver: X partitioned over the workers, so the
    Gram stage writes no store, and the sweep records the same path."""
    from muflow import pipeline as stages
    from tests.dask_cluster import local_client

    cfg = _generated_run(tmp_path, n=300).with_overrides(sweep={"on_cluster": True})
    run = tmp_path / "run"
    stages.prepare_data(cfg, stages.start_run(cfg, run))
    assert stages.needs_cluster(cfg, run)
    with local_client(n_workers=1) as client:
        gram = stages.build_gram_stores(cfg, run, client)
        swept = stages.sweep(cfg, run, client, progress=False)
    (setting,) = gram["settings"]
    assert (setting["path"], setting["store"]) == ("partitioned", False) and gram["stores"] == []
    assert not list(tmp_path.rglob("*.zarr"))
    assert [(k["path"], k["solver"]) for k in swept["kernel_paths"]] == [("partitioned", "working_set")]
    assert swept["kernel_paths"][0]["reason"] == setting["reason"]


def test_a_train_run_directory_is_refused_to_a_sweep_and_to_other_params(tmp_path):
    """config.json records the train flow's params: a run of the same configuration that
    sweeps, or trains other params, is refused before any stage is reused."""
    from muflow.config import default_config
    from muflow.pipeline import start_run
    from muflow.run_directory import log_stage, write_record

    cfg = default_config()
    start_run(cfg, tmp_path, {"kernel": "linear", "C": 0.001})
    log_stage(tmp_path, "data", "computed", 0.1)
    write_record(tmp_path / "refit.json", {"params": {"kernel": "linear", "C": 0.001}})
    start_run(cfg, tmp_path, {"kernel": "linear", "C": 0.001})  # the same run: reopened
    with pytest.raises(MuflowInputError, match=r"holds a model trained with params .* not a "
                                               r"sweep of the grid"):
        start_run(cfg, tmp_path)
    with pytest.raises(MuflowInputError, match=r"not a model trained with params \{'kernel': 'rbf'\}"):
        start_run(cfg, tmp_path, {"kernel": "rbf"})
    with pytest.raises(MuflowInputError, match="holds a run of another configuration"):
        start_run(cfg.with_overrides(sweep={"folds": 4}), tmp_path, {"kernel": "linear", "C": 0.001})


def test_a_run_directory_where_no_stage_finished_takes_the_new_configuration(tmp_path):
    """A run refused by its data stage (a solver the training data rule out) left its
    config.json alone: the fixed configuration was refused there as another run's."""
    import json

    from muflow.config import default_config
    from muflow.pipeline import start_run

    cfg = default_config()
    start_run(cfg.with_overrides(sweep={"folds": 4}), tmp_path)
    (tmp_path / "stages.log").write_text("")  # begun, nothing finished
    start_run(cfg, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["sweep"]["folds"] == cfg.sweep.folds


def test_the_gram_dir_given_to_the_workers_is_absolute(tmp_path, monkeypatch):
    """A relative run directory or gram.cache_dir is made absolute in this process (the
    Dask workers may run in another working directory); a URL is left as it is."""
    from muflow.config import default_config
    from muflow.pipeline import gram_dir

    monkeypatch.chdir(tmp_path)
    cfg = default_config()
    assert gram_dir(cfg, "relout") == str(tmp_path / "relout" / "gram")
    assert gram_dir(cfg.with_overrides(gram={"cache_dir": "cache"}), "relout") == str(tmp_path / "cache")
    assert gram_dir(cfg.with_overrides(gram={"cache_dir": "s3://b/gram"}), "relout") == "s3://b/gram"


def _labelled_csv(path, labels):
    rng = np.random.default_rng(0)
    np.savetxt(path, np.column_stack([rng.normal(size=(len(labels), 3)), labels]), delimiter=",",
               header="a,b,c,label", comments="")
    return path


def test_continuous_labels_are_refused_as_fit_refuses_them_naming_the_column(tmp_path):
    """A feature column taken for the labels: said in words, with the option that chooses
    the column (the data stage said "class np.float64(-0.997) has 1 samples")."""
    from muflow.config import from_dict
    from muflow.pipeline import prepare_data, start_run

    path = _labelled_csv(tmp_path / "d.csv", np.random.default_rng(1).normal(size=40))
    cfg = from_dict({"data": {"path": str(path)}})
    with pytest.raises(MuflowInputError, match=r"^the labels \(the last column of data path "
                       r"'.*d\.csv'\) are continuous numbers, not classes; choose the column of "
                       r"the classes with --label-column or data.label_column"):
        prepare_data(cfg, start_run(cfg, tmp_path / "run"))
    assert not (tmp_path / "run" / "data.json").exists()


def test_a_class_too_small_for_the_folds_is_named_by_its_plain_value(tmp_path):
    from muflow.config import from_dict
    from muflow.pipeline import prepare_data, start_run

    path = _labelled_csv(tmp_path / "d.csv", np.array([0] * 20 + [1] * 20 + [2]))
    cfg = from_dict({"data": {"path": str(path), "label_column": "label"}})
    with pytest.raises(MuflowInputError, match=r"': class 2 has 1 samples; stratified 3-fold "
                                               r"cross-validation needs at least 3$"):
        prepare_data(cfg, start_run(cfg, tmp_path / "run"))


def test_a_class_the_test_split_leaves_short_of_the_folds_is_refused_by_the_data_stage(tmp_path):
    """Class 9 has 3 samples in the file, as many as the folds, and passed the data stage's
    check on all labels; the test split took some, and the sweep failed later with
    "folds=3 but the smallest class ('9') has only 2 samples". The data stage counts the
    training split and says what to change."""
    from muflow.config import from_dict
    from muflow.pipeline import prepare_data, start_run

    path = _labelled_csv(tmp_path / "d.csv", np.array([0] * 20 + [1] * 20 + [9] * 3))
    cfg = from_dict({"data": {"path": str(path), "label_column": "label", "test_size": 0.5}})
    with pytest.raises(MuflowInputError, match=r"': class 9 has 3 samples, [12] of them left for "
                                               r"training by the test split \(data.test_size = "
                                               r"0.5\); stratified 3-fold cross-validation needs "
                                               r"at least 3: use fewer folds \(sweep.folds\), a "
                                               r"smaller data.test_size, or more samples of class 9$"):
        prepare_data(cfg, start_run(cfg, tmp_path / "run"))
    assert not (tmp_path / "run" / "data.json").exists()


def test_a_solver_whose_kernel_the_data_make_negative_is_refused_by_the_data_stage(tmp_path):
    """MUNK on a linear kernel: accepted when the configuration is read (the data decide),
    refused by the data stage on signed data, before it writes anything (the sweep stage
    refused it, after the data and Gram stages had finished); on non-negative data it runs."""
    from muflow.config import from_dict
    from muflow.pipeline import prepare_data, start_run

    labels = np.array([0, 1] * 20)
    signed = _labelled_csv(tmp_path / "signed.csv", labels)
    table = {"grid": {"C": [1.0], "kernels": [{"kernel": "rbf"}, {"kernel": "linear"}]},
             "sweep": {"solver": "munk"}}
    cfg = from_dict({"data": {"path": str(signed), "label_column": "label"}, **table})
    with pytest.raises(MuflowInputError, match=r"^sweep.solver = 'munk' cannot solve the grid's "
                                               r"kernel setting linear on these data: .*'musik'"):
        prepare_data(cfg, start_run(cfg, tmp_path / "run"))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.json"]
    positive = tmp_path / "positive.csv"
    np.savetxt(positive, np.column_stack([np.abs(np.loadtxt(signed, delimiter=",", skiprows=1)[:, :3]),
                                          labels]), delimiter=",", header="a,b,c,label", comments="")
    cfg = from_dict({"data": {"path": str(positive), "label_column": "label"}, **table})
    assert prepare_data(cfg, start_run(cfg, tmp_path / "run2"))["n_train"] == 32


def test_test_labels_the_model_never_saw_are_counted_and_named(tmp_path):
    """A test set holding a class absent from training (5 rows of class 9): the confusion
    matrix has a row for it and sums to n_test, "classes" lists it, and the stage warns,
    as the report does, naming the class and its rows (they used to vanish from the matrix)."""
    import json

    import muflow
    from muflow.config import default_config
    from muflow.pipeline import evaluate, write_report

    rng = np.random.default_rng(0)
    X_train = np.vstack([rng.normal(-2, 1, (40, 3)), rng.normal(2, 1, (40, 3))])
    y_train = np.repeat([2, 4], 40)
    X_test = np.vstack([rng.normal(-2, 1, (10, 3)), rng.normal(2, 1, (10, 3)), rng.normal(0, 1, (5, 3))])
    y_test = np.repeat([2, 4, 9], [10, 10, 5])
    np.savez(tmp_path / "data.npz", X_train=X_train, X_test=X_test, y_train=y_train, y_test=y_test)
    muflow.save(muflow.SVC(kernel="rbf", gamma=0.1, C=1.0).fit(X_train, y_train), tmp_path / "model")
    with pytest.warns(UserWarning, match=r"the test set holds classes the training split does "
                                         r"not: 9 \(5 rows\)"):
        metrics = evaluate(default_config(), tmp_path)
    assert metrics["classes"] == [2, 4, 9]
    matrix = np.array(metrics["confusion_matrix"])
    assert matrix.shape == (3, 3) and matrix.sum() == metrics["n_test"] == 25
    assert matrix[2].sum() == 5 and matrix[:, 2].sum() == 0  # never predicted
    assert metrics["accuracy"] == pytest.approx(np.trace(matrix) / 25)
    assert json.loads((tmp_path / "metrics.json").read_text())["unseen_classes"] == {"9": 5}
    (tmp_path / "data.json").write_text(
        '{"source": "s", "n_samples": 105, "n_features": 3, "n_train": 80, "n_test": 25}')
    report = write_report(default_config(), tmp_path).read_text()
    assert "the test set holds classes the training split does not: 9 (5 rows)" in report


def test_a_run_directory_reopens_on_another_cluster_and_records_it(tmp_path):
    """A flow run retried (or a run resumed) on another Dask scheduler, another number of
    workers or other timeouts reopens its run directory: those say where the work runs,
    not what it computes (it was refused as "a run of another configuration"); config.json
    then records where it ran last. Another grid is refused naming the key."""
    import json

    from muflow.config import default_config
    from muflow.pipeline import start_run
    from muflow.run_directory import log_stage

    cfg = default_config()
    start_run(cfg, tmp_path)
    log_stage(tmp_path, "data", "computed", 0.1)
    elsewhere = cfg.with_overrides(cluster={"scheduler": "tcp://10.0.0.2:8786", "workers": 4,
                                            "timeout": 30.0}, data={"timeout": 60.0})
    start_run(elsewhere, tmp_path)
    recorded = json.loads((tmp_path / "config.json").read_text())
    assert recorded["cluster"]["scheduler"] == "tcp://10.0.0.2:8786"
    assert recorded["data"]["timeout"] == 60.0
    with pytest.raises(MuflowInputError, match=r"another configuration \(sweep.folds is 4 here, "
                                               r"3 in its config.json\)"):
        start_run(cfg.with_overrides(sweep={"folds": 4}), tmp_path)


def test_a_train_directory_whose_fit_failed_takes_other_params(tmp_path):
    """The train flow's fit failed (its data stage finished, no refit): the same
    configuration with other params takes the directory, as nothing was fitted with the
    first ones (it was refused as "holds a model trained with params ..."); once a refit
    finished, other params are refused."""
    import json

    from muflow.config import default_config
    from muflow.pipeline import start_run
    from muflow.run_directory import log_stage, write_record

    cfg = default_config()
    start_run(cfg, tmp_path, {"kernel": "rbf", "C": float("inf")})
    log_stage(tmp_path, "data", "computed", 0.1)
    start_run(cfg, tmp_path, {"kernel": "rbf", "C": 1.0})
    assert json.loads((tmp_path / "config.json").read_text())["train_params"]["C"] == 1.0
    write_record(tmp_path / "refit.json", {"params": {"kernel": "rbf", "C": 1.0}})
    with pytest.raises(MuflowInputError, match=r"holds a model trained with params"):
        start_run(cfg, tmp_path, {"kernel": "rbf", "C": 10.0})
    with pytest.raises(MuflowInputError, match=r"not a sweep of the grid"):
        start_run(cfg, tmp_path)
