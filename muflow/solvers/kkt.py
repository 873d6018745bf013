"""The one KKT-violation measure: every solver's stopping rule and the tests' oracle.

For column j with gradient g = Q alpha + p and a bias b (0 without the equality
constraint), the Lagrangian gradient is g_i + y_i b = y_i f(x_i) - 1 for the standard SVM.
The violation is the natural (projected-gradient) residual

    r_i(b) = (alpha_i - clip(alpha_i - s_i (g_i + y_i b), 0, U_i)) / s_i,     V = max_i |r_i(b)|,

with the step s_i = min(1, U_i), which is zero exactly at a KKT point and, unlike the
maximal-violating-pair gap, is continuous in alpha: a multiplicative iterate with
alpha_i = 1e-9 on a sample that should be at zero counts 1e-9 / s_i, not the full
gradient. For a free variable r_i is the gradient itself, so ``tol`` has libsvm's units
(libsvm stops when the pair gap, at most 2 V, is below its ``tol``).

The step: r_i is the natural residual of alpha_i / s_i in the box [0, U_i / s_i]. With a
step of 1 a sample's residual could not exceed U_i, so below C = ``tol`` every point would
pass whatever its gradient: SMO's point, whose pair gap is below ``tol`` in gradient
units, would have every residual at U_i and no bias singled out (docs/benchmarks.md gives
what that did to predictions). With s_i = U_i below 1 a violating sample at a bound counts
its gradient up to 1, as for C >= 1, where the step is 1.

With the equality constraint, b is chosen to minimise V: for a level tau every sample
allows an interval of b, and the smallest tau whose intervals intersect is found by
bisection (vectorised over all columns). The bias that a solver reports is that b.

A column whose alpha or gradient holds NaN or inf measures inf, never 0 (a NaN residual
compares false and would otherwise leave the running maximum at 0: a damaged state would
read as converged).

Where it lives: the measure is written once, in :mod:`muflow.solvers._kkt_compiled`
(the per-sample residual and bias interval, inlined into every loop that tests it: the
multiplicative per-pass summary, the subset solvers' certificate and residuals, linear
coordinate descent; and :func:`~muflow.solvers._kkt_compiled.kkt_columns`, its value and
bias, called through :func:`kkt_violation`). :func:`kkt_violation_reference` is an
independent plain NumPy implementation (a different way to find the bias), the oracle
that the tests hold the compiled measure and every solver to.
"""

from __future__ import annotations

import numpy as np

from muflow.solvers._kkt_compiled import kkt_columns


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


def _columns(*arrays):
    """Each argument as a float64 array of shape (n, m); (n,) becomes (n, 1)."""
    out = [np.asarray(a, dtype=np.float64) for a in arrays]
    return [a[:, None] if a.ndim == 1 else a for a in out]


def residuals_reference(alpha, grad, y, upper, bias=0.0):
    """|r_i(b)| = |alpha_i - clip(alpha_i - (g_i + y_i b), 0, U_i)| in NumPy (the definition).

    Parameters
    ----------
    alpha, grad, y, upper : array-like of shape (n,) or (n, m)
    bias : float or array-like of shape (m,), default=0.0

    Returns
    -------
    ndarray of shape (n, m)
    """
    alpha, grad, y, upper = _columns(alpha, grad, y, upper)
    shifted = grad + y * np.asarray(bias, dtype=np.float64)
    a, u = _in_unit_steps(alpha, upper)
    return np.abs(a - np.clip(a - shifted, 0.0, u))


def _in_unit_steps(alpha, upper):
    """alpha / s and U / s with s = min(1, U) (1 where U <= 0): the residual's step."""
    s = np.where((upper > 0.0) & (upper < 1.0), upper, 1.0)
    return alpha / s, upper / s


def _bias_candidates(a, g, y, u):
    """Every bias at which V(b) = max_i |r_i(b)| of one column can have a vertex.

    As a function of s = y_i b, r_i is a - clip(a - g - s, 0, U): the constant a for
    s >= a - g, the line g + s between, the constant a - U for s <= a - g - U. So |r_i| has
    knots at s = a - g, a - g - U and -g, and V, the upper envelope of piecewise-linear
    terms of slopes -1, 0 and 1, changes slope only at a knot or where a line of one sample
    crosses a line or a constant level of another. V tends to a constant or to +inf at
    either end, so its minimum is attained at one of these points.
    """
    free = u > 0.0
    a, g, y, u = a[free], g[free], y[free], u[free]
    a, u = _in_unit_steps(a, u)  # r_i measures alpha_i / s_i in [0, U_i / s_i]
    finite = np.isfinite(u)
    knots = [y * (a - g), (y * (a - g - u))[finite], -y * g]
    # lines g_i + y_i b = +-(g_k + y_k b)
    gi, gk = g[:, None], g[None, :]
    yi, yk = y[:, None], y[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        plus = np.where(yi != yk, (gk - gi) / (yi - yk), np.nan)
        minus = np.where(yi == yk, -(gi + gk) / (yi + yk), np.nan)
    # a line g_i + y_i b = +-c at a constant level c of any sample
    levels = np.concatenate([np.abs(a), np.abs(u - a)[finite]])
    lines = [yi * (c - gi) for c in (levels[None, :], -levels[None, :])]
    out = np.concatenate([np.ravel(v) for v in knots + [plus, minus] + lines] + [[0.0]])
    return out[np.isfinite(out)]


def kkt_violation_reference(alpha, grad, y, upper, equality):
    """The KKT measure in plain NumPy: the tests' oracle for :func:`kkt_violation`.

    Without the equality constraint V = max_i |r_i(0)|. With it, V = min_b max_i |r_i(b)|,
    found not by the bisection over levels of the compiled measure but by evaluating
    V at every point where it can have a vertex (:func:`_bias_candidates`): O(n^2)
    candidates per column, so for small problems only.

    Parameters
    ----------
    alpha, grad, y, upper : array-like of shape (n,) or (n, m)
        alpha, g = Q alpha + p, labels +-1 and bounds U (0 pins a sample, inf is allowed).
    equality : bool
        Whether the problem has the constraint sum_i y_i alpha_i = 0.

    Returns
    -------
    violation : ndarray of shape (m,)
    bias : ndarray of shape (m,)
        A bias attaining ``violation`` (one of them: the minimiser need not be unique).
    """
    alpha, grad, y, upper = _columns(alpha, grad, y, upper)
    m = alpha.shape[1]
    violation = np.empty(m)
    bias = np.zeros(m)
    for j in range(m):
        cols = (alpha[:, j], grad[:, j], y[:, j], upper[:, j])
        if not equality:
            violation[j] = residuals_reference(*cols).max(initial=0.0)
            continue
        b = _bias_candidates(*cols)
        values = residuals_reference(*cols, bias=b).max(axis=0, initial=0.0)  # V at each b
        best = int(np.argmin(values))
        violation[j], bias[j] = values[best], b[best]
    return violation, bias
