"""Data read where it lives, on a LocalCluster of worker processes
(:mod:`muflow.data.workers`, the pipeline's data stage with ``sweep.on_cluster``).

- A Parquet directory, a glob, a ``file://`` URL, a zarr group and an ``s3://`` bucket on a
  local S3 server (moto, on 127.0.0.1 with an ephemeral port) give the same model and the
  same metrics as the same rows in one CSV file, and as the in-process read.
- The client never holds X: its traced memory during the data stage, and during the
  stages after it, stays under a fraction of X's size (only y, the split's indices, the
  solver's vectors and the model come to it).
- The run directory holds a fingerprint, not a copy: no ``data.npz``; a resumed stage after
  the source changed is refused, naming the file.
- Bad data found by the workers (NaN in a partition, an empty CSV file) are one line each.
"""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc

import numpy as np
import pandas as pd
import pytest


import muflow
from muflow import pipeline as stages
from muflow.config import from_dict
from muflow.data.source import DataSource
from muflow.data.workers import read_on_workers
from muflow.exceptions import DataFileError, MuflowInputError

N, D = 300, 5


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same N x D rows (features f0.., label) as one CSV file, a Parquet directory of 3
    files and a zarr group."""
    root = tmp_path_factory.mktemp("sources")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(N, D))
    y = np.where(X[:, 0] * X[:, 1] + 0.4 * rng.normal(size=N) > 0, 1, 0)
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(D)])
    df["label"] = y
    df.to_csv(root / "one.csv", index=False, float_format="%.17g")
    (root / "pq").mkdir()
    for i, part in enumerate((df.iloc[:90], df.iloc[90:200], df.iloc[200:])):
        part.to_parquet(root / "pq" / f"part-{i}.parquet", index=False)
    import zarr

    group = zarr.open_group(str(root / "set.zarr"), mode="w")
    group.create_array("X", data=X, chunks=(100, D))
    group.create_array("y", data=y, chunks=(100,))
    return root


def config(data: dict, **sweep):
    return from_dict({"data": {"label_column": "label", **data},
                      "grid": {"C": [1.0], "kernels": [{"kernel": "rbf", "gamma": [0.2]}]},
                      "sweep": {"folds": 2, "on_cluster": True, **sweep}})


def run_stages(cfg, run_dir, client):
    """The pipeline's stages on ``client``, as the flow runs them: metrics and the model."""
    shutil.rmtree(run_dir, ignore_errors=True)
    stages.start_run(cfg, run_dir)
    stages.prepare_data(cfg, run_dir, client)
    stages.build_gram_stores(cfg, run_dir, client)
    stages.sweep(cfg, run_dir, client, progress=False)
    stages.refit_best(cfg, run_dir)
    metrics = stages.evaluate(cfg, run_dir, client)
    stages.release_data(run_dir, client)
    return metrics, muflow.load(run_dir / "model")


@pytest.fixture(scope="module")
def reference(sources, client, tmp_path_factory):
    """The run on the one CSV file."""
    return run_stages(config({"path": str(sources / "one.csv")}), tmp_path_factory.mktemp("csv") / "run",
                      client)


def assert_same_run(result, reference):
    (metrics, model), (ref_metrics, ref_model) = result, reference
    assert metrics == ref_metrics
    np.testing.assert_array_equal(model.support_, ref_model.support_)
    np.testing.assert_allclose(model.dual_coef_, ref_model.dual_coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(model.intercept_, ref_model.intercept_, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(model.support_vectors_, ref_model.support_vectors_)


@pytest.mark.parametrize("kind", ["directory", "glob", "file-url", "zarr"])
def test_each_source_gives_the_model_and_metrics_of_one_csv(sources, client, reference, tmp_path, kind):
    path = {"directory": str(sources / "pq"), "glob": str(sources / "pq" / "part-*.parquet"),
            "file-url": (sources / "pq").as_uri() + "/", "zarr": str(sources / "set.zarr")}[kind]
    cfg = config({"path": path, **({"label_column": None} if kind == "zarr" else {})})
    result = run_stages(cfg, tmp_path / "run", client)
    assert_same_run(result, reference)
    info = json.loads((tmp_path / "run" / "data.json").read_text())
    assert info["home"] == "workers" and not (tmp_path / "run" / "data.npz").exists()
    assert info["fingerprint"]["split"] == {"seed": 0, "test_size": 0.2}
    assert len(info["fingerprint"]["source"]["files"]) >= (1 if kind != "zarr" else 3)


def test_the_in_process_read_gives_the_same_metrics(sources, reference, tmp_path):
    """Without a cluster (sweep in this process) the Parquet directory and the CSV file
    give the same run as each other."""
    runs = []
    for path in (str(sources / "one.csv"), str(sources / "pq")):
        cfg = config({"path": path}, on_cluster=False)
        run = tmp_path / f"run-{len(runs)}"
        stages.start_run(cfg, run)
        info = stages.prepare_data(cfg, run)
        assert info["home"] == "process" and (run / "data.npz").exists()
        stages.sweep(cfg, run, progress=False)
        stages.refit_best(cfg, run)
        runs.append((stages.evaluate(cfg, run), muflow.load(run / "model")))
    assert_same_run(runs[1], runs[0])


@pytest.fixture(scope="module")
def s3_bucket(sources):
    """A local S3 server (moto) on 127.0.0.1 with an ephemeral port, holding the Parquet
    directory under s3://muflow-data/train/; yields its endpoint URL."""
    pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        import s3fs

        fs = s3fs.S3FileSystem(key="testing", secret="testing", endpoint_url=endpoint,
                               client_kwargs={"region_name": "us-east-1"})
        fs.call_s3("create_bucket", Bucket="muflow-data")
        for part in sorted((sources / "pq").iterdir()):
            fs.put_file(str(part), f"muflow-data/train/{part.name}")
        yield endpoint
    finally:
        server.stop()


def test_an_s3_bucket_gives_the_model_and_metrics_of_one_csv(s3_bucket, client, reference, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("MUFLOW_TEST_KEY", "testing")
    monkeypatch.setenv("MUFLOW_TEST_SECRET", "testing")
    cfg = config({"path": "s3://muflow-data/train/", "storage_options": {
        "key": "${MUFLOW_TEST_KEY}", "secret": "${MUFLOW_TEST_SECRET}", "endpoint_url": s3_bucket,
        "client_kwargs": {"region_name": "us-east-1"}}})
    assert_same_run(run_stages(cfg, tmp_path / "run", client), reference)
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*.json"))
    assert "${MUFLOW_TEST_SECRET}" in written and '"testing"' not in written  # no credential
    files = json.loads((tmp_path / "run" / "data.json").read_text())["fingerprint"]["source"]["files"]
    assert [f["path"] for f in files] == [f"s3://muflow-data/train/part-{i}.parquet" for i in range(3)]
    assert all(f["modified"].strip('"') for f in files)  # the ETags


def test_the_client_never_holds_x(sources, client, tmp_path):
    """60,000 x 64 float64 (31 MB) read from Parquet by the workers: the data stage's traced
    allocations in this process stay under a third of X (they are y and the split's
    indices, about 1.5 MB, the split's own work arrays and the task graph)."""
    n, d = 60_000, 64
    rng = np.random.default_rng(0)
    folder = tmp_path / "big"
    folder.mkdir()
    for i in range(4):
        df = pd.DataFrame(rng.normal(size=(n // 4, d)), columns=[f"f{j}" for j in range(d)])
        df["label"] = rng.integers(0, 2, size=n // 4).astype(np.int8)
        df.to_parquet(folder / f"part-{i}.parquet", index=False)
    small = config({"path": str(sources / "pq")})  # the modules' imports, not measured
    stages.prepare_data(small, stages.start_run(small, tmp_path / "warm"), client)
    stages.release_data(tmp_path / "warm", client)
    cfg = config({"path": str(folder)})
    stages.start_run(cfg, tmp_path / "run")
    tracemalloc.start()
    try:
        info = stages.prepare_data(cfg, tmp_path / "run", client)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    stages.release_data(tmp_path / "run", client)
    assert (info["n_train"], info["n_test"], info["n_features"]) == (48_000, 12_000, d)
    assert peak < n * d * 8 / 3, f"the client allocated {peak / 1e6:.1f} MB"


def test_the_later_stages_never_hold_x(client, tmp_path):
    """The stages after the data stage (gram, sweep, refit, evaluate) on 20,000 x 64 float64
    (10.2 MB) read from Parquet by the workers: each stage's traced allocations in the
    client stay under X's size (measured: the sweep 6 to 7 MB, with the messages in flight;
    the refit and the evaluation 3 MB each: the labels,
    the folds' masks, the solver's O(n) vectors, pieces of the support vectors' rows, the
    model; no K_BB, no model file read into a buffer of the format's cap). A first run of
    the same stages loads and compiles what the second, measured one uses."""
    n, d = 20_000, 64
    rng = np.random.default_rng(1)
    folder = tmp_path / "pq"
    folder.mkdir()
    for i in range(4):
        X = rng.normal(size=(n // 4, d))
        df = pd.DataFrame(X, columns=[f"f{j}" for j in range(d)])
        df["label"] = (X[:, 0] + 0.5 * rng.normal(size=n // 4) > 0).astype(np.int8)
        df.to_parquet(folder / f"part-{i}.parquet", index=False)
    cfg = config({"path": str(folder)}, max_iter=2)  # two outer iterations: the memory, not the fit
    for name in ("warm", "run"):
        run = stages.start_run(cfg, tmp_path / name)
        stages.prepare_data(cfg, run, client)
        peaks = {}
        tracemalloc.start()
        try:
            for stage, compute in (("gram", lambda: stages.build_gram_stores(cfg, run, client)),
                                   ("sweep", lambda: stages.sweep(cfg, run, client, progress=False)),
                                   ("refit", lambda: stages.refit_best(cfg, run)),
                                   ("evaluate", lambda: stages.evaluate(cfg, run, client))):
                start = tracemalloc.get_traced_memory()[0]
                tracemalloc.reset_peak()
                metrics = compute()
                peaks[stage] = tracemalloc.get_traced_memory()[1] - start
        finally:
            tracemalloc.stop()
            stages.release_data(run, client)
    assert metrics["n_test"] == n // 5 and not (tmp_path / "run" / "data.npz").exists()
    x_bytes = n * d * 8
    # the sweep's traced peak varies with the messages in flight (6 to 9 MB here)
    assert peaks["sweep"] < x_bytes, f"the client allocated {peaks} bytes"
    assert max(peaks["gram"], peaks["refit"], peaks["evaluate"]) < 0.4 * x_bytes, \
        f"the client allocated {peaks} bytes"


def test_a_resumed_stage_refuses_changed_data(sources, client, tmp_path):
    folder = tmp_path / "pq"
    shutil.copytree(sources / "pq", folder)
    cfg = config({"path": str(folder)})
    run = tmp_path / "run"
    stages.start_run(cfg, run)
    stages.prepare_data(cfg, run, client)
    stages.release_data(run, client)
    stages.prepare_data(cfg, run, client)  # unchanged: reused
    assert stages.stage_log(run)[-1] == ("data", "reused")
    time.sleep(0.01)
    pd.read_parquet(folder / "part-2.parquet").iloc[:50].to_parquet(folder / "part-2.parquet", index=False)
    with pytest.raises(MuflowInputError) as exc:
        stages.prepare_data(cfg, run, client)
    assert "the data changed" in str(exc.value) and "part-2.parquet was modified" in str(exc.value)
    with pytest.raises(MuflowInputError, match="the data changed"):  # a stage on a new cluster
        stages.training_split(cfg, run, client)


def test_nan_in_a_partition_is_named_by_its_rows(sources, client, tmp_path):
    df = pd.read_csv(sources / "one.csv")
    df.loc[150, "f3"] = np.nan
    folder = tmp_path / "pq"
    folder.mkdir()
    df.iloc[:100].to_parquet(folder / "a.parquet", index=False)
    df.iloc[100:].to_parquet(folder / "b.parquet", index=False)
    with pytest.raises(DataFileError) as exc:
        read_on_workers(DataSource(path=str(folder), label_column="label"), client)
    assert "\n" not in str(exc.value)
    assert "NaN or infinity (in rows 100 to 299)" in str(exc.value)


def test_an_empty_csv_file_is_an_empty_partition(sources, client, tmp_path):
    folder = tmp_path / "csv"
    folder.mkdir()
    shutil.copy(sources / "one.csv", folder / "a.csv")
    (folder / "b.csv").write_text("")
    with pytest.raises(DataFileError) as exc:
        read_on_workers(DataSource(path=str(folder), label_column="label"), client)
    assert "b.csv holds no rows (an empty partition)" in str(exc.value)


def test_sweep_with_a_scheduler_reads_on_the_workers(sources, client, tmp_path):
    """``sweep --data DIR --scheduler ADDR``: the workers read the Parquet directory; the
    sweep of the same rows from one CSV file gives the same best configuration and score."""
    import os
    import subprocess
    import sys

    best = []
    for data in (sources / "pq", sources / "one.csv"):
        out = tmp_path / data.stem
        res = subprocess.run(
            [sys.executable, "-m", "muflow", "sweep", "--data", str(data), "--label-column", "label",
             "--scheduler", client.scheduler.address, "--gamma", "0.2", "--C", "1", "--folds", "2",
             "--out", str(out), "--no-progress"],
            capture_output=True, text=True, timeout=300, env=dict(os.environ))
        assert res.returncode == 0, res.stderr[-2000:]
        best.append(json.loads((out / "best.json").read_text()))
    assert best[0] == best[1]


def test_a_headerless_file_with_text_labels_keeps_its_first_row(client, tmp_path):
    """Sonar (no header, labels "M" and "R"): 208 rows from the file and from two parts; its
    first data line was taken for a header."""
    from muflow.datasets import data_path

    lines = data_path("sonar.csv").read_text().splitlines(keepends=True)
    (tmp_path / "sonar.csv").write_text("".join(lines))
    (tmp_path / "part-0.csv").write_text("".join(lines[:100]))
    (tmp_path / "part-1.csv").write_text("".join(lines[100:]))
    for path in (str(tmp_path / "sonar.csv"), str(tmp_path / "part-*.csv")):
        X, y, _ = read_on_workers(DataSource(path=path), client)
        assert X.shape == (208, 60) and y.tolist()[:1] == [lines[0].strip().split(",")[-1]], path


def test_feature_columns_and_a_leading_id_column_on_the_workers(sources, client, tmp_path):
    """The workers read the columns the in-process read does: feature_columns as given, by
    default every numeric column but the label and a leading sample id (it was a feature)."""
    df = pd.read_csv(sources / "one.csv")
    df.insert(0, "id", np.arange(N))
    df.iloc[:100].to_csv(tmp_path / "part-0.csv", index=False, float_format="%.17g")
    df.iloc[100:].to_csv(tmp_path / "part-1.csv", index=False, float_format="%.17g")
    glob = str(tmp_path / "part-*.csv")
    for columns in (None, ("f4", "f0")):
        X, y, layout = read_on_workers(DataSource(path=glob, label_column="label",
                                                  feature_columns=columns), client)
        expected = columns or tuple(f"f{j}" for j in range(D))
        assert layout.features == expected
        np.testing.assert_array_equal(X.compute(), df[list(expected)].to_numpy())
        np.testing.assert_array_equal(y, df["label"].to_numpy())


def test_a_test_set_with_its_columns_in_another_order_is_read_by_name(sources, client, tmp_path):
    """``data.test_path`` on the workers: its columns are chosen by the training set's names
    (they were taken by position: the reordered test set was scored on scrambled features);
    one lacking a training column is refused naming it."""
    df = pd.read_csv(sources / "one.csv")
    test = df.iloc[:60]
    test[["label"] + [f"f{j}" for j in reversed(range(D))]].to_parquet(tmp_path / "test.parquet",
                                                                       index=False)
    cfg = config({"path": str(sources / "pq"), "test_path": str(tmp_path / "test.parquet")})
    stages.start_run(cfg, tmp_path / "run")
    stages.prepare_data(cfg, tmp_path / "run", client)
    X_test, y_test = stages.test_split(cfg, tmp_path / "run", client)
    stages.release_data(tmp_path / "run", client)
    np.testing.assert_array_equal(X_test.compute(), test[[f"f{j}" for j in range(D)]].to_numpy())
    np.testing.assert_array_equal(y_test, test["label"].to_numpy())
    test.drop(columns=["f3"]).to_parquet(tmp_path / "test.parquet", index=False)
    stages.start_run(cfg, tmp_path / "run2")
    with pytest.raises(MuflowInputError, match=r"lacks the columns f3 of data.path"):
        stages.prepare_data(cfg, tmp_path / "run2", client)


def test_a_class_the_test_split_leaves_short_is_named_with_the_fix_on_the_workers(client, tmp_path):
    """The workers' split counts the training split as the in-process one does: the class
    with as many samples as the folds was said to have fewer ("class 9 has 2 samples")."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(43, 3)), columns=["a", "b", "c"])
    df["label"] = [0] * 20 + [1] * 20 + [9] * 3
    df.to_csv(tmp_path / "d.csv", index=False)
    cfg = from_dict({"data": {"path": str(tmp_path / "d.csv"), "label_column": "label",
                              "test_size": 0.5}, "sweep": {"folds": 3, "on_cluster": True}})
    stages.start_run(cfg, tmp_path / "run")
    with pytest.raises(MuflowInputError, match=r"class 9 has 3 samples, [12] of them left for "
                                               r"training by the test split"):
        stages.prepare_data(cfg, tmp_path / "run", client)


def test_an_svmlight_test_set_on_the_workers_is_read_with_the_training_files_indexing(
        client, tmp_path):
    """The workers read both svmlight files: the test file takes the indexing the worker
    found in the training file (a zero-based test file that never uses feature 0 was
    guessed one-based, every column one to the left)."""
    from muflow.config import from_dict
    from muflow.run_data import read_split_on_workers
    from tests.conftest import zero_based_svmlight_pair

    X_test, y_test = zero_based_svmlight_pair(tmp_path, n_train=40, n_test=10)
    cfg = from_dict({"data": {"path": str(tmp_path / "train.svm"),
                              "test_path": str(tmp_path / "test.svm"), "n_features": 5}})
    _, X_read, _, y_read, layout = read_split_on_workers(cfg, client)
    assert layout.zero_based is True
    np.testing.assert_allclose(np.asarray(X_read), X_test)
    np.testing.assert_array_equal(y_read, y_test)
