"""``muflow.save`` / ``muflow.load``: a portable model format that loading never executes.

A model is a directory holding

- ``model.json``: format version, estimator class, parameters, kernel, classes, feature
  names, fitted scalars and how an svmlight training file was indexed, as plain JSON
  (:mod:`muflow.persistence_params`);
- ``arrays.npz``: the fitted arrays, read back with ``allow_pickle=False``.

No pickle anywhere: loading a model from an untrusted source runs no code. The directory
is written under a temporary name next to its destination and renamed into place, so a
failed save never leaves a half-written model that looks complete.

Loading reads only the two regular files inside the model directory: each is opened
relative to the directory without following a symbolic link (``O_NOFOLLOW``) and without
blocking on a FIFO, checked to be a regular file by ``fstat`` on the open descriptor, and
read up to a size cap: :data:`MODEL_JSON_MAX_BYTES` for ``model.json``; for ``arrays.npz``
the exact size recorded in ``model.json`` at save (``arrays_bytes``) or, for models saved
before it was recorded, a bound from the shapes ``model.json`` states
(:func:`arrays_size_bound`). A link to ``/etc/passwd``, to ``/dev/zero`` or to another
model's file is refused before anything is read through it.

Nothing loads silently wrong: ``model.json`` records a SHA-256 digest of ``arrays.npz`` and
of its own content (:func:`model_digest`), and :func:`load` checks it and the model's
consistency (shapes agree with the classes, the support vectors and the features; every
array finite) before it returns. Each failure is a :class:`MuflowInputError` naming the
file and what is wrong. Models of format version 1 (no digest) load with a warning, and
those of version 2 (no feature names) as they were saved.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import stat
import warnings
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from muflow.atomic import atomic_directory
from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel
from muflow.persistence_params import (classes_from_json, classes_to_json, feature_names_from_json,
                                       feature_names_to_json, is_json_scalar, params_from_json,
                                       params_to_json)

FORMAT = "muflow-model"
FORMAT_VERSION = 3  # 2: model.json carries the digest; 3: feature names, typed params and labels
_ARRAYS = ("support_", "dual_coef_", "intercept_", "n_iter_", "objective_",
           "objective_curve_", "kkt_violation_", "converged_", "coef_",
           "n_support_", "class_weight_", "_probA", "_probB")


#: model.json holds parameters, class labels and scalars: far below this.
MODEL_JSON_MAX_BYTES = 16 * 2**20
#: Beyond the shape bound, what a model saved without ``arrays_bytes`` may hold in its fit
#: diagnostics (the objective curve grows with the iterations, which model.json does not state).
LEGACY_DIAGNOSTICS_BYTES = 256 * 2**20


def _stored(model, name) -> bool:
    """Whether the fitted array ``name`` is saved: it is set, and is data rather than a
    property computed from other arrays (SVC.coef_)."""
    return not isinstance(getattr(type(model), name, None), property) and hasattr(model, name)


def _dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def save(model, path, *, svmlight_zero_based=None) -> Path:
    """Save a fitted muflow estimator to the directory ``path``: created, or replaced where
    it holds a saved model (nothing else is ever replaced: :func:`check_replaceable`).

    ``svmlight_zero_based``: whether the svmlight file the model was fitted on was read
    with 0-based feature indices (``python -m muflow fit`` records it), so that a test file
    is read alike (:func:`muflow.data.files.read_svmlight`); default: what the loaded model
    recorded (``_svmlight_zero_based``), if anything."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)
    check_replaceable(path)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "estimator": type(model).__name__,
        "params": params_to_json(model),
        "classes": classes_to_json(model.classes_),
        "kernel": model.kernel_.to_dict() if hasattr(model, "kernel_") else None,
        "solver": getattr(model, "solver_", None),
        "n_features_in": int(getattr(model, "n_features_in_", 0)),
        "feature_names_in": feature_names_to_json(model),
        "shape_fit": list(getattr(model, "shape_fit_", ())),
        "sparse_fit": bool(getattr(model, "_sparse", False)),
        "svmlight_zero_based": (getattr(model, "_svmlight_zero_based", None)
                                if svmlight_zero_based is None else bool(svmlight_zero_based)),
        "fit": _fit_record(model),
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
        content = (tmp / "arrays.npz").read_bytes()
        meta["arrays_bytes"] = len(content)
        meta["digest"] = model_digest(meta, content)
        (tmp / "model.json").write_text(json.dumps(meta, indent=2) + "\n")

    return atomic_directory(path, write)


def check_replaceable(path) -> None:
    """Refuse to save over ``path`` where it is anything but a saved model or an empty
    directory: a file, a link, or a directory of other things (a saved model is replaced
    whole, so whatever else the directory held would be lost)."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    what = None
    if path.is_symlink() or not path.is_dir():
        what = "is not a directory"
    else:
        names = sorted(p.name for p in path.iterdir())
        if names and names != ["arrays.npz", "model.json"]:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            what = f"is a directory that holds other things ({shown})"
        elif names:
            try:
                model = json.loads((path / "model.json").read_text())
            except (OSError, ValueError):
                model = None
            if not isinstance(model, dict) or model.get("format") != FORMAT:
                what = "holds a model.json that is not a muflow model's"
    if what is not None:
        raise MuflowInputError(f"{path} {what}, and saving a model there would replace it; "
                               "save to a new path, or remove it first")


def model_digest(meta: dict, arrays_bytes: bytes) -> str:
    """``sha256:<hex>`` of ``arrays.npz``'s bytes and of ``meta`` without its ``digest``
    (canonical JSON: sorted keys, no spaces)."""
    h = hashlib.sha256(arrays_bytes)
    doc = {k: v for k, v in meta.items() if k != "digest"}
    h.update(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    return "sha256:" + h.hexdigest()


#: The fitted scalars saved in model.json's ``fit`` (SVC's ``fit_status_``, layout, diagnostics).
_FIT_SCALARS = dict(fit_status_=int, fit_time_=float, n_threads_=int, rows_computed_=int, multiclass_=str)


def _fit_record(model) -> dict:
    """The fitted scalars of :data:`_FIT_SCALARS` the model has, and the JSON scalars of its
    ``timings_``, for model.json."""
    record = {name: kind(getattr(model, name)) for name, kind in _FIT_SCALARS.items()
              if hasattr(model, name)}
    timings = getattr(model, "timings_", None) or {}
    plain = {str(k): v.item() if isinstance(v, np.generic) else v for k, v in timings.items()}
    record["timings_"] = {k: v for k, v in plain.items() if is_json_scalar(v)}
    return record


def _restore_fit_record(model, meta) -> None:
    """Set the fitted scalars model.json's ``fit`` holds; a model saved before they were
    recorded gets ``fit_status_`` from ``converged_`` (1 where a problem stopped short of tol)."""
    record = meta.get("fit") or {"fit_status_": int(not np.all(getattr(model, "converged_", True)))}
    for name, kind in _FIT_SCALARS.items():
        if name in record:
            setattr(model, name, kind(record[name]))
    if "timings_" in record:
        model.timings_ = dict(record["timings_"])


class ModelBeingReplaced(MuflowInputError):
    """The model directory was replaced by a :func:`save` while it was read."""


#: Tries of :func:`load` when a save replaces the directory under it, and the pause between.
LOAD_TRIES, LOAD_RETRY_SECONDS = 5, 0.05


def load(path):
    """Load a model saved by :func:`save`. Reads JSON and ``.npz`` only; runs no code.

    Only the regular files ``model.json`` and ``arrays.npz`` inside ``path`` are read (no
    symbolic link followed), each within its size cap; the digest, the shapes and the
    finiteness of every array are checked before the model is returned. Any failure is a
    :class:`MuflowInputError` naming the file.

    A save that replaces ``path`` while it is read (:func:`muflow.atomic.atomic_directory`
    renames the new directory over the old, then removes the old) is noticed and the load
    starts again, up to :data:`LOAD_TRIES` times; then :class:`ModelBeingReplaced` says so
    (where "the model directory is incomplete" was said).
    """
    import time

    for attempt in range(LOAD_TRIES):
        try:
            return _load_once(path)
        except ModelBeingReplaced:
            if attempt + 1 == LOAD_TRIES:
                raise
            time.sleep(LOAD_RETRY_SECONDS * (attempt + 1))


def _load_once(path):
    from muflow.model import SVC

    path = Path(path)
    with _ModelDirectory(path) as directory:
        meta_file = path / "model.json"
        try:
            meta = json.loads(directory.read("model.json", MODEL_JSON_MAX_BYTES, missing=(
                f"{str(path)!r} is not a muflow model directory (no model.json)")))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise MuflowInputError(f"{meta_file}: not valid JSON ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            format_ = meta.get("format") if isinstance(meta, dict) else None
            raise MuflowInputError(f"{meta_file}: not a muflow model (format {format_!r})")
        if meta.get("format_version", 0) > FORMAT_VERSION:
            raise MuflowInputError(
                f"{meta_file}: format version {meta['format_version']} is newer than this muflow "
                f"reads ({FORMAT_VERSION}); upgrade muflow")
        arrays_file = path / "arrays.npz"
        exact = meta.get("arrays_bytes")
        if exact is not None and not (isinstance(exact, int) and exact >= 0):
            raise MuflowInputError(f"{meta_file}: arrays_bytes {exact!r} is not a byte count")
        cap = exact if exact is not None else arrays_size_bound(meta)
        content = directory.read("arrays.npz", cap, exact=exact, missing=(
            f"{arrays_file} is missing; the model directory is incomplete"))
    # before params are decoded into meta (its digest covers them as saved)
    _check_digest(meta, meta_file, content)
    estimators = {"SVC": SVC}
    try:
        from muflow.linear import LinearSVC

        estimators["LinearSVC"] = LinearSVC
    except ImportError:
        pass
    cls = estimators.get(meta.get("estimator"))
    if cls is None:
        raise MuflowInputError(f"{meta_file}: unknown estimator {meta.get('estimator')!r}")
    try:
        params = params_from_json(meta["params"])
        if cls is SVC and len(meta["classes"]["values"]) > 2:
            params.setdefault("multiclass", "ovr")  # saved before one-vs-one: one-vs-rest
        model = cls(**(dict(params, client=None) if "client" in params else params))
        meta["params"] = params
        model.classes_ = classes_from_json(meta["classes"])
        if meta.get("kernel") is not None:
            model.kernel_ = Kernel.from_dict(meta["kernel"])
        model.solver_ = meta.get("solver")
        model.n_features_in_ = int(meta["n_features_in"])
        names = feature_names_from_json(meta.get("feature_names_in"), model.n_features_in_)
        if names is not None:
            model.feature_names_in_ = names
        model.shape_fit_ = tuple(int(v) for v in meta.get("shape_fit", ()))
        if meta.get("svmlight_zero_based") is not None:  # read a test file alike
            model._svmlight_zero_based = bool(meta["svmlight_zero_based"])
    except (KeyError, TypeError, ValueError, MuflowInputError) as exc:
        raise MuflowInputError(f"{meta_file}: {type(exc).__name__}: {exc}; the model's metadata "
                               "is damaged: re-fit and save the model") from None
    try:
        with np.load(io.BytesIO(content), allow_pickle=False) as data:
            for name in _ARRAYS:
                if name in data.files and not isinstance(getattr(cls, name, None), property):
                    setattr(model, name, data[name])
            if meta.get("sparse_fit"):
                model._sparse = True
                model.dual_coef_ = sp.csr_matrix(model.dual_coef_)
            if meta.get("support_vectors") == "csr":
                sv = (data["sv_data"], data["sv_indices"], data["sv_indptr"])
                model.support_vectors_ = sp.csr_matrix(sv, shape=tuple(data["sv_shape"]))
                model.support_vectors_.check_format(full_check=True)
            elif meta.get("support_vectors") == "dense":
                model.support_vectors_ = data["support_vectors_"]
        _restore_fit_record(model, meta)
    except KeyError as exc:
        raise MuflowInputError(f"{arrays_file}: array {exc} is missing; re-fit and save the model") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, TypeError) as exc:
        raise MuflowInputError(
            f"{arrays_file} cannot be read ({type(exc).__name__}: {exc}); it is damaged or "
            "truncated: re-fit and save the model, or restore the file") from None
    _check_consistent(model, meta, arrays_file)
    return model


def arrays_size_bound(meta: dict) -> int:
    """Bytes that ``arrays.npz`` of the model ``meta`` describes can hold at most, for models
    saved without ``arrays_bytes``: every array at the largest shape the stated training
    shape, features and classes allow (support vectors as CSR with 64-bit indices, the
    densest form), plus :data:`LEGACY_DIAGNOSTICS_BYTES` for the fit diagnostics."""
    try:
        shape_fit = meta.get("shape_fit") or [0]
        n = int(shape_fit[0])
        d = int(meta.get("n_features_in") or 0)
        k = len(meta["classes"]["values"])
    except (KeyError, TypeError, ValueError, IndexError):
        raise MuflowInputError("model.json does not state the model's shapes (shape_fit, "
                               "n_features_in, classes); re-fit and save the model") from None
    problems = max(k * (k - 1) // 2, k)
    values = n * d * 2 + n * (problems + 4) + problems * (d + 16) + 64
    return 8 * values + LEGACY_DIAGNOSTICS_BYTES


class _ModelDirectory:
    """A model directory open for reading its own regular files, and nothing else."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = None

    def __enter__(self):
        if os.open in os.supports_dir_fd:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            except OSError:
                self._check_not_replaced()
                raise MuflowInputError(f"{str(self.path)!r} is not a muflow model directory "
                                       "(not a readable directory)") from None
        elif not self.path.is_dir():
            self._check_not_replaced()
            raise MuflowInputError(f"{str(self.path)!r} is not a muflow model directory")
        return self

    def _check_not_replaced(self) -> None:
        """Raise :class:`ModelBeingReplaced` when a save is replacing the directory: the one
        opened is no longer at ``path``, one that could not be opened is there now, or
        ``path`` is gone and the save's old copy is beside it (between its two renames)."""
        if self.fd is not None:
            try:
                moved = os.fstat(self.fd).st_ino != os.stat(self.path).st_ino
            except OSError:
                moved = True
        else:
            # gone when opened: back now, or the save's old copy beside it, or back after
            # the look for that copy (a save can finish between two looks)
            moved = (self.path.is_dir() or any(self.path.parent.glob(f".{self.path.name}.old-*"))
                     or self.path.is_dir())
        if moved:
            raise ModelBeingReplaced(
                f"{str(self.path)!r} is being replaced by a save (muflow.save) while it is "
                "read; retry the load once the save is done")

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)

    def read(self, name: str, cap: int, *, exact: int | None = None, missing: str) -> bytes:
        """The bytes of the regular file ``name``, at most ``cap`` of them (exactly
        ``exact`` when given); a link, a device, a FIFO or a larger file is refused."""
        where = self.path / name
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        try:
            if self.fd is not None:
                fd = os.open(name, flags, dir_fd=self.fd)
            else:  # no dir_fd on this platform: check the real path, then open
                if where.is_symlink() or Path(os.path.realpath(where)).parent != Path(
                        os.path.realpath(self.path)):
                    raise OSError(errno.ELOOP, "symbolic link")
                fd = os.open(where, flags)
        except FileNotFoundError:
            self._check_not_replaced()
            raise MuflowInputError(missing) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP or where.is_symlink():
                raise MuflowInputError(
                    f"{where} is a symbolic link; a model directory must hold its own regular "
                    "files: replace the link by a copy of the file it names") from None
            raise MuflowInputError(f"{where} cannot be opened ({exc.strerror})") from None
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise MuflowInputError(
                    f"{where} is not a regular file; a model directory must hold regular files "
                    "written by muflow.save")
            if info.st_size > cap or (exact is not None and info.st_size != exact):
                expected = f"the {exact} bytes" if exact is not None else f"at most the {cap} bytes"
                raise MuflowInputError(
                    f"{where} is {info.st_size} bytes where model.json allows {expected}; the "
                    "file was replaced or damaged: restore it or re-fit and save the model")
            # the file's size, not the cap (16 MB for model.json), is the buffer read into
            content = f.read(min(cap, info.st_size) + 1)
        if len(content) != info.st_size or (exact is not None and len(content) != exact):
            raise MuflowInputError(f"{where} changed size while it was read; load it again")
        return content


def _check_digest(meta: dict, meta_file: Path, content: bytes) -> None:
    recorded = meta.get("digest")
    if recorded is None:
        warnings.warn(f"{meta_file} was saved without a digest (format version "
                      f"{meta.get('format_version')}); its files cannot be checked for changes. "
                      "Save it again with this muflow to protect it", UserWarning, stacklevel=3)
        return
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
    layout = meta.get("fit", {}).get("multiclass_", meta.get("params", {}).get("multiclass", "ovr"))
    ovo = k > 2 and layout == "ovo"
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
        if n_support is not None and (np.ndim(n_support) != 1 or len(n_support) != k
                                      or np.any(n_support < 0)
                                      or int(np.sum(n_support)) != len(support)):
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
    for name in ("_probA", "_probB"):
        values = getattr(model, name, None)
        if values is not None:
            if np.ndim(values) != 1 or len(values) not in (0, n_problems):
                fail(f"{name} has shape {np.shape(values)} where {n_problems} binary problems "
                     "need one sigmoid each (or none)")
            finite[name] = values
    if getattr(model, "class_weight_", None) is not None:
        finite["class_weight_"] = model.class_weight_
    kernel = meta.get("kernel") or {}
    finite["kernel parameters"] = [v for key, v in kernel.items() if key != "name"]
    for name, values in finite.items():
        try:
            values = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            fail(f"{name} holds {np.asarray(values).dtype} values, not numbers")
        if not np.all(np.isfinite(values)):
            fail(f"{name} holds NaN or infinite values")
    for name in ("support_", "n_support_"):
        values = getattr(model, name, None)
        if values is not None and np.asarray(values).dtype.kind not in "iu":
            fail(f"{name} holds {np.asarray(values).dtype} values, not integers")
