"""What a fitted :class:`muflow.SVC` answers: scikit-learn's fitted attributes, the decision
function, predictions and probabilities (:class:`FittedSVC`, a base of the estimator).

The maths lives in :mod:`muflow.prediction` (a prepared :class:`~muflow.prediction.Predictor`
per model: support vectors laid out once, one GEMM per block of rows for every binary
problem); this module validates the input and shapes the answers as scikit-learn does.
"""

from __future__ import annotations

import weakref

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError
from sklearn.utils._available_if import available_if
from sklearn.utils.deprecation import deprecated
from sklearn.utils.validation import _num_samples, check_is_fitted, validate_data

from muflow.data import check_finite
from muflow.exceptions import MuflowInputError
from muflow.multiclass import (binary_problems, libsvm_dual_coef, ovo_coef, ovr_scores,
                               pair_coefficients, predict_index)
from muflow.device.arrays import to_host
from muflow.prediction import PREDICTOR_KERNELS, Predictor, blocked_decision
from muflow.dask.predict import is_dask_collection
from muflow.svc_input import _dense_kernel, _wants_probability

#: scikit-learn 1.9's deprecation of the Platt attributes, word for word.
_PROB_ATTRIBUTE_DEPRECATION = (
    "Attribute `{}` was deprecated in version 1.9 and will be removed in 1.11 as the "
    "`probability=True` option for SVC and NuSVC was deprecated and will be removed in 1.11.")

#: Kernels that prediction computes on the device of ``device="cuda"`` or ``"auto"``.
DEVICE_KERNELS = ("linear", "poly", "rbf", "sigmoid")

#: Each model's prepared :class:`muflow.prediction.Predictor` with the fitted arrays it was
#: built from (:meth:`FittedSVC._predictor`).
_PREDICTORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


#: alpha below this fraction of the largest coefficient of its problem, or of its own
#: upper bound where that is smaller, is not a support vector (multiplicative iterates
#: approach zero without reaching it).
SUPPORT_THRESHOLD = 1e-8


def support_mask(alpha: np.ndarray, upper=None) -> np.ndarray:
    """Which samples are support vectors of any problem: alpha_ij above
    :data:`SUPPORT_THRESHOLD` times the smaller of its problem's largest alpha and its own
    bound U_ij. The bound counts where per-sample C's spread wide: a sample weighted 1e-9 at
    its bound C w_i is a support vector (libsvm keeps every alpha > 0), which a threshold
    from the largest alpha alone dropped."""
    scale = np.maximum(alpha.max(axis=0), np.finfo(float).tiny)[None, :]
    if upper is not None:
        scale = np.minimum(scale, np.broadcast_to(upper, alpha.shape))
    return (alpha > SUPPORT_THRESHOLD * scale).any(axis=1)


class FittedSVC:
    """The fitted side of :class:`muflow.SVC`: attributes derived from the fit, prediction."""

    def _set_fitted(self, solution, *, X, y_encoded, kernel, solver, fit_time, budget,
                    upper=None):
        """The fitted attributes from a solution; the one place both fit paths set them
        (``upper``: the problems' bounds U, where known, for :func:`support_mask`)."""
        k = len(self.classes_)
        self.multiclass_ = self.multiclass  # what prediction reads, whatever set_params does later
        Y, _ = binary_problems(y_encoded, k, self.multiclass)
        alpha = solution.alpha
        candidates = np.flatnonzero(support_mask(alpha, upper))
        # libsvm's order: grouped by class, ascending within a class
        support = candidates[np.argsort(y_encoded[candidates], kind="stable")]
        self.support_ = support.astype(np.int32)
        self.n_support_ = np.bincount(y_encoded[support], minlength=k).astype(np.int32)
        coef = (Y * alpha)[support]
        if k > 2 and self.multiclass == "ovo":
            dual = libsvm_dual_coef(coef, y_encoded[support], k)
        else:
            dual = coef.T.copy()
        if kernel.offset:
            # f(x) = sum a y (k + r) = sum a y k + r sum a y: the bias of the augmented kernel
            self.intercept_ = kernel.offset * (Y * alpha).sum(axis=0) + solution.bias
        else:
            self.intercept_ = np.asarray(solution.bias, dtype=np.float64).copy()
        self._sparse = (sp.issparse(X) or getattr(X, "sparse", False)) and not callable(self.kernel)
        if callable(self.kernel):
            self._X_fit = X
            self.support_vectors_ = np.empty((0, 0))
        elif self.kernel == "precomputed":
            self.support_vectors_ = np.empty((0, 0))
        else:
            self.support_vectors_ = X[self.support_]
        self.dual_coef_ = sp.csr_matrix(dual) if self._sparse else dual
        if not (np.all(np.isfinite(dual)) and np.all(np.isfinite(self.intercept_))):
            raise ValueError(
                "The dual coefficients or intercepts are not finite. The input data may "
                "contain large values and need to be preprocessed (e.g. StandardScaler)")
        self.kernel_ = kernel.with_offset(0.0)
        # one count per problem where the solver solved them one at a time; a batch that
        # shares its passes (multiplicative updates) gives every problem its count
        per_problem = getattr(solution, "column_iters", None)
        self.n_iter_ = (np.full(Y.shape[1], solution.n_iter, dtype=np.int32) if per_problem is None
                        else np.asarray(per_problem, dtype=np.int32).copy())
        self.objective_ = np.asarray(solution.objective, dtype=np.float64)
        self.objective_curve_ = np.asarray(solution.objective_curve)
        self.kkt_violation_ = np.asarray(solution.kkt_violation)
        self.converged_ = np.asarray(solution.converged)
        # libsvm's status: 1 for a solve that ended above tol, whatever stopped it (the
        # budget, a deadline, or a solver that could make no further progress)
        self.fit_status_ = int(not self.converged_.all())
        self._budget_spent = bool(solution.n_iter >= budget)
        self.timings_ = dict(solution.timings)
        self.rows_computed_ = int(solution.timings.get("rows_fetched", 0))
        self.shape_fit_ = X.shape if hasattr(X, "shape") else (_num_samples(X),)
        self.solver_ = solver
        self.fit_time_ = float(fit_time)
        return self


    # -- fitted attributes as scikit-learn's -------------------------------------------
    @property
    def coef_(self):
        """Weights of the features, ``kernel="linear"`` only: one row per binary problem
        (read-only, as scikit-learn's)."""
        if self.kernel != "linear":
            raise AttributeError("coef_ is only available when using a linear kernel")
        check_is_fitted(self)
        if self._ovo:
            coef = ovo_coef(self.dual_coef_, self.n_support_, self.support_vectors_)
        else:
            coef = self.dual_coef_ @ self.support_vectors_
            coef = sp.csr_matrix(coef) if sp.issparse(coef) else np.asarray(coef)
        if sp.issparse(coef):
            coef.data.flags.writeable = False
        else:
            coef.flags.writeable = False
        return coef

    @deprecated(_PROB_ATTRIBUTE_DEPRECATION.format("probA_"))
    @property
    def probA_(self):
        """Platt's A per binary problem (``probability=True``), libsvm's orientation."""
        return self._probA

    @deprecated(_PROB_ATTRIBUTE_DEPRECATION.format("probB_"))
    @property
    def probB_(self):
        """Platt's B per binary problem (``probability=True``), libsvm's orientation."""
        return self._probB

    @property
    def _n_support(self):
        """scikit-learn's private name of ``n_support_`` (the same array), which its
        tests and tools read."""
        return self.n_support_

    @property
    def _gamma(self):
        """scikit-learn's private name of the resolved gamma (``kernel_.gamma``)."""
        return self.kernel_.gamma

    @property
    def _ovo(self) -> bool:
        """Whether the fitted problems are one-vs-one pairs (more than two classes)."""
        fitted = getattr(self, "multiclass_", getattr(self, "multiclass", "ovo"))
        return len(self.classes_) > 2 and fitted == "ovo"

    # -- predict -----------------------------------------------------------------------
    def _pair_weights(self) -> np.ndarray:
        """(n_SV, n_problems): the coefficients of every problem's support vectors."""
        if self._ovo:
            return pair_coefficients(self.dual_coef_, self.n_support_)
        dual = self.dual_coef_.toarray() if sp.issparse(self.dual_coef_) else self.dual_coef_
        return np.asarray(dual).T

    def _prediction_state(self):
        """A copy of this fitted model holding only what prediction reads: the parameters
        (``client`` dropped), kernel, support vectors, coefficients, intercepts, classes and
        Platt's sigmoids; no fit diagnostics and no feature names (the input is checked
        before). What :mod:`muflow.dask.predict` ships to the workers, once."""
        params = self.get_params(deep=False)
        params["client"] = None
        state = type(self)(**params)
        for name in ("classes_", "n_features_in_", "shape_fit_", "kernel_", "support_",
                     "support_vectors_", "n_support_", "dual_coef_", "intercept_", "_sparse",
                     "_X_fit", "_probA", "_probB"):
            if hasattr(self, name):
                setattr(state, name, getattr(self, name))
        return state

    def _decision_problems(self, X) -> np.ndarray:
        """Decision value of every binary problem, shape (n_samples, n_problems); a
        one-vs-one pair's is positive for its first class.

        The kernels built on inner products go through the model's prepared
        :class:`muflow.prediction.Predictor` (blocked GEMM, float32 where the model's
        check allows); callable, precomputed and laplacian kernels through
        :func:`muflow.prediction.blocked_decision`. Either way K(X, support vectors) is
        evaluated a block of rows at a time within
        :data:`muflow.prediction.PREDICT_BLOCK_BYTES`. A model of ``device="cuda"`` or
        ``"auto"`` predicts on the GPU where one is usable
        (:func:`muflow.device.predict.device_decision`), else here.
        """
        X = self._validate_for_predict(to_host(X))
        if getattr(self, "device", "cpu") != "cpu" and self.kernel in DEVICE_KERNELS:
            from muflow.device.arrays import prediction_module

            xp = prediction_module(self.device)
            if xp is not None:  # on the GPU, a block of rows at a time
                from muflow.device.predict import device_decision

                return (device_decision(xp, self.kernel_, self.support_vectors_,
                                        self._pair_weights(), X) + self.intercept_)
        if isinstance(self.kernel, str) and self.kernel in PREDICTOR_KERNELS:
            return self._predictor().decision(X) + self.intercept_
        W = self._pair_weights()
        if callable(self.kernel):
            def block(rows):
                return _dense_kernel(self.kernel(rows, self._X_fit))[:, self.support_]
            columns = _num_samples(self._X_fit)
        elif self.kernel == "precomputed":
            def block(rows):
                return rows[:, self.support_]
            columns = len(self.support_)
        else:
            def block(rows):
                return self.kernel_.block(rows, self.support_vectors_)
            columns = len(self.support_)
        return blocked_decision(X, block, W, columns) + self.intercept_

    def _predictor(self) -> Predictor:
        """This model's :class:`muflow.prediction.Predictor`, prepared at its first
        prediction after a fit or a load and kept (outside the estimator: clones, pickles
        and the Dask graph do not carry it) until one of the fitted arrays it was built
        from is replaced (an array edited in place is not seen: assign a new one)."""
        sources = (self.kernel_, self.support_vectors_, self.dual_coef_, self.n_support_)
        cached = _PREDICTORS.get(self)
        if cached is not None and all(a is b for a, b in zip(cached[0], sources)):
            return cached[1]
        predictor = Predictor.prepare(self.kernel_, self.support_vectors_, self._pair_weights())
        _PREDICTORS[self] = (sources, predictor)
        return predictor

    def decision_function(self, X):
        """Signed distance to the separating surface(s).

        Returns
        -------
        ndarray of shape (n_samples,) for two classes; otherwise (n_samples, n_classes)
        (``decision_function_shape="ovr"``, or one-vs-rest training) or
        (n_samples, n_classes * (n_classes - 1) / 2) (``"ovo"``: the pair decisions,
        positive for the pair's first class, libsvm's order).
        """
        self._check_fitted()
        if is_dask_collection(X):
            from muflow.dask.predict import predict_lazy

            return predict_lazy(self, "decision_function", X)
        k = len(self.classes_)
        scores = self._decision_problems(X)
        if k == 2:
            return scores.ravel()
        if self._ovo and self.decision_function_shape == "ovr":
            return ovr_scores(scores, k)
        return scores

    def predict(self, X):
        """Class labels: the sign of the decision function for two classes; one-vs-one:
        libsvm's vote winner, or with ``break_ties`` the argmax of the class scores;
        one-vs-rest: the largest decision."""
        self._check_fitted()
        if self.break_ties and self.decision_function_shape == "ovo":
            raise ValueError("break_ties must be False when decision_function_shape is 'ovo'")
        if is_dask_collection(X):
            from muflow.dask.predict import predict_lazy

            return predict_lazy(self, "predict", X)
        scores = self._decision_problems(X)
        index = predict_index(scores, len(self.classes_), "ovo" if self._ovo else "ovr",
                              break_ties=self.break_ties)
        return self.classes_.take(index)

    def _check_fitted(self):
        """scikit-learn's ``check_is_fitted`` where ``support_`` is missing (a fit sets it);
        a fitted model's prediction skips its scan of the attributes."""
        if "support_" not in self.__dict__:
            check_is_fitted(self)

    def _check_proba(self):
        if not _wants_probability(self.probability):
            raise AttributeError("predict_proba is not available when probability=False")
        return True

    @available_if(_check_proba)
    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes), columns in the order of
        ``classes_``: Platt's sigmoid of each binary decision and, for more than two
        classes, their pairwise coupling (:mod:`muflow.probability`). Like libsvm's, they
        come from the internal cross-validation, so their argmax may differ from
        ``predict`` on a few samples."""
        from muflow.probability import predict_proba_ovo

        check_is_fitted(self)
        if np.size(getattr(self, "_probA", ())) == 0:
            raise NotFittedError("predict_proba is not available when fitted with probability=False")
        if is_dask_collection(X):
            from muflow.dask.predict import predict_lazy

            return predict_lazy(self, "predict_proba", X)
        scores = self._decision_problems(X)
        if len(self.classes_) == 2:
            scores = -scores  # libsvm's orientation: positive for classes_[0]
        return predict_proba_ovo(scores, self._probA, self._probB, len(self.classes_))

    @available_if(_check_proba)
    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`."""
        return np.log(self.predict_proba(X))  # lazy for Dask input, as predict_proba

    def _validate_for_predict(self, X):
        if callable(self.kernel):
            return X
        if self.kernel == "precomputed":
            X = self._check_precomputed(X)
        else:
            plain = self._checked_plain_input(X)
            if plain is not None:
                X = plain
            else:
                X = validate_data(self, X, reset=False, accept_sparse="csr", dtype=np.float64,
                                  ensure_all_finite=False)
                if sp.issparse(X) and not getattr(self, "_sparse", True):
                    raise ValueError(
                        f"cannot use sparse input in {type(self).__name__!r} trained on dense "
                        "data; pass X.toarray() or fit on sparse data")
        check_finite(X, before="predicting")
        self._check_support_layout()
        return X

    def _checked_plain_input(self, X):
        """X as is when it needs nothing of ``validate_data``: a float64 2-D ndarray (or CSR
        matrix, after a sparse fit) of the fitted width, to a model fitted without feature
        names. The microseconds of a one-row prediction; None sends X to ``validate_data``."""
        if "feature_names_in_" in self.__dict__ or getattr(X, "dtype", None) != np.float64:
            return None
        if type(X) is np.ndarray:
            shape = X.shape
        elif type(X) in (sp.csr_matrix, sp.csr_array) and self.__dict__.get("_sparse", False):
            shape = X.shape
        else:
            return None
        if len(shape) != 2 or shape[1] != self.__dict__.get("n_features_in_") or shape[0] < 1:
            return None
        return X

    def _check_support_layout(self):
        """The support vectors, their counts per class and the coefficients agree (what
        scikit-learn checks against CVE-2020-28975): an altered model is refused, not
        read out of bounds."""
        n_sv = len(self.support_)
        n_support = getattr(self, "n_support_", None)
        if (n_support is not None and int(np.sum(n_support)) != n_sv) or self.dual_coef_.shape[1] != n_sv:
            raise ValueError(f"The internal representation of {type(self).__name__} was altered")

    def _check_precomputed(self, X):
        if sp.issparse(X):
            raise MuflowInputError("a precomputed kernel must be a dense array")
        X = np.asarray(X, dtype=np.float64)
        self._check_precomputed_shape(X.shape)
        return X

    def _check_precomputed_shape(self, shape):
        """A precomputed kernel to predict is K(X_test, X_train): one column per training
        sample (also checked on a Dask array's shape, without computing it)."""
        if len(shape) != 2:
            raise MuflowInputError(
                f"Expected 2D array, got {len(shape)}D array instead (shape {tuple(shape)}): a "
                f"precomputed kernel for prediction is K(X_test, X_train) of shape (n_samples, "
                f"{self.shape_fit_[0]}). Reshape your data using array.reshape(1, -1) if it "
                f"contains a single sample")
        if shape[1] != self.shape_fit_[0]:
            raise MuflowInputError(
                f"X.shape[1] = {shape[1]} should be equal to {self.shape_fit_[0]}, the number "
                f"of samples at training time: a precomputed kernel for prediction is "
                f"K(X_test, X_train), got shape {tuple(shape)}")
