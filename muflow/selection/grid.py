"""The sweep grid and its options: one schema and one validator for ``sweep`` and ``run``.

A grid is a list of kernels, each with lists of its parameters, and a list of C values.
In TOML (the ``[grid]`` table of a run configuration, :mod:`muflow.config`, which
``python -m muflow sweep --config`` reads too)::

    [grid]
    C = [0.01, 0.1, 1, 10, 100]
    kernels = [
      { kernel = "rbf", gamma = [0.01, 0.05] },
      { kernel = "poly", degree = [2, 3], gamma = [0.1], coef0 = [1.0] },
    ]

    [sweep]
    folds = 5
    seed = 0

The options of :func:`muflow.selection.run_sweep` (``[sweep]``) are checked by
:func:`check_options`, with the vocabulary of :mod:`muflow.validation`; a message names
the key as the user wrote it (``grid.kernels[0].gamma[1]`` in a file, ``C[0]`` in Python).
"""

from __future__ import annotations

import itertools
import numbers
from dataclasses import dataclass

from muflow.exceptions import MuflowInputError
from muflow.kernels import KERNEL_PARAMETERS
from muflow.validation import check_choice, check_number

#: Kernels a grid may name (a precomputed Gram has no place in a sweep).
GRID_KERNELS = tuple(k for k in KERNEL_PARAMETERS if k != "precomputed")
#: Solvers that read rows of K (subset methods): continuation along C suits them.
SUBSET_SOLVERS = ("smo", "cd", "adatron", "hybrid")
PATHS = ("auto", "batched", "continuation", "compare")
#: The options of :func:`muflow.selection.run_sweep` a grid file may set (``[sweep]``).
SWEEP_OPTIONS = ("folds", "seed", "solver", "path", "intercept", "tol", "max_iter", "halving",
                 "halving_min_iter", "n_jobs", "time_limit", "cache_size")
PARAM_ORDER = ("gamma", "degree", "coef0")
#: What a kernel parameter left out of the grid takes: the :class:`muflow.SVC` default.
SVC_DEFAULTS = {"gamma": "scale", "degree": 3, "coef0": 0.0}
#: A kernel entry of the grid, as error messages show it.
GRID_EXAMPLE = "{ kernel = \"rbf\", gamma = [0.01, 0.1] }"


@dataclass(frozen=True)
class SweepGrid:
    """Kernels with lists of their parameters, and C values.

    Parameters
    ----------
    kernels : list of dict
        One dict per kernel: ``{"kernel": "rbf", "gamma": [0.01, 0.05]}``,
        ``{"kernel": "poly", "degree": [2, 3], "gamma": [...], "coef0": [...]}``. A parameter
        may be a scalar or a list; a parameter left out takes the :class:`muflow.SVC`
        default (gamma "scale", degree 3, coef0 0). ``gamma`` may be "scale" or "auto".
    C : list of float
        Positive finite penalties, shared by every kernel setting.
    """

    kernels: list
    C: list

    def validate(self, *, where: str = "", prefix: str = "") -> "SweepGrid":
        """Check the grid before any work; raise :class:`MuflowInputError` naming the fix.

        ``where`` prefixes every message (the file, ``"run.toml: "``) and ``prefix`` the
        keys (``"grid."`` in a configuration file).
        """
        kernels = self.kernels
        if not isinstance(kernels, (list, tuple)) or not kernels:
            raise MuflowInputError(f"{where}{prefix}kernels must be a non-empty list of kernels "
                                   f"such as {GRID_EXAMPLE}, got {kernels!r}")
        C = _as_list(self.C, f"{prefix}C", where)
        if not C:
            raise MuflowInputError(f"{where}{prefix}C must be a non-empty list of positive "
                                   "numbers, e.g. [0.1, 1, 10]")
        for i, c in enumerate(C):
            check_number(c, f"{prefix}C[{i}]", low=0, closed="neither", where=where)
        _refuse_repeats([float(c) for c in C], f"{prefix}C", where)
        for i, spec in enumerate(kernels):
            key = f"{prefix}kernels[{i}]"
            if not isinstance(spec, dict) or "kernel" not in spec:
                raise MuflowInputError(f"{where}{key} must be a table with a 'kernel' key such "
                                       f"as {GRID_EXAMPLE}, got {spec!r}")
            name = check_choice(spec["kernel"], f"{key}.kernel", GRID_KERNELS, where=where)
            allowed = KERNEL_PARAMETERS[name]
            for param, values in spec.items():
                if param == "kernel":
                    continue
                if param not in allowed:
                    takes = f"takes {', '.join(allowed)}" if allowed else "takes no parameters"
                    raise MuflowInputError(
                        f"{where}{key}.{param}: kernel {name!r} has no parameter {param!r} "
                        f"(it {takes}); remove it or put it on a kernel that reads it")
                values = _as_list(values, f"{key}.{param}", where)
                if not values:
                    raise MuflowInputError(f"{where}{key}.{param} is an empty list; give at "
                                           "least one value or leave it out for the default")
                for j, v in enumerate(values):
                    _check_param(param, v, f"{key}.{param}[{j}]", where)
                _refuse_repeats(values, f"{key}.{param}", where)
        settings = [tuple(setting.items()) for setting in self.kernel_settings()]
        _refuse_repeats(settings, f"{prefix}kernels", where,
                        shown=lambda setting: f"the setting {setting_label(dict(setting))}")
        return self

    def kernel_settings(self) -> list[dict]:
        """Every kernel setting as ``{"kernel": name, <param>: value, ...}`` (SVC names)."""
        out = []
        for spec in self.kernels:
            name = spec["kernel"]
            keys = [k for k in PARAM_ORDER if k in KERNEL_PARAMETERS[name]]
            lists = [_as_list(spec.get(k, SVC_DEFAULTS[k]), k) for k in keys]
            for combo in itertools.product(*lists):
                setting = {"kernel": name}
                for k, v in zip(keys, combo):
                    setting[k] = int(v) if k == "degree" else (v if isinstance(v, str) else float(v))
                out.append(setting)
        return out

    def sorted_C(self) -> list[float]:
        """The C values in sweep order (ascending)."""
        return sorted(float(c) for c in _as_list(self.C, "C"))

    def configurations(self) -> list[dict]:
        """Every configuration: a kernel setting with one C, in sweep order (C ascending)."""
        return [dict(setting, C=c) for setting in self.kernel_settings() for c in self.sorted_C()]

    def normalized(self) -> "SweepGrid":
        """A copy in the form a configuration file round-trips: every parameter a list
        (degrees ``int``, other numbers ``float``), C a list of floats."""
        def value(key, v):
            return int(v) if key == "degree" else (v if isinstance(v, str) else float(v))

        kernels = [{k: v if k == "kernel" else [value(k, x) for x in _as_list(v, k)]
                    for k, v in spec.items()} for spec in self.kernels]
        return SweepGrid(kernels=kernels, C=[float(c) for c in _as_list(self.C, "C")])

    def to_dict(self) -> dict:
        """Plain data (the ``[grid]`` table, and the grid ``sweep.json`` records); ``SweepGrid(**d)``
        reads it back. NumPy values (``gamma=np.logspace(-3, 0, 4)``, ``degree=np.int64(2)``)
        become Python's, as JSON writes them; the grid's shape (a scalar or a list) stays."""
        return {"kernels": [{k: _python(v) for k, v in spec.items()} for spec in self.kernels],
                "C": [float(c) for c in _as_list(self.C, "C")]}


def _refuse_repeats(values, key, where, shown=repr):
    """Refuse a value listed twice: its configurations would be solved twice and reported
    as two rows of results.csv."""
    seen = set()
    for value in values:
        if value in seen:
            raise MuflowInputError(f"{where}{key} lists {shown(value)} more than once; give "
                                   "each once")
        seen.add(value)


def _python(value):
    """``value`` with NumPy arrays and scalars as Python lists and numbers (JSON writes those)."""
    if isinstance(value, (list, tuple)):
        return [_python(v) for v in value]
    return value.tolist() if hasattr(value, "tolist") else value


def _as_list(values, name, where=""):
    if isinstance(values, (str, numbers.Number)):
        return [values]
    try:
        return list(values)
    except TypeError:
        raise MuflowInputError(f"{where}{name} must be a number or a list of numbers, "
                               f"got {values!r}") from None


def _check_param(param, v, name, where):
    if param == "gamma":
        if isinstance(v, str) and v not in ("scale", "auto"):
            raise MuflowInputError(f"{where}{name} must be a positive number, 'scale' or "
                                   f"'auto', got {v!r}")
        if not isinstance(v, str):
            check_number(v, name, low=0, closed="neither", where=where,
                         hint="or 'scale' / 'auto' (scikit-learn's rules)")
    elif param == "degree":
        check_number(v, name, integer=True, low=1, where=where)
    else:
        check_number(v, name, where=where)


def check_options(options: dict, *, where: str = "", prefix: str = "") -> dict:
    """Check options of :func:`muflow.selection.run_sweep` (any subset of
    :data:`SWEEP_OPTIONS`) and return them, numbers as ``int`` or ``float``.

    ``solver`` is checked for its type here; against the registry and every kernel setting
    of the grid when a run configuration is read (:func:`muflow.config.from_dict`, before
    any data), and with the data when the sweep picks its solvers
    (:func:`muflow.solvers.registry.choose_solver`).
    """
    from muflow.solvers.registry import INTERCEPTS

    def name(key):
        return f"{prefix}{key}"

    out = dict(options)
    integers = {"folds": 2, "seed": 0, "max_iter": 1, "halving_min_iter": 1}
    for key, low in integers.items():
        if key in out and not (key == "max_iter" and out[key] == -1):  # -1: no limit
            hint = "or -1 for no limit" if key == "max_iter" else ""
            out[key] = check_number(out[key], name(key), integer=True, low=low, where=where,
                                    hint=hint)
    if out.get("n_jobs") is not None:
        from muflow.threads import check_n_jobs

        try:
            out["n_jobs"] = check_n_jobs(out["n_jobs"], name("n_jobs"))
        except MuflowInputError as exc:
            raise MuflowInputError(f"{where}{exc}") from None
    if out.get("halving") is not None:
        out["halving"] = check_number(out["halving"], name("halving"), integer=True, low=2,
                                      where=where, hint="eta, the successive-halving factor")
    if "tol" in out:
        out["tol"] = check_number(out["tol"], name("tol"), low=0, closed="neither", where=where)
    if out.get("cache_size") is not None:
        out["cache_size"] = check_number(out["cache_size"], name("cache_size"), low=0,
                                         closed="neither", where=where, hint="megabytes of kernel rows")
    if out.get("time_limit") is not None:
        from muflow.time_limit import check_time_limit

        try:
            out["time_limit"] = check_time_limit(out["time_limit"], name("time_limit"))
        except MuflowInputError as exc:
            raise MuflowInputError(f"{where}{exc}") from None
    if "path" in out:
        check_choice(out["path"], name("path"), PATHS, where=where)
    if "intercept" in out:
        check_choice(out["intercept"], name("intercept"), INTERCEPTS, where=where)
    if "solver" in out and not isinstance(out["solver"], str):
        raise MuflowInputError(f"{where}{name('solver')} must be a solver name or 'auto', "
                               f"got {out['solver']!r}")
    if out.get("halving") is not None and out.get("path") in ("continuation", "compare"):
        raise MuflowInputError(f"{where}successive halving runs on the batched path; use "
                               f"{name('path')} = 'batched' or 'auto'")
    return out


def setting_label(setting) -> str:
    """``rbf(gamma=0.5)``: a kernel setting for tables and plots."""
    params = ", ".join(f"{k}={setting[k]:g}" if not isinstance(setting[k], str) else f"{k}={setting[k]}"
                       for k in PARAM_ORDER if k in setting)
    return f"{setting['kernel']}({params})" if params else setting["kernel"]
