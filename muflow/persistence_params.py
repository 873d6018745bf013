"""What ``model.json`` says of a saved estimator besides its arrays: its parameters, its class
labels and the names of its features, as JSON and back (for :mod:`muflow.persistence`).

Each comes back as the fitted estimator had it, so that the loaded model predicts the same
labels, checks its input's columns the same way, and trains the same model once cloned.
"""

from __future__ import annotations

import numpy as np

from muflow.exceptions import MuflowInputError


def is_json_scalar(v) -> bool:
    """Whether ``v`` is a value JSON holds as itself: None, a bool, an int, a float or a str."""
    if isinstance(v, float) and not np.isfinite(v):
        return True  # stored as JSON Infinity (Python's json reads it back)
    return v is None or isinstance(v, (bool, int, float, str))


def params_to_json(model) -> dict:
    """``model.get_params()`` for model.json; a callable kernel is refused, since a saved
    model holds no code (its kernel could never be evaluated after a load)."""
    params = model.get_params()
    kernel = params.get("kernel")
    if callable(kernel):
        raise MuflowInputError(
            f"kernel is a callable ({getattr(kernel, '__qualname__', type(kernel).__name__)}), "
            "which a saved model cannot hold: muflow.save writes JSON and .npz, never code; "
            "save this model with pickle or joblib, or fit it with kernel='precomputed' on the "
            "Gram matrix your callable computes and save that one")
    # client None: an address outlives its scheduler (a loaded model's refit tried it)
    return {name: None if name == "client" else _param_to_json(name, value)
            for name, value in params.items()}


def _plain(value):
    """A NumPy scalar as the Python scalar of the same value (what a grid search over NumPy
    arrays sets: ``np.float32(2)``, ``np.int64(3)``); anything else as it is."""
    return value.item() if isinstance(value, np.generic) else value


def _is_weights(items) -> bool:
    """Whether ``items`` are ``[label, weight]`` pairs: labels JSON scalars other than None
    (JSON keeps an int, a float, a bool and a str apart), weights numbers."""
    return isinstance(items, list) and all(
        isinstance(item, list) and len(item) == 2 and item[0] is not None
        and is_json_scalar(item[0]) and isinstance(item[1], (int, float)) for item in items)


def _param_to_json(name: str, value):
    """One parameter for model.json: a JSON scalar as itself, a dict of class weights as
    ``{"dict": [[label, weight], ...]}`` (labels keep their type, which JSON object keys,
    always strings, would not); anything else is refused, naming the parameter."""
    value = _plain(value)
    if is_json_scalar(value):
        return value
    if isinstance(value, dict):
        items = [[_plain(label), _plain(weight)] for label, weight in value.items()]
        if _is_weights(items):
            return {"dict": items}
    shown = " ".join(repr(value).split())
    raise MuflowInputError(
        f"{name} = {shown[:80]} cannot be saved: a saved model's parameters are numbers, "
        f"strings, booleans, None and dicts of labels to numbers; set {name} to one of those "
        "before saving, or save the model with pickle or joblib")


def params_from_json(params: dict) -> dict:
    """The constructor's arguments that model.json's ``params`` holds (the inverse of
    :func:`params_to_json`)."""
    decoded = {}
    for name, value in params.items():
        if isinstance(value, dict):
            if set(value) != {"dict"} or not _is_weights(value["dict"]):
                raise ValueError(f"parameter {name} is {value!r}, not a saved dict of weights")
            value = {label: weight for label, weight in value["dict"]}
        elif not is_json_scalar(value):
            raise ValueError(f"parameter {name} is a {type(value).__name__}, not a saved value")
        decoded[name] = value
    return decoded


#: The kinds of label arrays saved: bool, signed and unsigned int, float, str, object.
_LABEL_KINDS = "biufUO"
#: The label types of format versions 1 and 2, which saved a kind instead of the dtype.
_KINDS_BEFORE_3 = {"int": np.int64, "float": np.float64, "bool": bool, "str": str}


def classes_to_json(classes: np.ndarray) -> dict:
    """The class labels for model.json: their NumPy dtype (``"<u8"``, ``"|i1"``, ``"<U3"``,
    ``"|O"``) and their values, exactly (uint64 above 2**63 included), so that the loaded
    model predicts labels of the fitted model's dtype."""
    dtype = classes.dtype
    values = [_plain(c) for c in classes]
    if dtype.kind not in _LABEL_KINDS or not all(
            c is not None and is_json_scalar(c) for c in values):
        raise MuflowInputError(
            f"classes_ of dtype {dtype} cannot be saved: a saved model's labels are booleans, "
            "integers, floats or strings; fit with labels of one of those types")
    return {"dtype": dtype.str, "values": values}


def classes_from_json(d: dict) -> np.ndarray:
    """The class labels model.json's ``classes`` holds, in their saved dtype."""
    values = d["values"]
    if not isinstance(values, list) or not all(c is not None and is_json_scalar(c) for c in values):
        raise ValueError("classes values are not a list of labels")
    if d["dtype"] in _KINDS_BEFORE_3:
        dtype = _KINDS_BEFORE_3[d["dtype"]]
        if dtype is np.int64 and values and max(values) > np.iinfo(np.int64).max:
            dtype = np.uint64  # such a model never loaded before version 3
        return np.asarray(values, dtype=dtype)
    dtype = np.dtype(str(d["dtype"]))
    if dtype.kind not in _LABEL_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"classes dtype {d['dtype']!r} is not one of labels")
    if dtype.kind == "O":
        labels = np.empty(len(values), dtype=object)
        labels[:] = values
        return labels
    try:
        labels = np.asarray(values, dtype=dtype)
    except OverflowError:
        labels = None
    if labels is None or [_plain(c) for c in labels] != values:
        raise ValueError(f"classes values do not fit their dtype {dtype}")  # truncated, wrapped
    return labels


def feature_names_to_json(model) -> list | None:
    """The names of the features the model was fitted on (``feature_names_in_``, set by a
    fit on a DataFrame whose column names are all strings), or None."""
    names = getattr(model, "feature_names_in_", None)
    return None if names is None else [str(name) for name in names]


def feature_names_from_json(names, n_features: int) -> np.ndarray | None:
    """``feature_names_in_`` as scikit-learn holds it (an object array of strings) from
    model.json's ``feature_names_in``, or None for a model fitted without names."""
    if names is None:
        return None
    if (not isinstance(names, list) or len(names) != n_features
            or not all(isinstance(name, str) for name in names)):
        raise ValueError(f"feature_names_in is not a list of {n_features} names (strings), "
                         "one per feature")
    return np.asarray(names, dtype=object)
