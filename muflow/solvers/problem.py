"""The dual SVM problem and its solution.

Every solver in muflow minimises, for each column j of a batch of m problems,

    F_j(alpha) = 1/2 alpha' Q_j alpha + p_j' alpha,      Q_j = diag(y_j) K diag(y_j),
    subject to 0 <= alpha_i <= U_ij  and, optionally, sum_i y_ij alpha_i = 0,

the SVM dual of m3-multiplicative-updates-large-margin.txt eq. (29)-(31) with a general
linear term p (p = -1 for the standard SVM; p = -(1 - y d) for the drifted SVM of
svm-variants-coordinate-descent.txt) and per-sample upper bounds U (C times sample
weights; U = 0 pins a sample at zero, which is how a cross-validation fold hides its
held-out samples without copying K; U = inf is the hard margin).

K enters only through an operator (:mod:`muflow.operators`), shared by all m columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.operators import GramOperator


def _as_columns(a, n, m, name, dtype=np.float64):
    a = np.asarray(a, dtype=dtype)
    if a.ndim == 0:
        return np.full((n, m), a, dtype=dtype)
    if a.ndim == 1:
        if a.shape[0] != n:
            raise MuflowInputError(f"{name} has length {a.shape[0]}, expected {n} (one per sample)")
        return np.repeat(a[:, None], m, axis=1)
    if a.shape != (n, m):
        raise MuflowInputError(f"{name} has shape {a.shape}, expected ({n}, {m})")
    return np.ascontiguousarray(a)


@dataclass
class DualProblem:
    """A batch of m dual SVM problems sharing one Gram operator.

    Parameters
    ----------
    operator : GramOperator
        Answers ``K @ V`` (and, for subset solvers, rows and the diagonal) for the n
        training samples (:class:`muflow.operators.GramOperator`).
    y : array-like of shape (n,) or (n, m)
        Labels in {-1, +1}, one column per problem (one-vs-rest classes differ here).
    upper : float or array-like of shape (n,) or (n, m), default=1.0
        Upper bounds U_ij (C_i); ``inf`` for the hard margin, 0 to pin a sample at zero.
    linear : float or array-like of shape (n,) or (n, m), default=-1.0
        The linear term p of F.
    equality : bool, default=False
        Add the constraint sum_i y_ij alpha_ij = 0 (the exact, libsvm-style intercept).
    """

    operator: GramOperator
    y: np.ndarray
    upper: np.ndarray | float = 1.0
    linear: np.ndarray | float = -1.0
    equality: bool = False

    def __post_init__(self):
        if not isinstance(self.operator, GramOperator):
            raise MuflowInputError(
                f"a DualProblem needs a muflow.operators.GramOperator, got "
                f"{type(self.operator).__name__}; wrap an in-memory K in DenseGram(K) or "
                "subclass GramOperator")
        n = self.operator.n
        y = np.asarray(self.y, dtype=np.float64)
        if y.ndim == 1:
            y = y[:, None]
        if y.shape[0] != n:
            raise MuflowInputError(f"y has {y.shape[0]} rows but K has {n}")
        if not np.all(np.abs(y) == 1):
            raise MuflowInputError("labels y of a DualProblem must be -1 or +1")
        self.y = np.ascontiguousarray(y)
        m = y.shape[1]
        self.upper = _as_columns(self.upper, n, m, "upper")
        if np.any(np.isnan(self.upper)) or np.any(self.upper < 0):
            raise MuflowInputError("upper bounds must be >= 0 (C > 0 times non-negative weights)")
        self.linear = _as_columns(self.linear, n, m, "linear")

    @property
    def n(self) -> int:
        return self.y.shape[0]

    @property
    def m(self) -> int:
        return self.y.shape[1]

    def q_matmul(self, alpha: np.ndarray) -> np.ndarray:
        """``Q_j alpha_j`` for every column: ``y * (K @ (y * alpha))`` in one product,
        accumulated in float64 where the operator can (the certificate's gradient)."""
        return self.y * self.operator.matmul_precise(self.y * alpha)

    def objective(self, alpha: np.ndarray, q_alpha: np.ndarray | None = None) -> np.ndarray:
        """F_j(alpha_j) = 1/2 alpha' Q alpha + p' alpha per column, shape (m,)."""
        if q_alpha is None:
            q_alpha = self.q_matmul(alpha)
        return np.einsum("ij,ij->j", alpha, 0.5 * q_alpha + self.linear)

    def gradient(self, alpha, q_alpha=None) -> np.ndarray:
        """Q alpha + p, shape (n, m)."""
        if q_alpha is None:
            q_alpha = self.q_matmul(alpha)
        return q_alpha + self.linear

    def kkt_violation(self, alpha, q_alpha=None):
        """Violation and bias per column; see :func:`muflow.solvers.kkt.kkt_violation`."""
        from muflow.solvers.kkt import kkt_violation

        return kkt_violation(self, alpha, self.gradient(alpha, q_alpha))

    def one_sided(self) -> np.ndarray:
        """Which columns only alpha = 0 makes feasible, shape (m,): with the sum constraint,
        those where every sample of one label has the bound 0 (a one-vs-one pair of which
        one class is weighted 0), so that sum_i y_i alpha_i = 0 pins the other label too."""
        if not self.equality:
            return np.zeros(self.m, dtype=bool)
        room = self.upper > 0
        return ~(room & (self.y > 0)).any(axis=0) | ~(room & (self.y < 0)).any(axis=0)

    def one_sided_pinned(self) -> "DualProblem":
        """This problem with its :meth:`one_sided` columns pinned at alpha = 0 (all their
        bounds 0), for a solver whose multiplier of the sum constraint would run off to
        infinity on them (the multiplicative updates' lambda); itself where there are none."""
        one_sided = self.one_sided()
        if not one_sided.any():
            return self
        return replace(self, upper=np.where(one_sided, 0.0, self.upper))

    def check_init(self, init) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Validate a warm start: ``alpha`` of shape (n,) or (n, m), ``(alpha, bias)`` or
        ``(alpha, bias, gradient)`` (:func:`start_gradient`)."""
        if init is None:
            return None, None
        bias = None
        if isinstance(init, tuple):
            init, bias = init[:2]
        elif isinstance(init, DualSolution):
            init, bias = init.alpha, init.bias
        alpha = _as_columns(init, self.n, self.m, "init alpha")
        check_finite_start(alpha, "init alpha")
        alpha = np.clip(alpha, 0.0, self.upper)
        if bias is not None:
            bias = np.broadcast_to(np.asarray(bias, dtype=np.float64), (self.m,)).copy()
            check_finite_start(bias, "init bias")
        return alpha, bias


def start_gradient(init, n: int, m: int) -> np.ndarray | None:
    """The gradient Q alpha + p that a warm start carries with its alpha, shape (n, m), or
    None: the third entry of ``(alpha, bias, gradient)``, which the caller states is this
    problem's gradient at that alpha. A :class:`DualSolution` given as ``init`` carries none
    (it may be another problem's: another kernel, other data); its
    :attr:`~DualSolution.gradient` is passed on explicitly where it is this problem's.

    A solver that keeps the gradient (the working set) starts from it instead of computing
    it with a product ``K @ V`` over the start's support vectors, a pass as costly as that
    many rows; along a C path the next start's gradient is the last one scaled
    (:func:`muflow.selection.continuation.scaled_start`). Entries may be NaN where the
    start does not know them (samples outside a column's own problem); a solver then
    computes that column's gradient itself.
    """
    G = init[2] if isinstance(init, tuple) and len(init) > 2 else None
    if G is None:
        return None
    return _as_columns(G, n, m, "init gradient")


def check_finite_start(values: np.ndarray, name: str):
    """Refuse a warm start holding NaN or inf: clipping passes NaN on, and a solver (and
    its KKT measure) would then work on values that mean nothing."""
    bad = np.size(values) - int(np.count_nonzero(np.isfinite(values)))
    if bad:
        raise MuflowInputError(
            f"{name} holds {bad} non-finite value(s) (NaN or inf): a warm start must be "
            "finite; pass finite values or init=None (a damaged checkpoint: delete it)")


@dataclass
class DualSolution:
    """What a solver returns for a batch of m problems.

    Attributes
    ----------
    alpha : ndarray of shape (n, m)
    bias : ndarray of shape (m,)
        Intercept b of f(x) = sum_i alpha_i y_i K(x_i, x) + b (0 without equality).
    n_iter : int
        Iterations in the solver's own unit (``SolverInfo.iteration_unit``: passes over K
        for the multiplicative solvers, epochs for coordinate descent, sweeps of n pair
        steps for SMO), at most ``max_iter``; the most of any column.
    objective_curve : ndarray of shape (n_points, m)
        F(alpha) before the first iteration and after each one (after every single step
        for SMO and the hybrid's subset phase).
    kkt_violation : ndarray of shape (m,)
        Final value of the common KKT measure (:mod:`muflow.solvers.kkt`).
    converged : ndarray of bool, shape (m,)
    timings : dict
        Seconds spent per phase (``"products"``, ``"updates"``, ``"kkt"``, ``"total"`` ...).
    solver : str
    column_iters : ndarray of int, shape (m,), optional
        Each column's own iterations where the solver solves the columns one at a time
        (SMO, coordinate descent, the working set), in the unit of :class:`muflow.SVC`'s
        ``n_iter_`` (:func:`muflow.solvers.registry.svc_iterations`: SMO's single pair
        steps, the solver's own unit otherwise). None where the batch shares its passes
        (the multiplicative solvers update every column at every pass until all are done).
    gradient : ndarray of shape (n, m), optional
        Q alpha + p at ``alpha`` where the solver kept it (the working set in this process;
        NaN where a column's solve did not see a sample), so that a warm start of the same
        problem from this solution need not compute it: ``(alpha, bias, gradient)``
        (:func:`start_gradient`).
    """

    alpha: np.ndarray
    bias: np.ndarray
    n_iter: int
    objective_curve: np.ndarray
    kkt_violation: np.ndarray
    converged: np.ndarray
    timings: dict = field(default_factory=dict)
    solver: str = ""
    gradient: np.ndarray | None = None
    column_iters: np.ndarray | None = None

    @property
    def objective(self) -> np.ndarray:
        """Final F per column."""
        return self.objective_curve[-1]

    def column(self, j: int) -> "DualSolution":
        """The solution of problem j alone (for per-problem reports)."""
        return DualSolution(
            alpha=self.alpha[:, [j]],
            bias=self.bias[[j]],
            n_iter=self.n_iter,
            objective_curve=self.objective_curve[:, [j]],
            kkt_violation=self.kkt_violation[[j]],
            converged=self.converged[[j]],
            timings=dict(self.timings),
            solver=self.solver,
            gradient=None if self.gradient is None else self.gradient[:, [j]],
            column_iters=None if self.column_iters is None else self.column_iters[[j]],
        )
