"""Input checks of :class:`muflow.SVC`: the helpers fitting and prediction share, and the
checks ``fit`` makes once (:class:`FitInput`, a base of the estimator)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state
from sklearn.utils.validation import (_num_samples, check_consistent_length, column_or_1d,
                                      validate_data)

from muflow.threads import check_n_jobs
from muflow.dask.predict import is_dask_collection
from muflow.device.arrays import to_host
from muflow.data import check_finite
from muflow.exceptions import MuflowInputError
from muflow.inmemory import GRAM_DTYPES
from muflow.kernels import KERNELS, Kernel, kernel_from_setting
from muflow.memory import GRAM_CHOICES
from muflow.multiclass import MULTICLASS
from muflow.solvers.registry import INTERCEPTS, SOLVERS
from muflow.time_limit import check_time_limit
from muflow.validation import (check_bool, check_choice, check_number, check_per_sample,
                               check_weighted_classes)

def _check_numeric_columns(frame) -> None:
    """Refuse a dask DataFrame with columns that are not numbers, naming them."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    bad = [str(name) for name, dtype in frame.dtypes.items()
           if not (is_numeric_dtype(dtype) or is_bool_dtype(dtype))]
    if bad:
        shown = ", ".join(repr(b) for b in bad[:5]) + (", ..." if len(bad) > 5 else "")
        raise ValueError(f"could not convert string to float: the DataFrame's column(s) {shown} "
                         "are not numeric; drop or encode them before fitting")


def _check_symmetric(K, block: int = 1024) -> None:
    """Refuse a precomputed K that is not symmetric (to a relative 1e-6 of its largest
    entry): the dual's Q is then not what the solvers assume, and a pair solver may never
    stop (libsvm's does not). Compared a block at a time, without a transposed copy."""
    n = K.shape[0]
    scale = float(np.max(np.abs(K))) if K.size else 0.0
    for i in range(0, n, block):
        rows = K[i:i + block]
        worst = float(np.max(np.abs(rows - K[:, i:i + block].T))) if rows.size else 0.0
        if worst > 1e-6 * max(scale, 1e-300):
            raise MuflowInputError(
                f"the precomputed kernel matrix is not symmetric (entries differ from their "
                f"transposes by up to {worst:.3g}); pass K(X_train, X_train) of a kernel, e.g. "
                "(K + K.T) / 2 where rounding made them differ")


def _dense_kernel(K) -> np.ndarray:
    """A callable kernel's values as a float64 array (a sparse result is densified)."""
    return K.toarray() if sp.issparse(K) else np.asarray(K, dtype=np.float64)


def _check_magnitude(X):
    """Refuse X whose inner products overflow float64: the kernel, and so the dual
    coefficients, would not be finite (scikit-learn's message, and the fix)."""
    values = X.data if sp.issparse(X) else X
    if not values.size:
        return
    with np.errstate(over="ignore"):
        bound = np.square(np.max(np.abs(values))) * max(X.shape[1], 1)
    if not np.isfinite(bound):
        raise MuflowInputError(
            "The dual coefficients or intercepts are not finite: X holds values so large "
            f"(largest |x| = {float(np.max(np.abs(values))):.3g}) that its inner products overflow. "
            "The input data need to be preprocessed (e.g. sklearn.preprocessing.StandardScaler)")


def _wants_probability(probability) -> bool:
    return probability is not False and probability != "deprecated" and bool(probability)


class FitInput:
    """What ``SVC.fit`` checks once: its parameters, X and y (NumPy, SciPy or Dask), the
    per-sample upper bounds."""

    def _check_params(self):
        if not callable(self.kernel):
            check_choice(self.kernel, "kernel", KERNELS, hint="or a callable kernel(X, Y)")
        check_choice(self.intercept, "intercept", INTERCEPTS)
        check_choice(self.solver, "solver", ("auto", *SOLVERS))
        check_number(self.C, "C", low=0, closed="neither", allow_inf=True,
                     hint="float('inf') is the hard margin")
        check_choice(self.gram_dtype, "gram_dtype", GRAM_DTYPES)
        check_choice(self.gram, "gram", GRAM_CHOICES)
        check_number(self.cache_size, "cache_size", low=0, closed="neither",
                     hint="megabytes of kernel rows to cache, as libsvm's cache_size")
        check_number(self.tol, "tol", low=0, closed="neither")
        if self.max_iter != -1:
            check_number(self.max_iter, "max_iter", integer=True, low=0,
                         hint="-1 means no limit (scikit-learn's default)")
        check_bool(self.shrinking, "shrinking")
        check_bool(self.break_ties, "break_ties")
        check_choice(self.decision_function_shape, "decision_function_shape", ("ovr", "ovo"))
        check_choice(self.multiclass, "multiclass", MULTICLASS)
        if self.probability != "deprecated":
            check_bool(self.probability, "probability")
        if self.class_weight is not None and self.class_weight != "balanced" \
                and not isinstance(self.class_weight, dict):
            raise MuflowInputError(
                f"class_weight must be a dict {{class: weight}}, 'balanced' or None, got "
                f"{self.class_weight!r}")
        check_random_state(self.random_state)
        check_time_limit(self.time_limit)
        check_n_jobs(self.n_jobs)

    def _kernel_for(self, X) -> Kernel:
        if callable(self.kernel):
            return kernel_from_setting({"kernel": "precomputed"}, X, intercept=self.intercept)
        setting = {"kernel": self.kernel, "gamma": self.gamma, "degree": self.degree, "coef0": self.coef0}
        return kernel_from_setting(setting, X, intercept=self.intercept)

    def _validate_dask_input(self, X, y):
        """A dask.array or dask.dataframe X stays on the workers (its partitions become
        the solver's, :class:`muflow.dask.partitions.DaskRowPartitions`); y (O(n)) comes
        to the client. Non-finite values are refused by the worker that holds them; a fit
        whose path does not run there is refused by its plan
        (:func:`muflow.routing.plan_kernel`)."""
        if hasattr(X, "to_dask_array"):
            _check_numeric_columns(X)
            # n_features_in_ and feature_names_in_ from the frame's names, as for pandas
            validate_data(self, X._meta, reset=True, skip_check_array=True)
            X = X.to_dask_array(lengths=True)
        else:
            if X.ndim != 2:
                raise ValueError(f"Expected 2D array, got a dask array of shape {X.shape}")
            if not all(np.isfinite(X.shape)):  # chunks of unknown length: read them once
                X = X.compute_chunk_sizes()
            validate_data(self, X, reset=True, skip_check_array=True)  # no names: none kept
        if X.shape[0] == 0:
            raise ValueError(f"Found array with 0 sample(s) (shape={X.shape}) while a minimum "
                             "of 1 is required by SVC.")
        from muflow.dask.row_blocks import check_finite_blocks, without_empty_rows

        X = without_empty_rows(X)
        check_finite_blocks(X)
        if is_dask_collection(y):
            y = y.compute()
        y = column_or_1d(np.asarray(y), warn=True)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                             f"[{X.shape[0]}, {y.shape[0]}]")
        return X, y, X

    def _validate_fit_input(self, X, y):
        """X (the Gram with a callable or precomputed kernel) and y, brought to the host
        when they live on a device and checked as scikit-learn checks them; returns
        (X_for_the_operator, y, X_kept_for_predict)."""
        X, y = to_host(X), to_host(y)
        if is_dask_collection(X):
            return self._validate_dask_input(X, y)
        if sp.issparse(X) and self.kernel == "precomputed":
            raise TypeError("Sparse precomputed kernels are not supported.")
        if callable(self.kernel):
            check_consistent_length(X, y)
            y = column_or_1d(y, warn=True)
            self.n_features_in_ = np.shape(X)[1] if np.ndim(X) == 2 else 1
            K = _dense_kernel(self.kernel(X, X))
            if K.ndim != 2 or K.shape[0] != K.shape[1]:
                raise ValueError(
                    f"X.shape[0] should be equal to X.shape[1]: the callable kernel returned an "
                    f"array of shape {K.shape} for kernel(X, X), expected ({_num_samples(X)}, "
                    f"{_num_samples(X)})")
            check_finite(K, "kernel(X, X)")
            return K, y, X
        X, y = validate_data(
            self, X, y,
            accept_sparse="csr" if self.kernel != "precomputed" else False,
            dtype=np.float64, ensure_all_finite=False,
        )
        check_finite(X)
        if self.kernel != "precomputed":
            _check_magnitude(X)
        if self.kernel == "precomputed" and X.shape[0] != X.shape[1]:
            raise MuflowInputError(
                f"Precomputed matrix must be a square matrix. Input is a {X.shape[0]}x"
                f"{X.shape[1]} matrix; pass K(X_train, X_train)")
        if self.kernel == "precomputed":
            _check_symmetric(X)
        return X, y, X

    def _per_sample(self, y_encoded, n, sample_weight, offset):
        """``(upper, drift)``: C per sample, C * class_weight * sample_weight, samples of
        weight <= 0 pinned at zero (libsvm drops them, and scikit-learn's messages name what
        is left); and the drifted SVM's fixed intercepts, ``offset`` checked (default 0)."""
        weights = check_per_sample(sample_weight, n, "sample_weight", default=1.0)
        positive = check_weighted_classes(weights, y_encoded)
        scale = np.where(positive, weights, 0.0) * self.class_weight_[y_encoded]
        # C = inf (a hard margin) times a zero weight is a sample left out, not NaN
        upper = np.multiply(float(self.C), scale, out=np.zeros_like(scale), where=scale > 0)
        if len(np.unique(y_encoded[upper > 0])) < 2:
            raise MuflowInputError(
                "Invalid input - class_weight leaves samples of fewer than 2 classes with a "
                "positive weight; give every class a positive class_weight")
        return upper, check_per_sample(offset, n, "offset", default=0.0)

    # -- fit ---------------------------------------------------------------------------
