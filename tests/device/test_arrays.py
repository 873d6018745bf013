"""Which array module a device means, without CuPy or a GPU: the one-line error naming the
``gpu`` extra, "auto" falling back to the CPU, and the extra itself."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest

from muflow import SVC
from muflow.device.arrays import _cupy_or_reason, array_module, fit_device, to_host
from muflow.exceptions import MuflowInputError

GPU = _cupy_or_reason()[0] is not None
needs_no_gpu = pytest.mark.skipif(GPU, reason="a usable GPU is present: the CPU fallbacks do not apply")


@needs_no_gpu
def test_cuda_without_cupy_or_gpu_is_one_line_naming_the_extra(generated_split):
    X, _, y, _ = generated_split
    with pytest.raises(MuflowInputError) as err:
        SVC(device="cuda").fit(X, y)
    message = str(err.value)
    assert "\n" not in message
    assert "muflow[gpu]" in message and "device='cpu'" in message


@needs_no_gpu
def test_auto_without_a_gpu_fits_on_the_cpu_as_cpu_does(generated_split):
    X, X_test, y, _ = generated_split
    assert array_module("auto") is None
    auto = SVC(device="auto").fit(X, y)
    cpu = SVC(device="cpu").fit(X, y)
    np.testing.assert_array_equal(auto.objective_, cpu.objective_)
    np.testing.assert_array_equal(auto.predict(X_test), cpu.predict(X_test))


def test_a_device_that_is_not_one_of_the_three_is_refused(generated_split):
    X, _, y, _ = generated_split
    with pytest.raises(MuflowInputError, match="device must be one of 'cpu', 'cuda', 'auto'"):
        SVC(device="gpu").fit(X, y)


def test_cuda_with_a_client_says_what_to_do_instead():
    with pytest.raises(MuflowInputError, match="device='cpu'"):
        fit_device("cuda", client="tcp://127.0.0.1:1")
    assert fit_device("auto", client="tcp://127.0.0.1:1") is None


def test_host_arrays_pass_through_to_host():
    a = np.arange(3.0)
    assert to_host(a) is a


def test_the_gpu_extra_names_a_cupy_wheel_and_the_core_does_not_need_it():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["gpu"]
    assert any(req.startswith("cupy-cuda13x") for req in extra)
    assert not any("cupy" in req for req in pyproject["project"]["dependencies"])


@needs_no_gpu
def test_a_model_fitted_on_the_device_predicts_where_there_is_none(generated_split, monkeypatch,
                                                                   tmp_path):
    import muflow.device.arrays as arrays
    from muflow.persistence import load, save

    X, X_test, y, _ = generated_split
    monkeypatch.setattr(arrays, "_cupy_or_reason", lambda: (np, None))  # the device code here
    model = SVC(gamma=0.5, device="cuda").fit(X, y)
    on_device = model.decision_function(X_test)
    save(model, tmp_path / "model")
    monkeypatch.undo()  # no GPU any more: the CPU's prediction, the same numbers
    loaded = load(tmp_path / "model")
    assert loaded.device == "cuda"
    np.testing.assert_allclose(loaded.decision_function(X_test), on_device, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(loaded.predict(X_test), model.predict(X_test))
