"""Dual SVM solvers behind one signature; see :mod:`muflow.solvers.registry`."""

from muflow.solvers.kkt import kkt_violation
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.registry import SOLVERS, choose_solver, get_solver

__all__ = ["DualProblem", "DualSolution", "SOLVERS", "choose_solver", "get_solver", "kkt_violation"]
