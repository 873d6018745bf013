"""``muflow.save`` / ``muflow.load``: a portable model format that loading never executes.

A model is a directory holding

- ``model.json``: format version, estimator class, parameters, kernel, classes and fitted
  scalars, as plain JSON;
- ``arrays.npz``: the fitted arrays, read back with ``allow_pickle=False``.

No pickle anywhere: loading a model from an untrusted source runs no code. The directory
is written under a temporary name next to its destination and renamed into place, so a
failed save never leaves a half-written model that looks complete.

Nothing loads silently wrong: ``model.json`` records a SHA-256 digest of ``arrays.npz`` and
of its own content (:func:`model_digest`), and :func:`load` checks it and the model's
consistency (shapes agree with the classes, the support vectors and the features; every
array finite) before it returns. Each failure is a :class:`MuflowInputError` naming the
file and what is wrong. Models of format version 1 (no digest) load with a warning.
"""

from __future__ import annotations

import hashlib
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from muflow.atomic import atomic_directory
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel

FORMAT = "muflow-model"
FORMAT_VERSION = 2  # 2: model.json carries the digest
_ARRAYS = ("support_", "dual_coef_", "intercept_", "n_iter_", "objective_",
           "objective_curve_", "kkt_violation_", "converged_", "coef_",
           "n_support_", "class_weight_", "_probA", "_probB")


def _stored(model, name) -> bool:
    """Whether the fitted array ``name`` is saved: it is set, and is data rather than a
    property computed from other arrays (SVC.coef_)."""
    return not isinstance(getattr(type(model), name, None), property) and hasattr(model, name)


def _dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


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
        "sparse_fit": bool(getattr(model, "_sparse", False)),
    }
    arrays = {name: _dense(getattr(model, name)) for name in _ARRAYS if _stored(model, name)}
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
        meta["digest"] = model_digest(meta, (tmp / "arrays.npz").read_bytes())
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n")

    return atomic_directory(path, write)


def model_digest(meta: dict, arrays_bytes: bytes) -> str:
    """``sha256:<hex>`` of ``arrays.npz``'s bytes and of ``meta`` without its ``digest``
    (canonical JSON: sorted keys, no spaces)."""
    h = hashlib.sha256(arrays_bytes)
    doc = {k: v for k, v in meta.items() if k != "digest"}
    h.update(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    return "sha256:" + h.hexdigest()


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
    params = dict(meta["params"])
    if cls is SVC and len(meta["classes"]["values"]) > 2:
        params.setdefault("multiclass", "ovr")  # saved before one-vs-one: one-vs-rest
    model = cls(**params)
    meta["params"] = params
    model.classes_ = _classes_from_json(meta["classes"])
    if meta.get("kernel") is not None:
        model.kernel_ = Kernel.from_dict(meta["kernel"])
    model.solver_ = meta.get("solver")
    model.n_features_in_ = meta["n_features_in"]
    model.shape_fit_ = tuple(meta.get("shape_fit", ()))
    arrays_file = path / "arrays.npz"
    _check_digest(meta, meta_file, arrays_file)
    try:
        with np.load(arrays_file, allow_pickle=False) as data:
            for name in _ARRAYS:
                if name in data.files and not isinstance(getattr(cls, name, None), property):
                    setattr(model, name, data[name])
            if meta.get("sparse_fit"):
                model._sparse = True
                model.dual_coef_ = sp.csr_matrix(model.dual_coef_)
            if meta.get("support_vectors") == "csr":
                model.support_vectors_ = sp.csr_matrix(
                    (data["sv_data"], data["sv_indices"], data["sv_indptr"]), shape=tuple(data["sv_shape"])
                )
            elif meta.get("support_vectors") == "dense":
                model.support_vectors_ = data["support_vectors_"]
    except FileNotFoundError:
        raise MuflowInputError(f"{arrays_file} is missing; the model directory is incomplete") from None
    except KeyError as exc:
        raise MuflowInputError(f"{arrays_file}: array {exc} is missing; re-fit and save the model") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise MuflowInputError(
            f"{arrays_file} cannot be read ({type(exc).__name__}: {exc}); it is damaged or "
            "truncated: re-fit and save the model, or restore the file") from None
    _check_consistent(model, meta, arrays_file)
    return model


def _check_digest(meta: dict, meta_file: Path, arrays_file: Path) -> None:
    recorded = meta.get("digest")
    if recorded is None:
        warnings.warn(f"{meta_file} was saved without a digest (format version "
                      f"{meta.get('format_version')}); its files cannot be checked for changes. "
                      "Save it again with this muflow to protect it", UserWarning, stacklevel=3)
        return
    try:
        content = arrays_file.read_bytes()
    except FileNotFoundError:
        raise MuflowInputError(f"{arrays_file} is missing; the model directory is incomplete") from None
    if model_digest(meta, content) != recorded:
        raise MuflowInputError(
            f"{meta_file.parent}: model.json or arrays.npz changed after the model was saved "
            "(their SHA-256 digest does not match the one recorded in model.json); restore the "
            "original files or re-fit and save the model")


def _check_consistent(model, meta: dict, arrays_file: Path) -> None:
    """The fitted arrays agree with each other, with the classes and the features, and are
    finite: what prediction would otherwise turn into wrong answers or raw errors."""
    where = arrays_file.parent

    def fail(what):
        raise MuflowInputError(f"{where}: {what}; the model is inconsistent: re-fit and save it")

    classes = model.classes_
    if classes.ndim != 1 or len(classes) < 2 or len(np.unique(classes)) != len(classes):
        fail(f"classes {classes.tolist()!r} are not at least 2 distinct labels")
    k = len(classes)
    ovo = k > 2 and meta.get("params", {}).get("multiclass", "ovr") == "ovo"
    problems = {1} if k == 2 else {k * (k - 1) // 2} if ovo else {k}
    intercept = getattr(model, "intercept_", None)
    if intercept is None:
        fail("intercept_ is missing")
    if np.ndim(intercept) != 1 or len(intercept) not in problems:
        fail(f"intercept_ has shape {np.shape(intercept)} where {len(classes)} classes need "
             f"{' or '.join(str(p) for p in sorted(problems))} binary problems")
    n_problems = len(intercept)
    finite = {"intercept_": intercept}
    n_features = int(meta.get("n_features_in") or 0)
    if meta["estimator"] == "LinearSVC":
        coef = getattr(model, "coef_", None)
        if coef is None or coef.shape != (n_problems, n_features):
            fail(f"coef_ has shape {getattr(coef, 'shape', None)}, expected ({n_problems}, {n_features})")
        finite["coef_"] = coef
    else:
        dual = getattr(model, "dual_coef_", None)
        support = getattr(model, "support_", None)
        if dual is None or support is None:
            fail("dual_coef_ or support_ is missing")
        rows = k - 1 if ovo else n_problems  # one-vs-one: libsvm's layout
        if dual.ndim != 2 or dual.shape != (rows, len(support)):
            fail(f"dual_coef_ has shape {dual.shape}, expected ({rows}, {len(support)}): one "
                 "row per binary problem (k - 1 for one-vs-one), one column per support vector")
        n_support = getattr(model, "n_support_", None)
        if n_support is not None and (len(n_support) != k or int(np.sum(n_support)) != len(support)):
            fail(f"n_support_ {np.asarray(n_support).tolist()} does not count the {len(support)} "
                 f"support vectors of {k} classes")
        finite["dual_coef_"] = _dense(dual)
        sv = getattr(model, "support_vectors_", None)
        precomputed = meta.get("params", {}).get("kernel") == "precomputed"
        if not precomputed:
            if sv is None or sv.shape[0] != len(support) or sv.shape[1] != n_features:
                fail(f"support_vectors_ has shape {getattr(sv, 'shape', None)}, expected "
                     f"({len(support)}, {n_features})")
            finite["support_vectors_"] = sv.data if sp.issparse(sv) else sv
        shape_fit = meta.get("shape_fit") or ()
        if len(support) and shape_fit and (support.min() < 0 or support.max() >= int(shape_fit[0])):
            fail(f"support_ holds indices outside the {shape_fit[0]} training samples")
    for name, values in finite.items():
        if not np.all(np.isfinite(np.asarray(values, dtype=np.float64))):
            fail(f"{name} holds NaN or infinite values")
