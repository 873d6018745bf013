"""scikit-learn's own SVM tests, run from the installed wheel against muflow.SVC (issue 18).

Nothing of scikit-learn's tests is copied here. The two modules
``sklearn/svm/tests/test_svm.py`` and ``test_sparse.py`` are imported from the installed
scikit-learn, and every test function that concerns ``SVC`` is re-bound: the same code
object, run with the module's globals except that ``svm.SVC`` (and a bare ``SVC``) is
``muflow.SVC``, and with ``sklearn.svm.SVC`` classes and instances in its parametrizations
replaced by muflow's. A parametrized test over several estimators keeps only the cases of
``SVC``; a test that names ``SVC`` in its body runs in full. The collected names are
``test_svm__<name>`` and ``test_sparse__<name>``.

The fixture ``global_random_seed`` comes from scikit-learn's conftest, which is not loaded
here: it is given below with scikit-learn's default seed, 42.

Every test that does not pass is listed in :data:`EXCEPTIONS` with its reason and marked
``xfail(strict=True)``, so that it fails loudly here the day it passes.
"""

from __future__ import annotations

import inspect
import re
import types
import warnings

import pytest
from sklearn import svm as sklearn_svm
from sklearn.base import BaseEstimator

with warnings.catch_warnings():  # their thread_unsafe mark is registered by their conftest
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    from sklearn.svm.tests import test_sparse as sklearn_test_sparse
    from sklearn.svm.tests import test_svm as sklearn_test_svm

import muflow

#: Tests that do not pass against muflow.SVC, and why. Keys are collected test names, with a
#: parameter id where only some cases are exceptions.
EXCEPTIONS = {
    "test_svm__test_tweak_params": (
        "writes libsvm's private _dual_coef_ and expects predict to read it"),
}


@pytest.fixture
def global_random_seed():
    """scikit-learn's conftest fixture, at its default (SKLEARN_TESTS_GLOBAL_RANDOM_SEED
    unset): 42."""
    return 42


@pytest.fixture(autouse=True)
def _expected_failures(request):
    name = request.node.name
    reason = EXCEPTIONS.get(name) or EXCEPTIONS.get(name.split("[")[0])
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


# -- re-binding scikit-learn's tests to muflow.SVC ----------------------------------------
class _SvmNamespace(types.ModuleType):
    """``sklearn.svm`` with ``SVC`` replaced by ``muflow.SVC``."""

    def __getattr__(self, name):
        return muflow.SVC if name == "SVC" else getattr(sklearn_svm, name)


_SVM = _SvmNamespace("sklearn.svm (SVC = muflow.SVC)")
_ParameterSet = type(pytest.param(None))


def _is_sklearn_svc(value) -> bool:
    return value is sklearn_svm.SVC or type(value) is sklearn_svm.SVC


def _swap(value):
    """``value`` with scikit-learn's SVC (class or instance) replaced by muflow's."""
    if value is sklearn_svm.SVC:
        return muflow.SVC
    if type(value) is sklearn_svm.SVC:
        return muflow.SVC(**value.get_params())
    if isinstance(value, _ParameterSet):
        return pytest.param(*(_swap(v) for v in value.values), marks=value.marks, id=value.id)
    if isinstance(value, (tuple, list)):
        return type(value)(_swap(v) for v in value)
    return value


def _is_estimator(value) -> bool:
    if isinstance(value, _ParameterSet):
        return any(_is_estimator(v) for v in value.values)
    if isinstance(value, (tuple, list)):
        return any(_is_estimator(v) for v in value)
    return isinstance(value, BaseEstimator) or (isinstance(value, type) and issubclass(value, BaseEstimator))


def _has_svc(value) -> bool:
    if isinstance(value, _ParameterSet):
        return any(_has_svc(v) for v in value.values)
    if isinstance(value, (tuple, list)):
        return any(_has_svc(v) for v in value)
    return _is_sklearn_svc(value)


def _parametrize(mark, in_body: bool):
    """A parametrize mark with SVC swapped. When it lists estimators, only its cases with
    SVC are kept; a list without SVC is kept whole if the test's body uses SVC itself, and
    otherwise the test is not about SVC (None)."""
    argnames, argvalues = mark.args[0], list(mark.args[1])
    ids = mark.kwargs.get("ids")
    keep = list(range(len(argvalues)))
    if any(_is_estimator(v) for v in argvalues):
        with_svc = [i for i in keep if _has_svc(argvalues[i])]
        if with_svc:
            keep = with_svc
        elif not in_body:
            return None
    kwargs = dict(mark.kwargs)
    if isinstance(ids, (list, tuple)):
        kwargs["ids"] = [ids[i] for i in keep]
    return pytest.mark.parametrize(argnames, [_swap(argvalues[i]) for i in keep], **kwargs)


_NAMES_SVC = re.compile(r"(?<![A-Za-z_])SVC\b")
_COMMENT = re.compile(r"#[^\n]*")

#: Marks of scikit-learn's own runner that mean nothing here (tests run in one thread).
_DROPPED_MARKS = ("thread_unsafe",)


def _rebind(function, namespace):
    """``function``'s code with the globals ``namespace``, SVC swapped in its defaults and
    parametrizations; None when it does not concern SVC (neither its code nor its cases
    name SVC)."""
    source = inspect.getsource(function)
    body = _COMMENT.sub("", source[source.index("def "):])
    in_body = bool(_NAMES_SVC.search(body))
    marks = []
    concerns = in_body
    for mark in getattr(function, "pytestmark", []):
        if mark.name in _DROPPED_MARKS:
            continue
        if mark.name == "parametrize":
            if any(_has_svc(v) for v in mark.args[1]):
                concerns = True
            decorator = _parametrize(mark, in_body)
            if decorator is None:
                return None
        else:
            decorator = getattr(pytest.mark, mark.name)(*mark.args, **mark.kwargs)
        marks.append(decorator)
    if not concerns:
        return None
    defaults = None if function.__defaults__ is None else tuple(_swap(d) for d in function.__defaults__)
    rebound = types.FunctionType(function.__code__, namespace, function.__name__, defaults,
                                 function.__closure__)
    rebound.__kwdefaults__ = function.__kwdefaults__
    rebound.__dict__.update({k: v for k, v in function.__dict__.items() if k != "pytestmark"})
    rebound.__qualname__ = function.__qualname__
    rebound.__module__ = __name__
    for decorator in reversed(marks):
        rebound = decorator(rebound)
    return rebound


def _rebound_tests(module):
    """{name: test} of ``module``'s tests that concern SVC, re-bound to muflow.SVC. Helper
    functions of the module are re-bound too, so that they see the same namespace."""
    namespace = dict(vars(module))
    namespace["svm"] = _SVM
    if "SVC" in namespace:
        namespace["SVC"] = muflow.SVC
    tests = {}
    for name, obj in vars(module).items():
        if not isinstance(obj, types.FunctionType) or obj.__module__ != module.__name__:
            continue
        if name.startswith("test"):
            rebound = _rebind(obj, namespace)
            if rebound is not None:
                tests[name] = rebound
        else:  # a helper: same code, this namespace
            namespace[name] = types.FunctionType(obj.__code__, namespace, name, obj.__defaults__,
                                                 obj.__closure__)
    return tests


for _prefix, _module in (("test_svm", sklearn_test_svm), ("test_sparse", sklearn_test_sparse)):
    for _name, _test in _rebound_tests(_module).items():
        globals()[f"{_prefix}__{_name}"] = _test
del _prefix, _module, _name, _test
