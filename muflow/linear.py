"""Linear SVM by dual coordinate descent keeping the primal vector (the n > d form).

svm-variants-coordinate-descent.txt, eq. (4) (LIBLINEAR, Fan et al. 2008; Hsieh et al.
2008): the dual coordinate step delta = max(-alpha_i, min(C_i - alpha_i,
(1 - dbar_i - y_i beta'x_i) / Q_ii)) with beta = sum_i alpha_i y_i x_i kept alongside, so
a step costs one sparse row. The same loop solves the paper's variants:

- weighted SVM (section 1): C_i = C * sample_weight_i;
- drifted SVM (section 2): fixed per-sample intercepts d_i (``fit(..., offset=d)``), the
  linear term of the dual becomes -(e - dbar), dbar_i = y_i d_i;
- nonnegative drifted SVM (section 3, ``positive=True``): beta >= 0 through the rho
  updates of dual (6); see :func:`muflow.solvers._linear_compiled._linear_cd`.

``intercept="regularized"`` appends a constant feature 1 (liblinear's bias feature,
``intercept_scaling=1``), whose weight is the intercept and is penalised with the others;
with ``positive=True`` the intercept itself stays unconstrained in sign.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from muflow.data import check_finite
from muflow.exceptions import MuflowInputError
from muflow.solvers._linear_compiled import linear_cd
from muflow.validation import (check_bool, check_choice, check_number, check_per_sample,
                               check_weighted_classes)

_INTERCEPTS = ("none", "regularized")


def _per_sample(values, n, name, default):
    """:func:`~muflow.validation.check_per_sample`, a scalar standing for every sample."""
    if values is not None:
        values = np.asarray(values)  # any array-like, not only what np.ndim understands
        if values.ndim == 0:
            values = np.full(n, values, dtype=np.float64)
    return check_per_sample(values, n, name, default=default)


class LinearSVC(ClassifierMixin, BaseEstimator):
    """Linear SVM (hinge loss, L2 penalty) by dual coordinate descent.

    Minimises, per binary problem,

        1/2 ||beta||^2 + sum_i C_i max(0, 1 - y_i (x_i' beta + d_i)),   beta >= 0 if positive,

    with C_i = C * sample_weight_i and d_i the offsets (0 by default).

    Parameters
    ----------
    C : float, default=1.0
        Penalty of the hinge loss.
    positive : bool, default=False
        Constrain the coefficients to be non-negative (nonnegative drifted SVM).
    intercept : {"none", "regularized"}, default="none"
        "none": no intercept (the paper's form); "regularized": liblinear's bias feature.
    tol : float, default=1e-3
        Stop when the natural KKT residual of the dual (:mod:`muflow.solvers.kkt`, in the
        units of the margin 1 - y f(x)) is at most ``tol`` on every sample.
    max_iter : int, default=1000
        Epochs over the data.
    random_state : int, RandomState instance or None, default=None
        Seed of the coordinate permutations.
    shrinking : bool, default=True
        LIBLINEAR's shrinking of bounded variables.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    classes_ : ndarray of shape (n_classes,)
    dual_coef_ : ndarray of shape (1, n_samples) or (n_classes, n_samples)
        alpha_i (not multiplied by y_i).
    n_iter_ : int
        Most epochs any binary problem took.
    objective_ : ndarray of shape (n_problems,)
        Final dual objective F(alpha) = 1/2 ||beta||^2 - (e - dbar)'alpha per problem.
    kkt_violation_ : ndarray of shape (n_problems,)
        Natural KKT residual of the dual (:mod:`muflow.solvers.kkt`, no equality) at the
        returned alpha, over every sample (shrunk or not), per problem.
    converged_ : ndarray of bool of shape (n_problems,)
        ``kkt_violation_ <= tol``.
    fit_status_ : int
        0 when every problem met ``tol``, 1 when one stopped at ``max_iter`` above it (as
        ``muflow.SVC``'s and libsvm's).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (n_features_in_,)
        The column names, when X was a DataFrame with string names; X at predict must then
        have the same columns in the same order.

    Warns
    -----
    ConvergenceWarning
        When a problem stopped at ``max_iter`` epochs with its KKT violation above ``tol``
        (liblinear warns in the same case); the warning names the violation reached.

    Notes
    -----
    More than two classes are fitted one-vs-rest. X may be dense or scipy sparse (CSR is
    used as is; other formats are converted). X and y are checked as scikit-learn's
    estimators check them (``validate_data``): a y of shape (n_samples, 1) is ravelled with
    a ``DataConversionWarning``. Memory: X plus O(n + d) per problem.
    """

    def __init__(self, C=1.0, *, positive=False, intercept="none", tol=1e-3, max_iter=1000,
                 random_state=None, shrinking=True):
        self.C = C
        self.positive = positive
        self.intercept = intercept
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.shrinking = shrinking

    # -- validation ---------------------------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _validate_params(self):
        check_number(self.C, "C", low=0, closed="neither")
        check_choice(self.intercept, "intercept", _INTERCEPTS,
                     hint="the exact intercept (sum_i y_i alpha_i = 0) needs muflow.SVC(solver='smo')")
        check_number(self.tol, "tol", low=0, closed="neither")
        check_number(self.max_iter, "max_iter", integer=True, low=1)
        check_bool(self.positive, "positive")
        check_bool(self.shrinking, "shrinking")
        check_random_state(self.random_state)

    def _validate_X(self, X, y=None, *, fitting):
        """X as a float64 CSR matrix (sorted indices) or C-contiguous array, and at fit y
        as a 1-D array, checked as scikit-learn's estimators check them (``validate_data``:
        shapes, at least one sample and one feature, numbers, ``n_features_in_`` and the
        column names of a DataFrame, kept at fit and checked at predict), with muflow's
        messages for non-finite values and for a width other than the fitted one."""
        checks = dict(accept_sparse="csr", dtype=np.float64, order="C", ensure_all_finite=False)
        if fitting:
            X, y = validate_data(self, X, y, **checks)
        else:
            self._check_width(X)
            X = validate_data(self, X, reset=False, **checks)
        if sp.issparse(X) and not X.has_sorted_indices:
            X = X.sorted_indices()  # a copy: the caller's matrix is left as it was
        check_finite(X, before="fitting" if fitting else "predicting")
        return (X, y) if fitting else X

    def _check_width(self, X):
        """The number of features against the fitted one, in scikit-learn's words (what
        its checks look for) and as a :class:`MuflowInputError`, where X has a 2-D shape."""
        shape = getattr(X, "shape", None)
        if shape is not None and len(shape) == 2 and shape[1] != self.n_features_in_:
            raise MuflowInputError(
                f"X has {shape[1]} features, but LinearSVC is expecting {self.n_features_in_} "
                "features as input; pass the columns the model was fitted on")

    @staticmethod
    def _check_init(init, n_problems, n):
        if init is None:
            return None
        if isinstance(init, LinearSVC):
            check_is_fitted(init, "dual_coef_")
            init = init.dual_coef_
        elif isinstance(init, tuple) and len(init) == 2:
            init = init[0]  # (alpha, bias) as the kernel solvers take it: here b follows from alpha
        try:
            alpha = np.asarray(init, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise MuflowInputError(f"init must be an array of dual variables: {exc}") from None
        if alpha.ndim == 1:
            alpha = alpha[None, :]
        if alpha.shape != (n_problems, n):
            raise MuflowInputError(
                f"init must have shape ({n},) or ({n_problems}, {n}) (one alpha per sample and "
                f"problem), got {np.shape(init)}")
        if not np.all(np.isfinite(alpha)):
            raise MuflowInputError("init contains NaN or infinity")
        return alpha

    # -- fitting ------------------------------------------------------------------------

    def fit(self, X, y, sample_weight=None, offset=None, init=None):
        """Fit the linear SVM.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            A y of shape (n_samples, 1) is ravelled with a ``DataConversionWarning``.
        sample_weight : array-like of shape (n_samples,) or float, default=None
            C_i = C * sample_weight_i (weighted SVM); 0 leaves a sample out. Samples of at
            least two classes must keep a positive weight.
        offset : array-like of shape (n_samples,), default=None
            Fixed per-sample intercepts d_i (drifted SVM): the margin of sample i is
            y_i (x_i' beta + b + d_i). Applies to every one-vs-rest problem.
        init : array-like of shape (n_samples,) or (n_problems, n_samples), a tuple
            (alpha, bias), or a fitted LinearSVC, default=None
            Warm start: the dual variables alpha to start from (``dual_coef_`` of an earlier
            fit on the same samples, e.g. at a neighbouring C); values are clipped to
            [0, C_i]. The primal vector, the regularized intercept included, is rebuilt from
            them, so the bias of a tuple is not used.

        Returns
        -------
        self
        """
        self._validate_params()
        X, y = self._validate_X(X, y, fitting=True)
        n, d = X.shape
        check_classification_targets(y)
        classes, y_encoded = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise MuflowInputError(
                f"The number of classes has to be greater than one; got 1 class: y has a "
                f"single class ({classes.tolist()[0]!r}); a classifier needs at least two")
        weight = _per_sample(sample_weight, n, "sample_weight", 1.0)
        if np.any(weight < 0):
            raise MuflowInputError("sample_weight must be non-negative")
        check_weighted_classes(weight, y_encoded)
        offset = _per_sample(offset, n, "offset", 0.0)
        self.classes_ = classes
        bias = self.intercept == "regularized"
        da = d + 1 if bias else d  # the bias feature is implicit in the compiled loop
        nonneg = np.zeros(da, dtype=np.bool_)
        if self.positive:
            nonneg[:d] = True
        U = self.C * weight
        seed = int(self.random_state) if isinstance(self.random_state, numbers.Integral) \
            else check_random_state(self.random_state).randint(0, 2**31 - 1)
        problems = [classes[1]] if classes.size == 2 else list(classes)
        alpha0 = self._check_init(init, len(problems), n)
        coefs, dual, objectives, violations, iters = [], [], [], [], 0
        for k, c in enumerate(problems):
            yc = np.where(y == c, 1.0, -1.0)
            p = -1.0 + yc * offset
            alpha = np.zeros(n) if alpha0 is None else alpha0[k].copy()
            v = np.empty(da)
            F, info = linear_cd(X, yc, p, U, alpha, v, nonneg, tol=float(self.tol),
                                max_epochs=int(self.max_iter), seed=seed,
                                shrinking=bool(self.shrinking), bias=1.0 if bias else 0.0)
            beta = np.where(nonneg, np.maximum(v, 0.0), v)
            coefs.append(beta)
            dual.append(alpha)
            objectives.append(F)
            violations.append(info[1])
            iters = max(iters, int(info[0]))
        W = np.vstack(coefs)
        self.coef_ = W[:, :d].copy()
        self.intercept_ = W[:, d].copy() if bias else np.zeros(W.shape[0])
        self.dual_coef_ = np.vstack(dual)
        self.objective_ = np.asarray(objectives)
        self.kkt_violation_ = np.asarray(violations)
        self.converged_ = self.kkt_violation_ <= float(self.tol)
        self.fit_status_ = int(not self.converged_.all())
        self.n_iter_ = iters
        if self.fit_status_:
            self._warn_not_converged()
        return self

    def _warn_not_converged(self):
        """scikit-learn's ``ConvergenceWarning`` for a problem that ran out of epochs above
        ``tol``, naming the violation reached and the usual causes."""
        worst = float(np.max(self.kkt_violation_))
        warnings.warn(
            f"LinearSVC stopped at max_iter={self.max_iter} epochs with KKT violation "
            f"{worst:.3g} > tol={float(self.tol):g} in {int(np.sum(~self.converged_))} of "
            f"{self.converged_.size} problem(s) (fit_status_ = 1); the coefficients are not "
            "the optimum. Raise max_iter, scale the features (StandardScaler), or use a "
            "smaller C (a large C makes coordinate descent slow)",
            ConvergenceWarning, stacklevel=3)  # _warn_not_converged < fit < caller

    def decision_function(self, X):
        """x' beta + b per problem: shape (n_samples,) for two classes, else (n, n_classes)."""
        check_is_fitted(self, "coef_")
        X = self._validate_X(X, fitting=False)
        scores = np.asarray(X @ self.coef_.T) + self.intercept_[None, :]
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict(self, X):
        """Class labels: the sign for two classes, the largest score one-vs-rest."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def primal_objective(self, X, y, sample_weight=None, offset=None):
        """1/2 ||beta||^2 + sum_i C_i hinge_i (plus b^2/2 with the regularized intercept),
        per problem: the quantity whose minimum equals -objective_ (strong duality)."""
        check_is_fitted(self, "coef_")
        X = self._validate_X(X, fitting=False)
        n = X.shape[0]
        weight = _per_sample(sample_weight, n, "sample_weight", 1.0)
        offset = _per_sample(offset, n, "offset", 0.0)
        y = np.asarray(y)
        problems = [self.classes_[1]] if self.classes_.size == 2 else list(self.classes_)
        scores = np.asarray(X @ self.coef_.T) + self.intercept_[None, :]
        out = []
        for k, c in enumerate(problems):
            yc = np.where(y == c, 1.0, -1.0)
            hinge = np.maximum(0.0, 1.0 - yc * (scores[:, k] + offset))
            reg = 0.5 * (self.coef_[k] @ self.coef_[k])
            if self.intercept == "regularized":
                reg += 0.5 * self.intercept_[k] ** 2
            out.append(reg + self.C * (weight @ hinge))
        return np.asarray(out)
