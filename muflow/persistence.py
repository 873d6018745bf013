"""``muflow.save`` / ``muflow.load``: a portable model format that loading never executes.

A model is a directory holding

- ``model.json``: format version, estimator class, parameters, kernel, classes and fitted
  scalars, as plain JSON;
- ``arrays.npz``: the fitted arrays, read back with ``allow_pickle=False``.

No pickle anywhere: loading a model from an untrusted source runs no code. The directory
is written under a temporary name next to its destination and renamed into place, so a
failed save never leaves a half-written model that looks complete.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from muflow.atomic import atomic_directory
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel

FORMAT = "muflow-model"
FORMAT_VERSION = 1
_ARRAYS = ("support_", "dual_coef_", "intercept_", "n_iter_", "objective_",
           "objective_curve_", "kkt_violation_", "converged_", "coef_")


def _json_classes(classes: np.ndarray):
    kind = classes.dtype.kind
    if kind in "iu":
        return {"dtype": "int", "values": [int(c) for c in classes]}
    if kind == "f":
        return {"dtype": "float", "values": [float(c) for c in classes]}
    if kind == "b":
        return {"dtype": "bool", "values": [bool(c) for c in classes]}
    return {"dtype": "str", "values": [str(c) for c in classes]}


def _classes_from_json(d) -> np.ndarray:
    dtype = {"int": np.int64, "float": np.float64, "bool": bool, "str": str}[d["dtype"]]
    return np.asarray(d["values"], dtype=dtype)


def save(model, path) -> Path:
    """Save a fitted muflow estimator to the directory ``path`` (created or replaced)."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "estimator": type(model).__name__,
        "params": {k: v for k, v in model.get_params().items() if _is_json_scalar(v)},
        "classes": _json_classes(model.classes_),
        "kernel": model.kernel_.to_dict() if hasattr(model, "kernel_") else None,
        "solver": getattr(model, "solver_", None),
        "n_features_in": int(getattr(model, "n_features_in_", 0)),
        "shape_fit": list(getattr(model, "shape_fit_", ())),
    }
    arrays = {name: np.asarray(getattr(model, name)) for name in _ARRAYS if hasattr(model, name)}
    sv = getattr(model, "support_vectors_", None)
    if sv is None:
        meta["support_vectors"] = None
    elif sp.issparse(sv):
        sv = sv.tocsr()
        arrays.update(sv_data=sv.data, sv_indices=sv.indices, sv_indptr=sv.indptr,
                      sv_shape=np.asarray(sv.shape))
        meta["support_vectors"] = "csr"
    else:
        arrays["support_vectors_"] = np.asarray(sv)
        meta["support_vectors"] = "dense"

    def write(tmp: Path):
        np.savez(tmp / "arrays.npz", **arrays)
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n")

    return atomic_directory(path, write)


def _is_json_scalar(v) -> bool:
    if isinstance(v, float) and not np.isfinite(v):
        return True  # stored as JSON Infinity (Python's json reads it back)
    return v is None or isinstance(v, (bool, int, float, str))


def load(path):
    """Load a model saved by :func:`save`. Reads JSON and ``.npz`` only; runs no code."""
    from muflow.model import SVC

    path = Path(path)
    meta_file = path / "model.json"
    if not meta_file.exists():
        raise MuflowInputError(f"{str(path)!r} is not a muflow model directory (no model.json)")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise MuflowInputError(f"{meta_file}: not valid JSON ({exc})") from None
    if meta.get("format") != FORMAT:
        raise MuflowInputError(f"{meta_file}: not a muflow model (format {meta.get('format')!r})")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise MuflowInputError(
            f"{meta_file}: format version {meta['format_version']} is newer than this muflow "
            f"reads ({FORMAT_VERSION}); upgrade muflow"
        )
    estimators = {"SVC": SVC}
    try:
        from muflow.linear import LinearSVC

        estimators["LinearSVC"] = LinearSVC
    except ImportError:
        pass
    cls = estimators.get(meta["estimator"])
    if cls is None:
        raise MuflowInputError(f"{meta_file}: unknown estimator {meta['estimator']!r}")
    model = cls(**meta["params"])
    model.classes_ = _classes_from_json(meta["classes"])
    if meta.get("kernel") is not None:
        model.kernel_ = Kernel.from_dict(meta["kernel"])
    model.solver_ = meta.get("solver")
    model.n_features_in_ = meta["n_features_in"]
    model.shape_fit_ = tuple(meta.get("shape_fit", ()))
    with np.load(path / "arrays.npz", allow_pickle=False) as data:
        for name in _ARRAYS:
            if name in data.files:
                setattr(model, name, data[name])
        if meta.get("support_vectors") == "csr":
            model.support_vectors_ = sp.csr_matrix(
                (data["sv_data"], data["sv_indices"], data["sv_indptr"]), shape=tuple(data["sv_shape"])
            )
        elif meta.get("support_vectors") == "dense":
            model.support_vectors_ = data["support_vectors_"]
    return model
