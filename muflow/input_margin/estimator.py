"""The input-space-margin estimator and measurement (input-space-margin.txt, Akaho): input
validation around the maths of :mod:`muflow.input_margin._algorithm`.

- :func:`input_space_margin`: the margin, in the input space, of a fitted binary muflow
  ``SVC`` or :class:`InputMarginSVC` (section 3.4, eq. 3 and 12);
- :class:`InputMarginSVC`: a classifier trained by Algorithm 1 (section 3.6) or the
  simplified algorithm of section 6, its QP steps solved by a registered muflow solver.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from muflow.data import check_finite
from muflow.exceptions import MuflowInputError
from muflow.input_margin._algorithm import (
    DEFAULT_MAX_BYTES,
    MEASURE_MAX_ITER,
    Discriminant,
    check_memory,
    check_metric,
    run_steps,
)
from muflow.input_margin._projection import InputMargin, measure_margin
from muflow.kernel_derivatives import check_differentiable
from muflow.kernels import Kernel
from muflow.solvers.registry import SOLVERS
from muflow.validation import check_bool, check_choice, check_number


def default_qp_solver() -> str:
    """The solver for the QP steps: SMO (exact bias, robust on the ill-conditioned hard-margin
    problems of smooth kernels) when registered, else M3."""
    return "smo" if "smo" in SOLVERS else "m3"


def _discriminant_of(model) -> Discriminant:
    check_is_fitted(model)
    if isinstance(model, InputMarginSVC):
        return model.discriminant_
    if len(getattr(model, "classes_", ())) != 2:
        raise MuflowInputError("the input-space margin is defined for binary classifiers (two classes)")
    kernel = getattr(model, "kernel_", None)
    if not isinstance(kernel, Kernel):
        raise MuflowInputError("input_space_margin needs a fitted muflow SVC or InputMarginSVC")
    if kernel.name == "precomputed":
        raise MuflowInputError("a precomputed kernel has no input space; fit on the features")
    check_differentiable(kernel)
    sv = np.asarray(model.support_vectors_, dtype=np.float64)
    if hasattr(sv, "toarray"):
        sv = sv.toarray()
    a = np.asarray(model.dual_coef_, dtype=np.float64)[0]
    return Discriminant(kernel.with_offset(0.0), sv, a, np.zeros_like(sv), float(model.intercept_[0]))


def _warn_unsettled(res: InputMargin, what: str, stacklevel: int) -> None:
    """Warn when a margin rests on projections that are not measurements: samples whose
    projection (eq. 12) diverged, or a margin sample whose projection did not converge."""
    i = int(np.argmin(res.distances))
    if np.any(res.diverged):
        where = np.flatnonzero(res.diverged)
        warnings.warn(
            f"{what}: the projection (eq. 12) of {len(where)} sample(s) (indices "
            f"{where[:10].tolist()}) found no boundary within reach: grad f vanishes there, or "
            "the linearised boundary lies beyond the extent of the data; their distances are "
            "eq. (3) at the last point, not measured. Check that the model separates the "
            "classes, or pass x_start with points near the boundary",
            ConvergenceWarning, stacklevel=stacklevel + 1)
    elif not res.converged[i]:
        warnings.warn(
            f"{what}: the projection (eq. 12) of the margin's sample {i} did not converge in "
            f"{res.n_iter} iterations; the margin {res.margin:.6g} is eq. (3) at its last point. "
            "Raise max_iter, or pass x_start with points near the boundary",
            ConvergenceWarning, stacklevel=stacklevel + 1)


def _warn_no_improvement(trace) -> None:
    """Warn that no step of the algorithm beat the SVM it started from, and why."""
    later = np.arange(1, len(trace.measures))
    unmeasured = int(np.sum(~trace.settled[later]))
    warnings.warn(
        f"InputMarginSVC: the {len(later)} step(s) did not improve on the ordinary SVM (step 0), "
        f"whose margin {trace.reference:.6g} is kept: {unmeasured} had projections (eq. 12) that "
        f"diverged, so no measured margin, and {len(later) - unmeasured} a measured margin at "
        "most the SVM's. margin_history_ shows each step's; fewer n_steps, a finite C or "
        "another gamma may do better",
        ConvergenceWarning, stacklevel=3)  # _warn_no_improvement < fit < caller


def input_space_margin(model, X, y, metric=None, *, x_start=None, max_iter=MEASURE_MAX_ITER,
                       tol=1e-9, slow_down=True, max_bytes=DEFAULT_MAX_BYTES,
                       force=False) -> InputMargin:
    """Margin of a fitted binary classifier in the input space (input-space-margin.txt).

    Parameters
    ----------
    model : fitted muflow.SVC or InputMarginSVC
        Binary, with a kernel among rbf, poly, linear.
    X : array-like of shape (n, m)
    y : array-like of shape (n,)
        Labels in ``model.classes_``; they sign the distances.
    metric : None, array-like of shape (m, m) or (n, m, m), default=None
        G_i: Euclidean, one matrix for all samples, or one per sample.
    x_start : array-like of shape (n, m), optional
        Starting points of the iteration (12); default the samples themselves.
    max_iter : int, default=200
        Iterations of (12) at most.
    tol : float, default=1e-9
        Stop when no point moves more than ``tol`` (times the data's scale, or the rounding
        error of f where that is larger) and every point is within that distance of the
        boundary (|f| / ||grad f||).
    slow_down : bool, default=True
        Apply the slow-down of section 3.4 where a local minimum is unstable.
    max_bytes : int, default=2**30
    force : bool, default=False
        Proceed above ``max_bytes``.

    Returns
    -------
    InputMargin
        ``.projections``, ``.distances`` (eq. 3 at the projection, in G_i), ``.margin``,
        ``.converged``, ``.diverged``.

    Warns
    -----
    ConvergenceWarning
        When the projection of some sample diverged (no boundary within reach), or that of
        the sample setting the margin did not converge in ``max_iter`` iterations.

    Notes
    -----
    Eq. (12) converges to a critical point of the distance from x_i to the boundary
    (Proposition 1), in practice the nearest from where it starts: the distances are
    local minima, upper bounds of the distances to the whole boundary.
    """
    disc = _discriminant_of(model)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != disc.centers.shape[1]:
        raise MuflowInputError(f"X must have shape (n, {disc.centers.shape[1]}), got {X.shape}")
    check_finite(X)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise MuflowInputError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    classes = model.classes_
    if not np.all(np.isin(y, classes)):
        raise MuflowInputError(f"y holds labels outside the model's classes {list(classes)}")
    y_pm = np.where(y == classes[1], 1.0, -1.0)
    n, m = X.shape
    if np.any(disc.b):
        check_memory(n, len(disc.centers), m, max_bytes, force, "input_space_margin")
    _, G_inv, L = check_metric(metric, n, m)
    res = measure_margin(disc, X, y_pm, G_inv, L, x_start, max_iter=max_iter, tol=tol,
                         slow_down=slow_down)
    _warn_unsettled(res, "input_space_margin", stacklevel=2)
    return res


class InputMarginSVC(ClassifierMixin, BaseEstimator):
    """Kernel classifier that maximizes the margin in the input space (input-space-margin.txt).

    Parameters
    ----------
    kernel : {"rbf", "poly", "linear"}, default="rbf"
        A kernel with derivatives (:mod:`muflow.kernel_derivatives`).
    C : float, default=float("inf")
        ``inf``: the hard margin of the paper's main text; finite: the soft margin of
        section 5 (constraint 21, ``0 <= alpha_i <= C``).
    gamma : {"scale", "auto"} or float, default="scale"
        Kernel scale; the paper's sigma is ``muflow.kernels.gamma_from_sigma(sigma)``.
    degree : int, default=3
    coef0 : float, default=0.0
    metric : None, array-like of shape (m, m) or (n_samples, m, m), default=None
        G_i of section 2: Euclidean, one matrix for all samples, or one per training sample.
    method : {"full", "simplified"}, default="full"
        "full": Algorithm 1 (section 3.6). "simplified": section 6 (x_hat_i = x_i, eta_i = 0,
        only g_i of eq. 22 kept).
    n_steps : int, default=5
        Steps of the algorithm. The margin of every step's boundary is measured (eq. 12 from
        each sample until it converges, then eq. 3: :func:`input_space_margin`) and the step
        with the largest measured margin is kept; step 0, the ordinary SVM, is kept unless
        a later step's margin, from projections none of which diverged, exceeds the SVM's, so
        the kept model is never worse than the SVM. (The paper keeps the best by the
        algorithm's estimate, section 3.6; see ``estimated_margin_history_``.)
    n_projection_iter : int, default=10
        Iterations of eq. (12) per step to update x_hat (the paper's figures use 10).
    qp_solver : str or None, default=None
        Registered solver for the QP steps; None picks SMO when registered, else M3.
    qp_tol : float, default=1e-8
        KKT tolerance of the QP steps (relative to the largest g_i).
    max_iter : int, default=1_000_000
        Iterations of the QP solver at most.
    max_bytes : int, default=2**30
        Refuse Algorithm 1 when its (n, n, m, m) temporaries exceed this many bytes.
    force : bool, default=False
        Proceed above ``max_bytes``.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
    a_ : ndarray of shape (n_bases,)
        Coefficients a_i of eq. (2).
    b_ : ndarray of shape (n_bases, n_features)
        Coefficients b_i of eq. (2).
    x_hat_ : ndarray of shape (n_bases, n_features)
        Bases x_hat_i of eq. (2) (estimated projection points of the support vectors).
    f0_ : float
    support_ : ndarray of shape (n_bases,)
        Training indices i of the bases.
    kernel_ : Kernel
    discriminant_ : Discriminant
    input_margin_ : float
        Measured input-space margin of the kept step, ``margin_history_[best_step_]``: what
        ``input_space_margin(model, X, y, metric)`` returns for the training set.
    margin_history_ : ndarray of shape (n_steps + 1,)
        Measured margin of each step's boundary; entry 0 is the ordinary SVM's. Negative when
        a training sample is misclassified (a soft margin, or a hard-margin QP that did not
        separate the classes).
    estimated_margin_history_ : ndarray of shape (n_steps + 1,)
        The algorithm's own estimate of each step's margin, the figure the paper reports:
        eq. (3) at the projections of step 1 of Algorithm 1, ``n_projection_iter`` iterations
        of eq. (12) from the previous step's points (from the samples for "simplified"). It
        may differ from ``margin_history_``; see Notes.
    best_step_ : int
        Index of the kept step: 0, or the step with the largest measured margin (the earliest
        of equals) among the later steps with no diverged projection whose margin exceeds
        the SVM's. Where some of the SVM's projections diverged, the SVM's margin so compared
        is the smallest over the samples whose projection settled, and at most 0 when an
        unmeasured sample is misclassified
        (:func:`~muflow.input_margin._algorithm.reference_margin`).
        Hence ``input_margin_ >= initial_margin_`` and a misclassifying step never replaces
        an SVM that separates the training set.
    initial_margin_ : float
        Measured margin of the ordinary SVM, ``margin_history_[0]``.
    projections_ : ndarray of shape (n_samples, n_features)
        Projection points of the training samples on the kept boundary (the measurement's).
    svm_ : muflow.SVC
        The ordinary SVM of the initialisation step.

    Warns
    -----
    ConvergenceWarning
        When a QP step stops at ``max_iter``; when no step improved on the SVM, which is then
        kept; or when the measurement of the kept step rests on projections that diverged or
        did not converge (see :func:`input_space_margin`).

    Notes
    -----
    Algorithm 1 needs O(m^2 n^2) memory and O(m^3 n^2) time per step for the temporaries
    (section 3.6); the QP has the size of the ordinary SVM's. The iteration is not monotone
    and keeps the best step, as the paper's simulation does, but by the measured margin:
    the estimate can exceed it several-fold, when the few iterations of eq. (12) from the
    previous step's points settle on a farther local minimum of the distance or stop off
    the boundary (the findings are in :mod:`muflow.input_margin._algorithm`). Measuring
    costs ``n_steps + 1`` runs of eq. (12) to convergence, on the order of the steps
    themselves for small n.
    """

    def __init__(self, kernel="rbf", *, C=float("inf"), gamma="scale", degree=3, coef0=0.0,
                 metric=None, method="full", n_steps=5, n_projection_iter=10, qp_solver=None,
                 qp_tol=1e-8, max_iter=1_000_000, max_bytes=DEFAULT_MAX_BYTES, force=False):
        # scikit-learn's convention: store the arguments as given, validate them in fit
        vars(self).update(kernel=kernel, C=C, gamma=gamma, degree=degree, coef0=coef0, metric=metric,
                          method=method, n_steps=n_steps, n_projection_iter=n_projection_iter,
                          qp_solver=qp_solver, qp_tol=qp_tol, max_iter=max_iter, max_bytes=max_bytes,
                          force=force)

    # -- validation ------------------------------------------------------------------
    def _check_params(self):
        """Validate the parameters (scikit-learn's parameter constraints, as
        :mod:`muflow.validation` writes them) and return the QP solver's name."""
        check_differentiable(Kernel(self.kernel))
        check_choice(self.method, "method", ("full", "simplified"))
        check_number(self.C, "C", low=0, closed="neither", allow_inf=True,
                     hint="float('inf') is the hard margin")
        check_number(self.n_steps, "n_steps", integer=True, low=0)
        check_number(self.n_projection_iter, "n_projection_iter", integer=True, low=1)
        check_number(self.qp_tol, "qp_tol", low=0, closed="neither")
        check_number(self.max_iter, "max_iter", integer=True, low=1)
        check_number(self.max_bytes, "max_bytes", low=0)
        check_bool(self.force, "force")
        solver = self.qp_solver or default_qp_solver()
        check_choice(solver, "qp_solver", tuple(SOLVERS))
        return solver

    # -- fit -------------------------------------------------------------------------
    def fit(self, X, y):
        """Fit by Algorithm 1 or the simplified algorithm.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Two classes.

        Returns
        -------
        self
        """
        from muflow.model import SVC

        solver = self._check_params()
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_all_finite=False)
        check_finite(X)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        if len(self.classes_) != 2:
            raise MuflowInputError(
                f"InputMarginSVC is binary (the input-space margin of one boundary); got "
                f"{len(self.classes_)} classes"
            )
        y_pm = np.where(y_enc == 1, 1.0, -1.0)
        n, m = X.shape
        if self.method == "full":
            check_memory(n, n, m, self.max_bytes, self.force, "Algorithm 1 (method='full')")
        _, G_inv, L = check_metric(self.metric, n, m)
        upper = float(self.C)

        self.svm_ = SVC(self.kernel, C=upper, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                        solver=solver, intercept="exact", tol=self.qp_tol, max_iter=self.max_iter).fit(X, y)
        kernel = self.svm_.kernel_.with_offset(0.0)
        self.kernel_ = kernel
        a0 = np.zeros(n)
        a0[self.svm_.support_] = self.svm_.dual_coef_[0]
        disc = Discriminant(kernel, X.copy(), a0, np.zeros_like(X), float(self.svm_.intercept_[0]))

        trace = run_steps(disc, X, y_pm, G_inv, L, upper=upper, method=self.method,
                          n_steps=self.n_steps, n_projection_iter=self.n_projection_iter,
                          solve=functools.partial(self._solve, solver))
        self.margin_history_ = trace.measured
        self.estimated_margin_history_ = np.asarray(trace.estimates)
        self.best_step_ = trace.best
        best = trace.discriminants[self.best_step_]
        measure = trace.measures[self.best_step_]
        self.support_ = best.support().astype(np.int32)
        self.discriminant_ = best.compact()
        self.a_, self.b_, self.x_hat_ = self.discriminant_.a, self.discriminant_.b, self.discriminant_.centers
        self.f0_ = float(best.f0)
        self.input_margin_ = float(self.margin_history_[self.best_step_])
        self.initial_margin_ = float(self.margin_history_[0])
        self.projections_ = measure.projections
        if self.best_step_ == 0 and len(trace.measures) > 1:
            _warn_no_improvement(trace)
        _warn_unsettled(measure, f"InputMarginSVC (step {self.best_step_} kept)", stacklevel=2)
        return self

    def _solve(self, solver, problem, g):
        tol = float(self.qp_tol) * max(1.0, float(np.max(g)))
        sol = SOLVERS[solver].solve(problem, tol=tol, max_iter=int(self.max_iter))
        if not np.all(sol.converged):
            warnings.warn(
                f"the QP step stopped at max_iter={self.max_iter} with KKT violation "
                f"{float(np.max(sol.kkt_violation)):.3g} > {tol:.3g}; raise max_iter or qp_tol "
                "(a hard margin on data the kernel barely separates is ill-conditioned)",
                ConvergenceWarning, stacklevel=4)  # _solve < run_steps < fit < caller
        return sol

    # -- predict ---------------------------------------------------------------------
    def decision_function(self, X):
        """f(x) of eq. (2), shape (n_samples,); positive for ``classes_[1]``."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64, ensure_all_finite=False)
        check_finite(X, before="predicting")
        return self.discriminant_.value(X)

    def predict(self, X):
        """Class labels by the sign of eq. (2)."""
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
