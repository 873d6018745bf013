"""Which array module a fit computes with: NumPy in this process, or CuPy on an NVIDIA GPU.

The device code of :mod:`muflow.device` is written once over an array module ``xp``
(NumPy's API: ``xp.asarray``, ``xp.matmul``, ``xp.where``...): with ``xp = numpy`` it runs
in this process (CI, and the tests that check it against the CPU paths), with
``xp = cupy`` on the GPU. CuPy is an optional dependency (the ``gpu`` extra); nothing here
imports it before a device is asked for.
"""

from __future__ import annotations

import numpy as np

from muflow.exceptions import MuflowInputError

DEVICES = ("cpu", "cuda", "auto")

#: The one line a fit says when ``device="cuda"`` cannot be honoured.
NO_GPU = ("device='cuda' needs CuPy and a usable NVIDIA GPU ({why}); install the gpu extra: "
          "pip install 'muflow[gpu]' (CuPy for CUDA 13), or use device='cpu'")


def check_device(device) -> None:
    """Refuse a ``device`` that is not one of :data:`DEVICES`."""
    if device not in DEVICES:
        raise MuflowInputError(f"device must be one of {', '.join(map(repr, DEVICES))}, got {device!r}")


def _cupy_or_reason():
    """``(cupy, None)`` when CuPy imports and sees a GPU it can allocate on, else
    ``(None, reason)``."""
    try:
        import cupy
    except ImportError as exc:  # not installed, or a wheel for another CUDA
        return None, f"CuPy does not import: {exc}".replace("\n", " ")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy sees no GPU"
        cupy.zeros(1).sum().item()  # a driver or runtime mismatch fails here, not later
    except Exception as exc:  # noqa: BLE001 - every CUDA failure means "no usable GPU"
        return None, f"CuPy finds no usable GPU: {type(exc).__name__}: {exc}".replace("\n", " ")
    return cupy, None


def array_module(device):
    """The array module of ``device``: None for "cpu" (muflow's CPU paths), CuPy for
    "cuda" (a :class:`~muflow.exceptions.MuflowInputError` of one line naming the ``gpu``
    extra when CuPy or the GPU is missing), CuPy or None for "auto" (a GPU when one is
    usable)."""
    check_device(device)
    if device == "cpu":
        return None
    xp, why = _cupy_or_reason()
    if xp is None and device == "cuda":
        raise MuflowInputError(NO_GPU.format(why=why))
    return xp


def fit_device(device, client=None):
    """The array module a fit computes with (:func:`array_module`); with a Dask
    ``client`` the workers' CPUs ("auto"), or an error naming the fix ("cuda")."""
    check_device(device)
    if client is not None:
        if device == "cuda":
            raise MuflowInputError("device='cuda' with client= is not available yet: fit on the "
                                   "GPU without a client, or on the cluster with device='cpu'")
        return None
    return array_module(device)


def prediction_module(device):
    """The array module a fitted model predicts with: CuPy for "cuda" and "auto" where a
    GPU is usable, else None (the CPU's prediction, the same numbers: a model fitted on a
    GPU and loaded on a machine without one predicts there)."""
    if device == "cpu":
        return None
    return _cupy_or_reason()[0]


def is_device_array(a) -> bool:
    """Whether ``a`` lives on a GPU (CuPy, or anything with ``__cuda_array_interface__``)."""
    return hasattr(a, "__cuda_array_interface__")


def to_host(a):
    """``a`` as a NumPy array (a CuPy array copied back; anything else as is)."""
    if is_device_array(a):
        get = getattr(a, "get", None)
        return get() if get is not None else np.asarray(a)
    return a


def name(xp) -> str:
    """"numpy" or "cupy" (what reports print)."""
    return "numpy" if xp is np else getattr(xp, "__name__", str(xp))
