"""muflow: kernel SVMs by multiplicative, coordinate and subset solvers, at scale.

The public names load lazily so that ``import muflow`` stays light (the command line and
Dask workers import it often).
"""

from importlib import import_module

__version__ = "0.1.0"

_PUBLIC = {
    "SVC": "muflow.model",
    "LinearSVC": "muflow.linear",
    "save": "muflow.persistence",
    "load": "muflow.persistence",
    "Kernel": "muflow.kernels",
    "gamma_from_sigma": "muflow.kernels",
    "DualProblem": "muflow.solvers.problem",
    "DualSolution": "muflow.solvers.problem",
    "DenseGram": "muflow.operators",
    "InputMarginSVC": "muflow.input_margin",
    "input_space_margin": "muflow.input_margin",
    "datasets": "muflow.datasets",
    "MuflowError": "muflow.exceptions",
    "MuflowInputError": "muflow.exceptions",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'muflow' has no attribute {name!r}")
    value = import_module(module)
    if name != "datasets":
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
