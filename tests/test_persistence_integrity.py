"""A saved model that was changed or damaged never predicts: ``muflow.load`` checks the
recorded digest and the model's consistency and names the file and what is wrong (issue 22)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import muflow
from muflow.exceptions import MuflowInputError
from muflow.persistence import model_digest


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=120) > 0, 2, 4)
    return muflow.SVC(gamma=0.5).fit(X, y), X


@pytest.fixture
def saved(fitted, tmp_path):
    return muflow.save(fitted[0], tmp_path / "model")


def rewrite(path, *, arrays=None, meta=None, redigest=True):
    """Edit a saved model's arrays and metadata; with ``redigest`` record a matching digest
    (a consistent edit by someone who knows the format), so that the consistency checks
    are what must catch it."""
    with np.load(path / "arrays.npz", allow_pickle=False) as data:
        content = {k: data[k] for k in data.files}
    content = arrays(content) if arrays else content
    np.savez(path / "arrays.npz", **content)
    info = json.loads((path / "model.json").read_text())
    info = meta(info) if meta else info
    if redigest:
        content = (path / "arrays.npz").read_bytes()
        info["arrays_bytes"] = len(content)
        info["digest"] = model_digest(info, content)
    (path / "model.json").write_text(json.dumps(info))


def nan_dual(a):
    a["dual_coef_"] = np.full_like(a["dual_coef_"], np.nan)
    return a


def three_classes(m):
    m["classes"]["values"] = [2, 4, 6]
    return m


def drop_intercept(a):
    del a["intercept_"]
    return a


def short_dual(a):
    a["dual_coef_"] = a["dual_coef_"][:, :-1]
    return a


@pytest.mark.parametrize("edit, redigest, match", [
    (dict(arrays=nan_dual), False, "digest does not match"),
    (dict(arrays=nan_dual), True, "dual_coef_ holds NaN or infinite values"),
    (dict(meta=three_classes), False, "digest does not match"),
    (dict(meta=three_classes), True, "3 classes need 3 binary problems"),
    (dict(arrays=drop_intercept), True, "intercept_ is missing"),
    (dict(arrays=short_dual), True, r"dual_coef_ has shape \(1, \d+\), expected"),
])
def test_an_edited_model_is_refused_naming_the_file(saved, edit, redigest, match):
    rewrite(saved, redigest=redigest, **edit)
    with pytest.raises(MuflowInputError, match=match) as err:
        muflow.load(saved)
    assert str(saved) in str(err.value)


def test_a_truncated_arrays_file_is_refused_naming_it(saved):
    path = saved / "arrays.npz"
    content = path.read_bytes()
    info = json.loads((saved / "model.json").read_text())
    path.write_bytes(content[: len(content) // 2])
    info["arrays_bytes"] = len(content) // 2
    info["digest"] = model_digest(info, path.read_bytes())
    (saved / "model.json").write_text(json.dumps(info))
    with pytest.raises(MuflowInputError, match="arrays.npz cannot be read") as err:
        muflow.load(saved)
    assert str(path) in str(err.value)


def test_an_intact_model_loads_and_predicts_the_same(fitted, saved):
    model, X = fitted
    np.testing.assert_array_equal(muflow.load(saved).predict(X), model.predict(X))


def test_a_model_saved_before_digests_loads_with_a_warning(fitted, saved):
    info = json.loads((saved / "model.json").read_text())
    info.pop("digest")
    info["format_version"] = 1
    (saved / "model.json").write_text(json.dumps(info))
    with pytest.warns(UserWarning, match="without a digest"):
        loaded = muflow.load(saved)
    np.testing.assert_array_equal(loaded.predict(fitted[1]), fitted[0].predict(fitted[1]))
