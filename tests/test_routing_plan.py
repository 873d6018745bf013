"""One plan, carried out once (issue 40): the rule of :mod:`muflow.routing` makes a
:class:`~muflow.routing.KernelPlan`, the operator factory carries it out without deciding
again, and no other module chooses a path."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import muflow
from muflow import memory, routing
from muflow.backends import gram_operator
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.routing import KernelPlan, plan_kernel

PACKAGE = Path(muflow.__file__).parent

#: The functions that choose a path (or weigh a fact for that choice): only the rule calls them.
RULE_STEPS = {"gram_mode", "runs_on_workers", "fits_as_one_task", "choose_gram", "panels_fit",
              "sweep_path", "_resolved"}


def _called_names(tree) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def test_no_module_but_routing_chooses_a_path():
    choosers, planners = {}, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        called = _called_names(ast.parse(path.read_text()))
        name = path.relative_to(PACKAGE).as_posix()
        if called & RULE_STEPS:
            choosers[name] = sorted(called & RULE_STEPS)
        if "KernelPlan" in called:
            planners[name] = True
    # the sweep asks routing for the path along C; everything else is routing's own
    assert set(choosers) == {"routing.py", "selection/sweep.py"}
    assert choosers.get("selection/sweep.py") == ["sweep_path"]
    assert set(planners) == {"routing.py"}  # plans are made by the rule alone


def _fail(*args, **kwargs):
    raise AssertionError("the factory decided again")


@pytest.fixture
def X():
    return np.random.default_rng(0).normal(size=(200, 4))


def test_the_factory_carries_out_the_plan_it_is_given(X, monkeypatch):
    kernel = Kernel("rbf", gamma=0.5)
    monkeypatch.setattr(routing, "plan_kernel", _fail)
    monkeypatch.setattr(memory, "choose_gram", _fail)
    # 200 samples would be stored by the rule; the plan says rows, and rows it is
    rows = KernelPlan("rows", "as planned", 1, False, 0, "working_set")
    assert isinstance(gram_operator(X, kernel, rows), KernelRows)
    stored = KernelPlan("stored", "as planned", 1, False, 0, "smo", gram_dtype="float32")
    op = gram_operator(X, kernel, stored)
    assert isinstance(op, DenseGram) and op.dense.dtype == np.float32
    with pytest.raises(ValueError, match="one-task"):
        gram_operator(X, kernel, KernelPlan("one-task", "a worker fits it", 1, False, 0))
    with pytest.raises(TypeError, match="not both"):
        gram_operator(X, kernel, rows, gram="stored")


def test_a_factory_without_a_plan_asks_the_rule_once(X, monkeypatch):
    asked = []

    def spy(*args, **kwargs):
        asked.append(kwargs)
        return KernelPlan("rows", "spied", 1, False, 0, "working_set")

    monkeypatch.setattr(routing, "plan_kernel", spy)
    assert isinstance(gram_operator(X, Kernel("rbf", gamma=0.5), gram="stored"), KernelRows)
    assert len(asked) == 1 and asked[0]["gram"] == "stored"


def test_the_plan_names_the_solver_that_runs_on_its_path():
    plenty = 2**40
    assert (plan_kernel(20_000, available=plenty).path, plan_kernel(20_000).solver) == ("rows", "working_set")
    small = plan_kernel(100, available=plenty)
    assert (small.path, small.solver) == ("stored", "smo")
    assert plan_kernel(100, intercept="none", available=plenty).solver == "cd"
    assert plan_kernel(20_000, solver="m3", available=plenty).solver == "m3"
    assert plan_kernel(100, cache_mb=64).cache_mb == 64.0
    assert routing.sweep_path("auto", "working_set") == "continuation"
    assert routing.sweep_path("auto", "munk") == "batched"
    assert routing.sweep_path("compare", "munk") == "compare"
    assert routing.sweep_path("auto", "smo", 3) == "batched"  # halving runs in the batch's rungs


def test_an_svc_fit_asks_for_one_plan_and_reports_its_solver(monkeypatch):
    from sklearn.datasets import make_classification

    import muflow.svc_fit

    X, y = make_classification(n_samples=120, n_features=5, random_state=0)
    plans = []
    original = muflow.svc_fit.plan_fit

    def spy(*args, **kwargs):
        plans.append(original(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(muflow.svc_fit, "plan_fit", spy)
    model = muflow.SVC(gamma=0.5).fit(X, y)
    assert len(plans) == 1 and plans[0].path == "stored"
    assert model.solver_ == plans[0].solver == "smo"
