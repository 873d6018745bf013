"""``muflow.load`` reads only the regular files inside the model directory, within size caps
taken from the model's own metadata, and refuses any model array that is not finite
(issue 33, items 1 and 2): each refusal is one MuflowInputError naming the file."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

import muflow
from muflow.exceptions import MuflowInputError
from muflow.persistence import arrays_size_bound, model_digest


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(90, 3))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=90) > 0, 0, 1)
    return muflow.SVC(gamma=0.5).fit(X, y)


@pytest.fixture
def saved(fitted, tmp_path):
    return muflow.save(fitted, tmp_path / "model")


def load_within(path, seconds=20):
    """muflow.load(path) in a thread: (returned model or raised error); the test fails if
    it does not finish within ``seconds`` (a load blocked on a FIFO or reading /dev/zero)."""
    outcome = {}

    def run():
        try:
            outcome["model"] = muflow.load(path)
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test asserts on
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"muflow.load({path}) did not return in {seconds} s"
    return outcome


def link_in_place(path, target):
    path.unlink()
    os.symlink(target, path)


@pytest.mark.parametrize("name", ["model.json", "arrays.npz"])
def test_a_link_to_a_file_outside_is_refused(saved, tmp_path, name):
    outside = tmp_path / f"outside-{name}"
    outside.write_bytes((saved / name).read_bytes())  # the same content: only the link differs
    link_in_place(saved / name, outside)
    error = load_within(saved).get("error")
    assert isinstance(error, MuflowInputError)
    assert f"{saved / name} is a symbolic link" in str(error)


@pytest.mark.parametrize("name", ["model.json", "arrays.npz"])
def test_a_link_to_dev_zero_is_refused_without_reading(saved, name):
    link_in_place(saved / name, "/dev/zero")
    error = load_within(saved).get("error")
    assert isinstance(error, MuflowInputError) and "symbolic link" in str(error)


@pytest.mark.parametrize("name", ["model.json", "arrays.npz"])
def test_a_link_to_a_fifo_outside_is_refused_without_opening_it(saved, tmp_path, name):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    link_in_place(saved / name, fifo)
    error = load_within(saved).get("error")
    assert isinstance(error, MuflowInputError) and "symbolic link" in str(error)


def test_a_fifo_in_place_of_a_file_is_refused_without_waiting(saved):
    (saved / "arrays.npz").unlink()
    os.mkfifo(saved / "arrays.npz")
    error = load_within(saved).get("error")
    assert isinstance(error, MuflowInputError)
    assert f"{saved / 'arrays.npz'} is not a regular file" in str(error)


@pytest.mark.parametrize("name", ["model.json", "arrays.npz"])
def test_a_link_to_another_models_file_is_refused(fitted, saved, tmp_path, name):
    other = muflow.save(fitted, tmp_path / "other")
    link_in_place(saved / name, other / name)
    error = load_within(saved).get("error")
    assert isinstance(error, MuflowInputError) and f"{saved / name} is a symbolic link" in str(error)


def test_an_arrays_file_longer_than_recorded_is_refused_before_it_is_read(saved):
    with open(saved / "arrays.npz", "ab") as f:
        f.write(b"\0" * 1000)
    size = os.path.getsize(saved / "arrays.npz")
    with pytest.raises(MuflowInputError, match=f"arrays.npz is {size} bytes where model.json "
                                               f"allows the {size - 1000} bytes"):
        muflow.load(saved)


def test_an_oversized_model_json_is_refused(saved, monkeypatch):
    import muflow.persistence

    monkeypatch.setattr(muflow.persistence, "MODEL_JSON_MAX_BYTES", 64)
    with pytest.raises(MuflowInputError, match="model.json is .* bytes where model.json allows at most"):
        muflow.load(saved)


def test_a_model_saved_without_a_recorded_size_loads_within_its_shape_bound(fitted, saved):
    info = json.loads((saved / "model.json").read_text())
    info.pop("arrays_bytes")
    content = (saved / "arrays.npz").read_bytes()
    assert len(content) <= arrays_size_bound(info)
    info["digest"] = model_digest(info, content)
    (saved / "model.json").write_text(json.dumps(info))
    X = np.random.default_rng(0).normal(size=(20, 3))
    np.testing.assert_array_equal(muflow.load(saved).predict(X), fitted.predict(X))


# -- finiteness of every array read back ----------------------------------------------
def rewrite_arrays(path, edit):
    """Apply ``edit`` to arrays.npz and record a matching size and digest (an edit by
    someone who knows the format: only the finiteness checks can catch it)."""
    with np.load(path / "arrays.npz", allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    edit(arrays)
    np.savez(path / "arrays.npz", **arrays)
    content = (path / "arrays.npz").read_bytes()
    info = json.loads((path / "model.json").read_text())
    info["arrays_bytes"] = len(content)
    info["digest"] = model_digest(info, content)
    (path / "model.json").write_text(json.dumps(info))


@pytest.mark.parametrize("array", ["support_vectors_", "dual_coef_", "intercept_", "class_weight_"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_a_model_array_is_refused_naming_it(saved, array, value):
    def poison(arrays):
        arrays[array] = arrays[array].astype(np.float64)
        arrays[array].flat[0] = value

    rewrite_arrays(saved, poison)
    with pytest.raises(MuflowInputError, match=f"{array} holds NaN or infinite values") as err:
        muflow.load(saved)
    assert str(saved) in str(err.value) and "\n" not in str(err.value)


def test_a_non_finite_kernel_parameter_is_refused(saved):
    info = json.loads((saved / "model.json").read_text())
    info["kernel"]["coef0"] = float("inf")
    info["digest"] = model_digest(info, (saved / "arrays.npz").read_bytes())
    (saved / "model.json").write_text(json.dumps(info))
    with pytest.raises(MuflowInputError, match="kernel parameters holds NaN or infinite values"):
        muflow.load(saved)


def test_platt_sigmoids_of_the_wrong_length_are_refused(saved):
    def two_sigmoids(arrays):
        arrays["_probA"] = arrays["_probB"] = np.ones(2)

    rewrite_arrays(saved, two_sigmoids)
    with pytest.raises(MuflowInputError, match=r"_probA has shape \(2,\) where 1 binary problems"):
        muflow.load(saved)


def test_saving_replaces_a_saved_model_and_nothing_else(fitted, saved, tmp_path):
    """A saved model is replaced whole, so save refuses any path that holds something else:
    a directory of other files, a file, a link, another program's model.json. Each is left
    as it was. (Until session 39, ``muflow fit --out`` wiped whatever was there.)"""
    again = muflow.save(fitted, saved)  # a saved model: replaced
    assert sorted(p.name for p in again.iterdir()) == ["arrays.npz", "model.json"]
    empty = tmp_path / "empty"
    empty.mkdir()
    muflow.save(fitted, empty)
    folder = tmp_path / "precious"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("important")
    afile = tmp_path / "predictions.csv"
    afile.write_text("a,b\n")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "model.json").write_text('{"format": "other"}')
    (foreign / "arrays.npz").write_bytes(b"x")
    link = tmp_path / "link"
    os.symlink(saved, link)
    for path in (folder, afile, foreign, link):
        with pytest.raises(MuflowInputError, match="save to a new path, or remove it first"):
            muflow.save(fitted, path)
    assert (folder / "notes.txt").read_text() == "important" and (folder / "sub").is_dir()
    assert afile.read_text() == "a,b\n"
    assert json.loads((foreign / "model.json").read_text()) == {"format": "other"}
    assert os.path.islink(link)


def test_a_saved_model_records_no_client(client, tmp_path):
    """A model fitted on a cluster, given its scheduler's address or a Client, saves
    client=None: the address outlives the cluster, and a refit after loading tried the dead
    scheduler. A model saved with an address before loads without it too."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 4))
    y = np.where(X[:, 0] - X[:, 1] > 0, 0, 1)
    local = muflow.SVC(gamma=0.5).fit(X, y)
    for i, given in enumerate((client.scheduler.address, client)):
        path = muflow.save(muflow.SVC(gamma=0.5, client=given).fit(X, y), tmp_path / f"m{i}")
        assert json.loads((path / "model.json").read_text())["params"]["client"] is None
        loaded = muflow.load(path)
        assert loaded.client is None
        np.testing.assert_array_equal(loaded.predict(X), local.predict(X))
        np.testing.assert_allclose(loaded.fit(X, y).objective_, local.objective_, rtol=1e-12)
    meta = json.loads((path / "model.json").read_text())
    meta["params"]["client"] = "tcp://127.0.0.1:1"
    meta["digest"] = model_digest(meta, (path / "arrays.npz").read_bytes())
    (path / "model.json").write_text(json.dumps(meta))
    assert muflow.load(path).client is None


def test_a_model_saved_in_format_version_2_loads_as_it_was_saved(fitted, saved):
    """Format version 3 added the feature names (and typed parameters and labels); a model
    that version 2 wrote (no such keys, integer labels as "int") still loads and predicts."""
    meta = json.loads((saved / "model.json").read_text())
    meta["format_version"] = 2
    meta.pop("feature_names_in")
    meta["classes"] = {"dtype": "int", "values": meta["classes"]["values"]}
    meta["digest"] = model_digest(meta, (saved / "arrays.npz").read_bytes())
    (saved / "model.json").write_text(json.dumps(meta))
    loaded = muflow.load(saved)
    X = np.random.default_rng(4).normal(size=(30, 3))
    np.testing.assert_array_equal(loaded.predict(X), fitted.predict(X))
    assert loaded.get_params() == fitted.get_params()
    assert not hasattr(loaded, "feature_names_in_")


def test_labels_that_do_not_fit_their_saved_dtype_are_refused(saved):
    """Labels are loaded in their saved dtype and must come back exactly: a value that dtype
    would wrap or truncate is refused, never turned into another label."""
    meta = json.loads((saved / "model.json").read_text())
    meta["classes"] = {"dtype": "|i1", "values": [0, 300]}
    meta["digest"] = model_digest(meta, (saved / "arrays.npz").read_bytes())
    (saved / "model.json").write_text(json.dumps(meta))
    with pytest.raises(MuflowInputError, match="classes values do not fit their dtype int8"):
        muflow.load(saved)
