"""One vocabulary for checking parameters: estimators, the sweep and the run configuration.

Every check raises :class:`~muflow.exceptions.MuflowInputError` (a ``ValueError``, as
scikit-learn expects) with one message shape: what the parameter must be, what it got, and,
where there is one, the fix. ``where`` prefixes the message with the place the value came
from (``"config.toml: "``, ``"sweep: "``).

The constraints follow scikit-learn's parameter-constraint vocabulary (``Interval`` with
``closed``, ``StrOptions``), written as plain functions so that the command line, the TOML
configuration and the estimators share them:

- :func:`check_number`: a real (or integral) scalar in an interval, optionally ``inf``;
- :func:`check_choice`: one of a fixed set of values;
- :func:`check_bool`;
- :func:`check_per_sample`: a vector with one finite value per sample;
- :func:`check_weighted_classes`: sample weights that leave samples of two classes.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from muflow.exceptions import MuflowInputError


def _fail(name, must, value, *, where="", hint=""):
    hint = f"; {hint}" if hint else ""
    raise MuflowInputError(f"{where}{name} must be {must}, got {value!r}{hint}")


def check_number(value, name, *, integer=False, low=None, high=None, closed="both",
                 allow_inf=False, where="", hint=""):
    """Check a scalar parameter and return it (as ``int`` or ``float``).

    Parameters
    ----------
    value : object
    name : str
        The parameter's name as the user wrote it.
    integer : bool, default=False
        Require an integral value (``bool`` is refused either way).
    low, high : float, optional
        Bounds of the interval (scikit-learn's ``Interval``).
    closed : {"both", "left", "right", "neither"}, default="both"
        Which bounds belong to the interval.
    allow_inf : bool, default=False
        Accept ``+inf`` above any ``high`` (the hard margin's ``C``).
    where, hint : str
        Message prefix (the value's source) and suffix (the fix).
    """
    kind = numbers.Integral if integer else numbers.Real
    what = "an integer" if integer else "a number"
    lo_in = closed in ("both", "left")
    hi_in = closed in ("both", "right")
    parts = []
    if low is not None:
        parts.append(f"{'>=' if lo_in else '>'} {low:g}")
    if high is not None:
        parts.append(f"{'<=' if hi_in else '<'} {high:g}")
    must = what + (" " + " and ".join(parts) if parts else "")
    if low == 0 and not lo_in and high is None:
        must = f"a positive {'integer' if integer else 'number'}"
    if allow_inf:
        must += " (or float('inf'))"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
        _fail(name, must, value, where=where, hint=hint)
    if allow_inf and value == math.inf:
        return math.inf
    if not math.isfinite(value):
        _fail(name, must, value, where=where, hint=hint)
    if low is not None and (value < low or (value == low and not lo_in)):
        _fail(name, must, value, where=where, hint=hint)
    if high is not None and (value > high or (value == high and not hi_in)):
        _fail(name, must, value, where=where, hint=hint)
    return int(value) if integer else float(value)


def check_choice(value, name, choices, *, where="", hint=""):
    """Check that ``value`` is one of ``choices`` (scikit-learn's ``StrOptions``)."""
    if isinstance(value, str) or value is None or isinstance(value, (bool, numbers.Number)):
        if value in choices:
            return value
    listed = ", ".join(repr(c) for c in choices)
    _fail(name, f"one of {listed}", value, where=where, hint=hint)


def check_bool(value, name, *, where=""):
    """Check a True/False flag."""
    if not isinstance(value, (bool, np.bool_)):
        _fail(name, "True or False", value, where=where)
    return bool(value)


def check_per_sample(values, n, name, *, default):
    """A float64 vector of one finite value per sample; ``default`` everywhere when None."""
    if values is None:
        return np.full(n, default, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.shape[0] != n:
        raise MuflowInputError(f"{name} has length {values.shape[0]}, expected {n} (one per sample)")
    if not np.all(np.isfinite(values)):
        raise MuflowInputError(f"{name} contains NaN or infinite values; give a finite value per sample")
    return values


def check_weighted_classes(weights, y):
    """The samples of positive weight (a boolean mask), refusing weights that leave none,
    or samples of a single class, to fit: libsvm's messages, which scikit-learn's SVC
    raises, for ``muflow.SVC`` and ``muflow.LinearSVC`` alike (both would otherwise fit a
    model that predicts one class)."""
    positive = weights > 0
    if not positive.any():
        raise MuflowInputError(
            "Invalid input - all samples have zero or negative weights. Give some samples "
            "a positive sample_weight")
    if len(np.unique(y[positive])) < 2:
        raise MuflowInputError(
            "Invalid input - all samples with positive weights belong to the same class; "
            "a classifier needs samples of at least 2 classes with positive weight")
    return positive
