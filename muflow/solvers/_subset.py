"""Column-level helpers shared by the subset and coordinate solvers (Python side).

The compiled loops work on one problem (column) at a time with contiguous vectors; these
helpers take a column out of a :class:`DualProblem`, compute its exact gradient with one
operator product, certify it with the common KKT measure and assemble the batch result.
"""

from __future__ import annotations

import functools

import numpy as np

from muflow.solvers._kkt_compiled import kkt_columns, kkt_vector, residuals_column
from muflow.solvers.problem import DualProblem, DualSolution, check_finite_start

#: Failed certificates with nothing shrunk after which an outer loop gives up (rounding).
MAX_STALLS = 20

#: The gap, in units of the loop's own gap target, at which a loop that shrinks brings every
#: shrunk variable back, once (libsvm's ``Solver::do_shrinking``, 10 eps; Chang & Lin 2011,
#: section 5.1): the working-set loop and SMO's pair steps.
UNSHRINK_GAP = 10.0

#: Steps without a new low of the objective after which a loop that never meets its gap
#: certifies its point (:meth:`StallGuard.flat`).
FLAT_STEPS = 1 << 16


def column_view(v) -> np.ndarray:
    """``v`` as an (n, 1) C-ordered float64 array: a view of a contiguous float64 vector, a
    copy otherwise."""
    return np.ascontiguousarray(v, dtype=np.float64)[:, None]


class Column:
    """Problem j of a batch as contiguous vectors: y, U (upper), p (linear), each made when
    first read (a copy of column j where the batch has several; of one column, a view)."""

    def __init__(self, problem: DualProblem, j: int):
        self.problem = problem
        self.j = j
        self.equality = bool(problem.equality)

    @functools.cached_property
    def y(self) -> np.ndarray:
        return np.ascontiguousarray(self.problem.y[:, self.j])

    @functools.cached_property
    def U(self) -> np.ndarray:
        return np.ascontiguousarray(self.problem.upper[:, self.j])

    @functools.cached_property
    def p(self) -> np.ndarray:
        return np.ascontiguousarray(self.problem.linear[:, self.j])

    def gradient(self, alpha: np.ndarray) -> np.ndarray:
        """G = Q alpha + p exactly (one product with K)."""
        if not np.any(alpha):
            return self.p.copy()
        ya = (self.y * alpha)[:, None]
        product = self.problem.operator.matmul_precise(ya)
        return np.ascontiguousarray(self.y * product[:, 0] + self.p)

    def objective(self, alpha, G) -> float:
        """F = 1/2 alpha'Q alpha + p'alpha = 1/2 alpha'(G + p)."""
        return float(0.5 * alpha @ (G + self.p))

    def kkt(self, alpha, G, bias_hint=0.0):
        """The common KKT measure (:mod:`muflow.solvers.kkt`) and bias of this column."""
        if self.equality:  # read in place: no copy of the four (8 n bytes each)
            viol, bias = kkt_vector(np.ascontiguousarray(alpha, dtype=np.float64),
                                    np.ascontiguousarray(G, dtype=np.float64), self.y, self.U,
                                    float(bias_hint))
            return float(viol), float(bias)
        viol = np.empty(1)
        bias = np.empty(1)
        kkt_columns(column_view(alpha), column_view(G), self.y[:, None], self.U[:, None],
                    self.equality, np.array([float(bias_hint)]), viol, bias)
        return float(viol[0]), float(bias[0])

    def residuals(self, alpha, G, bias) -> np.ndarray:
        """|r_i(b)| per sample, the natural residual of the KKT measure (b = 0 without the
        sum constraint)."""
        out = np.empty(alpha.shape[0])
        residuals_column(alpha, G, self.y, self.U, float(bias) if self.equality else 0.0, out)
        return out

    def start(self, alpha0) -> np.ndarray:
        """A feasible start: clipped to the box and, with the sum constraint, balanced.

        A warm start from another C (or a multiplicative iterate) may break
        sum_i y_i alpha_i = 0, and a solution's own sums differ by rounding; the heavier
        class is scaled down to restore it, which keeps the box: its free variables alone
        where they hold the excess, so that a variable at its bound stays there (scaled by
        1 - 1e-16 it would be free, with a gradient that points out of the box: a
        violation as large as the problem's, where the start was a solution).
        """
        if alpha0 is None:
            return np.zeros(self.problem.n)
        alpha = np.asarray(alpha0, dtype=np.float64)
        check_finite_start(alpha, f"the start of column {self.j}")
        alpha = np.clip(alpha, 0.0, self.U)
        alpha = np.where(self.U > 0, alpha, 0.0)
        if self.equality:
            pos = self.y > 0
            s_pos = alpha[pos].sum()
            s_neg = alpha[~pos].sum()
            if s_pos != s_neg:
                heavy = pos if s_pos > s_neg else ~pos
                excess = abs(s_pos - s_neg)
                free = heavy & (alpha > 0) & (alpha < self.U)
                s_free = alpha[free].sum()
                if s_free >= excess:
                    alpha[free] *= (s_free - excess) / s_free
                else:
                    alpha[heavy] *= min(s_pos, s_neg) / max(s_pos, s_neg)
        return np.ascontiguousarray(alpha)


class StallGuard:
    """What an outer loop does after a certificate fails: libsvm's unshrinking (every
    variable back, by the caller) and, when nothing had been shrunk, so that the loop's own
    stopping gap was the problem, a gap four times tighter; after :data:`MAX_STALLS` of
    those the gap cannot be closed further (rounding) and the loop gives up uncertified.

    Shared by the working-set loop (:func:`muflow.solvers.working_set_loop.run_column`) and
    SMO's outer loop (:func:`muflow.solvers.smo.smo_column`). A loop whose steps never meet
    its gap (SMO's pair steps at a gap below rounding move by rounding and cycle) asks
    :meth:`flat` whether its objective still falls, and certifies where it does not; such a
    loop passes the violation each failed certificate reached, and one that does not halve
    the lowest so far counts as a stall even where variables had been shrunk (shrinking
    again and again then cannot keep the loop going).
    """

    def __init__(self, tol: float, max_stalls: int = MAX_STALLS, flat_steps: int = FLAT_STEPS):
        self.gap_tol = float(tol)
        self.stalls = 0
        self.max_stalls = max_stalls
        self.flat_steps = int(flat_steps)
        self.best = np.inf  # the lowest violation certified
        self._low_F, self._low_step = np.inf, None

    def go_on(self, shrunk: bool, violation: float | None = None) -> bool:
        """After a failed certificate: False to give up."""
        improved = violation is None or violation < 0.5 * self.best
        if violation is not None:
            self.best = min(self.best, violation)
        self._low_step = None  # a fresh window of steps for the next round
        if not shrunk or not improved:
            self.stalls += 1
            if self.stalls > self.max_stalls:
                return False
            if not shrunk:
                self.gap_tol *= 0.25
        return True

    def flat(self, curve: np.ndarray, steps: int) -> bool:
        """After ``steps`` steps, the last of which left the objective values ``curve``:
        True when the objective has reached no new low in the last ``flat_steps`` steps
        (in exact arithmetic every step of a descent method lowers it)."""
        if self._low_step is None:
            self._low_step = steps
        if curve.size:
            k = int(np.argmin(curve))
            if curve[k] < self._low_F:
                self._low_F = float(curve[k])
                self._low_step = steps - (curve.size - 1 - k)
        return steps - self._low_step >= self.flat_steps


def pad_curves(curves) -> np.ndarray:
    """Stack per-column objective curves of unequal length, repeating each final value."""
    length = max(len(c) for c in curves)
    out = np.empty((length, len(curves)))
    for j, c in enumerate(curves):
        c = np.asarray(c, dtype=np.float64)
        out[: len(c), j] = c
        out[len(c):, j] = c[-1]
    return out


def assemble(problem, alphas, biases, curves, violations, tol, timings, solver, n_iter,
             gradients=None, column_iters=None):
    """The batch :class:`DualSolution` from per-column results (``gradients``: each
    column's final Q alpha + p where the solver kept it; ``column_iters``: each column's
    iterations in SVC's unit)."""
    alpha = np.stack(alphas, axis=1) if alphas else np.zeros((problem.n, 0))
    violation = np.asarray(violations, dtype=np.float64)
    curve = pad_curves(curves)
    return DualSolution(
        alpha=alpha,
        bias=np.asarray(biases, dtype=np.float64),
        n_iter=int(n_iter),
        objective_curve=curve,
        kkt_violation=violation,
        converged=violation <= tol,
        timings=timings,
        solver=solver,
        gradient=np.stack(gradients, axis=1) if gradients else None,
        column_iters=None if column_iters is None else np.asarray(column_iters, dtype=np.int64),
    )


def column_callback(callback, problem, alphas, curves, j, alpha):
    """Adapt a solver ``callback(iteration, alpha, objective)`` to a per-column subset solver.

    Columns are solved one after another: the adapter shows the finished columns, the live
    ``alpha`` of column j and NaN objectives for the columns still to come.
    """
    if callback is None:
        return None

    def on_progress(iteration, F):
        full = np.zeros((problem.n, problem.m))
        for k, a in enumerate(alphas):
            full[:, k] = a
        full[:, j] = alpha
        obj = np.array([c[-1] for c in curves] + [F] + [np.nan] * (problem.m - j - 1))
        return bool(callback(iteration, full, obj))

    return on_progress
