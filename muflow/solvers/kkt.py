"""The one KKT-violation measure: every solver's stopping rule and the tests' oracle.

For column j with gradient g = Q alpha + p and a bias b (0 without the equality
constraint), the Lagrangian gradient is g_i + y_i b = y_i f(x_i) - 1 for the standard SVM.
The violation is the natural (projected-gradient) residual

    r_i(b) = alpha_i - clip(alpha_i - (g_i + y_i b), 0, U_i),     V = max_i |r_i(b)|,

which is zero exactly at a KKT point and, unlike the maximal-violating-pair gap, is
continuous in alpha: a multiplicative iterate with alpha_i = 1e-9 on a sample that should
be at zero counts 1e-9, not the full gradient. For a free variable r_i is the gradient
itself, so ``tol`` has libsvm's units (libsvm stops when the pair gap, at most 2 V, is
below its ``tol``).

With the equality constraint, b is chosen to minimise V: for a level tau every sample
allows an interval of b, and the smallest tau whose intervals intersect is found by
bisection (vectorised over all columns). The bias that a solver reports is that b.
"""

from __future__ import annotations

import numpy as np

from muflow.solvers._compiled import kkt_columns, kkt_within_columns


def natural_residual(alpha, grad, y, upper, bias) -> np.ndarray:
    """r_i(b) for every sample and column, shape (n, m)."""
    shifted = grad + y * np.asarray(bias)[None, :]
    return alpha - np.clip(alpha - shifted, 0.0, upper)


def kkt_violation(problem, alpha, grad, bias_hint=None):
    """Violation V per column and the bias that attains it.

    Parameters
    ----------
    problem : DualProblem
    alpha : ndarray of shape (n, m)
    grad : ndarray of shape (n, m)
        Q alpha + p at ``alpha``.
    bias_hint : ndarray of shape (m,), optional
        A bias to start from (a solver's multiplier); only speeds up the search.

    Returns
    -------
    violation : ndarray of shape (m,)
    bias : ndarray of shape (m,)
    """
    m = alpha.shape[1]
    hint = np.zeros(m) if bias_hint is None else np.asarray(bias_hint, dtype=np.float64)
    violation = np.empty(m)
    bias = np.empty(m)
    kkt_columns(
        np.ascontiguousarray(alpha, dtype=np.float64),
        np.ascontiguousarray(grad, dtype=np.float64),
        problem.y, problem.upper, bool(problem.equality), hint, violation, bias,
    )
    return violation, bias


def kkt_within(problem, alpha, grad, tol) -> np.ndarray:
    """Whether :func:`kkt_violation` is at most ``tol``, per column, in one pass.

    The same measure (with the equality constraint: the bias intervals at level ``tol``
    intersect exactly when the minimised violation is <= tol), without the bisection that
    finds its value: the per-pass stopping test of iterative solvers.
    """
    out = np.empty(alpha.shape[1], dtype=np.bool_)
    kkt_within_columns(
        np.ascontiguousarray(alpha, dtype=np.float64),
        np.ascontiguousarray(grad, dtype=np.float64),
        problem.y, problem.upper, bool(problem.equality), float(tol), out,
    )
    return out
