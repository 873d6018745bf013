"""The hard margin (C = inf) on data that are not separable: an unbounded dual, detected.

With U_i = inf the dual of problem.py, F(alpha) = 1/2 alpha'Q alpha + p'alpha over
alpha >= 0 (and sum_i y_i alpha_i = 0 with the exact intercept), has a minimiser only when
the two classes can be separated in the kernel's feature space; otherwise F decreases
without bound and the coefficients grow for ever, by about the same amount at every step
(linearly in the number of steps, for SMO as for the multiplicative updates), so a test on
their size alone (or on F below -1e250) is reached after hours, not seconds.

The test here is on the direction of the iterate instead, and it is a certificate.
Every point t alpha (t > 0) of the ray through a feasible alpha is feasible (no upper
bound, and the sum constraint is linear), and F on the ray, t^2/2 alpha'Q alpha +
t p'alpha, is least at t = -p'alpha / alpha'Q alpha, with value

    F(t* alpha) = -(p'alpha)^2 / (2 alpha'Q alpha).

If the problem has a minimiser alpha*, then F(alpha*) <= F(t* alpha); at alpha* the KKT
conditions give alpha*'(Q alpha* + p) = 0 (the multiplier of the sum constraint drops out,
y'alpha* = 0), so F(alpha*) = p'alpha* / 2 and

    -p'alpha* >= L(alpha) = (p'alpha)^2 / alpha'Q alpha          for every feasible alpha.

For the SVM (p = -1), -p'alpha* = sum_i alpha*_i = ||w*||^2 = 1 / rho^2, rho the geometric
margin in feature space (M3 paper eq. (29)-(31)). With kappa = max_i K_ii >= |K_ij| (so
sqrt(kappa) bounds the samples' norm R in feature space), L kappa / max|p|^2 is therefore
a lower bound on (R / rho)^2, the squared ratio of the data's radius to the margin
(Novikoff's bound on the perceptron's mistakes). On data that are not separable the
direction alpha / sum alpha tends to one where alpha'Q alpha / (sum alpha)^2 -> 0 (the two
classes' convex hulls meet) and L grows as the square of the coefficients: the test fires
after thousands of steps where a bound on alpha itself would need billions.

The problem is declared unbounded once that bound passes :data:`HARD_MARGIN_LIMIT` =
1e10, a margin below 1e-5 of the data's radius. Such a margin is beyond what float64 can
solve in any case: the coefficients of the solution sum to at least 1e10 / kappa, so a
gradient entry, (Q alpha)_i + p_i, carries a rounding error of eps * kappa * sum alpha
>= 2e-6 (eps = 2.2e-16), as large as the tolerances a fit asks for, and the KKT
conditions could not be certified. A separable problem with a larger margin is never
declared unbounded: L is a lower bound, exact up to the rounding of alpha'Q alpha
(relative to kappa (sum alpha)^2, a few eps times sqrt(n), far below 1e-10).

Only columns whose every coefficient above zero has U_i = inf are tested (the ray leaves
a finite box). One function, :func:`check_bounded`, serves every solver that accepts
C = inf; each calls it with the alpha and Q alpha it already holds (no extra product).
"""

from __future__ import annotations

import numpy as np

from muflow.exceptions import MuflowError

#: (R / rho)^2 beyond which a hard margin counts as unbounded (module notes).
HARD_MARGIN_LIMIT = 1e10

UNBOUNDED_MESSAGE = (
    "the dual objective is unbounded: the hard-margin problem (C=inf) has no "
    "solution on data that are not separable; use a finite C")


def hard_margin_scale(upper, diagonal) -> float | None:
    """kappa = max_i K_ii (>= |K_ij| for a PSD kernel) where some sample has no upper bound
    (C = inf: the test is worth making), else None. ``diagonal``: Q's diagonal, or the
    operator that gives it (None where it gives none: then only a non-finite objective is
    caught)."""
    if not np.isinf(upper).any():
        return None
    if hasattr(diagonal, "has_rows"):
        if not diagonal.has_rows:
            return None
        diagonal = diagonal.diagonal()
    diagonal = np.asarray(diagonal, dtype=np.float64)
    return float(diagonal.max()) if diagonal.size else None


def unbounded_columns(alpha, q_alpha, linear, upper, scale) -> np.ndarray:
    """Per column, whether the lower bound L(alpha) kappa / max|p|^2 on (R / rho)^2 passes
    :data:`HARD_MARGIN_LIMIT` (module notes), or F is not finite.

    Parameters
    ----------
    alpha, q_alpha, linear, upper : ndarray of shape (n,) or (n, m)
        A feasible iterate, Q alpha there, p and U.
    scale : float or None
        :func:`hard_margin_scale`; None tests the objective's finiteness only.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.ndim == 1:
        alpha, q_alpha, linear, upper = (np.asarray(a, dtype=np.float64)[:, None]
                                         for a in (alpha, q_alpha, linear, upper))
    quad = np.einsum("ij,ij->j", alpha, q_alpha)
    lin = np.einsum("ij,ij->j", alpha, linear)
    out = ~np.isfinite(0.5 * quad + lin)
    if scale is None or not scale > 0:
        return out
    ray = np.all((alpha <= 0) | np.isinf(upper), axis=0)  # t alpha feasible for all t > 0
    p_max = np.abs(linear).max(axis=0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        bound = np.where(quad > 0, lin * lin / quad, np.inf) * scale / (p_max * p_max)
    return out | (ray & (lin < 0) & (bound > HARD_MARGIN_LIMIT))


def check_bounded(alpha, q_alpha, linear, upper, scale) -> None:
    """Raise :class:`MuflowError` (:data:`UNBOUNDED_MESSAGE`) when any column is unbounded
    (:func:`unbounded_columns`)."""
    if unbounded_columns(alpha, q_alpha, linear, upper, scale).any():
        raise MuflowError(UNBOUNDED_MESSAGE)


def hard_margin_column(upper) -> bool:
    """Whether every sample of a column is either free of an upper bound or pinned at zero
    (U_i = 0): then F(alpha*) = p'alpha* / 2 at a minimiser, which :func:`check_objective`
    reads."""
    upper = np.asarray(upper)
    return bool(np.all(np.isinf(upper) | (upper == 0)))


def check_objective(objective, linear, upper, scale) -> None:
    """The test of :func:`check_bounded` for a solver that holds F but not alpha and
    Q alpha (a working set whose state lives elsewhere): F(alpha*) <= F(alpha) and
    F(alpha*) = p'alpha* / 2 on a hard-margin column give -p'alpha* >= -2 F(alpha), a weaker
    bound than L(alpha) (the ray's minimum lies below F(alpha)) compared with the same
    :data:`HARD_MARGIN_LIMIT`."""
    if not np.isfinite(objective):
        raise MuflowError(UNBOUNDED_MESSAGE)
    if scale is None or not scale > 0 or not hard_margin_column(upper):
        return
    p_max = float(np.abs(linear).max())
    if -2.0 * objective * scale / (p_max * p_max) > HARD_MARGIN_LIMIT:
        raise MuflowError(UNBOUNDED_MESSAGE)


def bounded_check(col, scale):
    """``bounded(state)`` for the working set's outer loop on a column
    (:class:`muflow.solvers._subset.Column`) with a hard margin, or None: the test of
    :func:`check_bounded` on the state's alpha and G where its home holds G in this
    process, else :func:`check_objective` on its F."""
    if scale is None or not np.isinf(col.U).any():  # this column has no unbounded sample
        return None

    def bounded(state):
        G = state.gradient()
        if G is None:
            check_objective(state.F, col.p, col.U, scale)
        else:
            check_bounded(state.alpha, G - col.p, col.p, col.U, scale)

    return bounded
