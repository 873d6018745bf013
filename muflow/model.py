"""The scikit-learn compatible estimator :class:`SVC`, a drop-in for ``sklearn.svm.SVC``.

``__init__`` only stores arguments; ``fit`` validates them once, builds the Gram matrix,
poses one :class:`~muflow.solvers.DualProblem` column per binary problem and hands the
batch to a registered solver. More than two classes are one-vs-one by default, as libsvm:
the k(k-1)/2 pair problems are columns of the one batch on the one Gram, the samples
outside a pair pinned at alpha = 0 by their upper bound (:mod:`muflow.multiclass`).
``probability=True`` adds Platt's sigmoids fitted by internal cross-validation on the same
Gram (:mod:`muflow.probability`).
"""

from __future__ import annotations

import dataclasses
import numbers
import time
import warnings
import weakref

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils import check_random_state
from sklearn.utils._available_if import available_if
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.deprecation import deprecated
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (_num_samples, check_consistent_length, check_is_fitted,
                                      column_or_1d, validate_data)

from muflow.data import check_finite
from muflow.exceptions import MuflowError, MuflowInputError
from muflow.inmemory import GRAM_DTYPES
from muflow.memory import GRAM_CHOICES
from muflow.prediction import PREDICTOR_KERNELS, Predictor, blocked_decision
from muflow.multiclass import (MULTICLASS, binary_problems, libsvm_dual_coef, ovo_coef,
                               ovr_scores, pair_coefficients, predict_index)
from muflow.progress import FitProgress
from muflow.routing import fits_as_one_task, gram_mode, runs_on_workers, solver_for
from muflow.kernels import KERNELS, Kernel, kernel_from_setting
from muflow.solvers import DualProblem
from muflow.solvers.registry import INTERCEPTS, SOLVERS, choose_solver
from muflow.time_limit import chain as chain_deadline, check_time_limit, finish_fit
from muflow.time_limit import start as start_deadline
from muflow.validation import check_bool, check_choice, check_number, check_per_sample

#: decision_function evaluates K(X, support vectors) in blocks of rows of at most this many
#: bytes (float64), so that predicting on many samples never holds n_samples x n_SV at once.
PREDICT_BLOCK_BYTES = 64 * 2**20

#: alpha below this fraction of the largest coefficient of its problem is not a support
#: vector (multiplicative iterates approach zero without reaching it).
SUPPORT_THRESHOLD = 1e-8

#: max_iter=-1 (scikit-learn's "no limit") hands the solver this many iterations.
NO_LIMIT = np.iinfo(np.int32).max

#: scikit-learn 1.9's deprecation of ``probability`` (sklearn/svm/_base.py), word for word.
PROBABILITY_DEPRECATION = (
    "The `probability` parameter was deprecated in 1.9 and will be removed in version 1.11. "
    "Use `CalibratedClassifierCV(SVC(), ensemble=False)` instead of `SVC(probability=True)`")
_PROB_ATTRIBUTE_DEPRECATION = (
    "Attribute `{}` was deprecated in version 1.9 and will be removed in 1.11 as the "
    "`probability=True` option for SVC and NuSVC was deprecated and will be removed in 1.11.")


#: Each model's prepared :class:`muflow.prediction.Predictor` with the fitted arrays it was
#: built from (:meth:`SVC._predictor`).
_PREDICTORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _is_dask_collection(X) -> bool:
    """Whether X is a Dask array or DataFrame, importing nothing (no Dask, no zarr) for any
    other input: predicting from a saved model needs NumPy and SciPy only."""
    if not type(X).__module__.startswith("dask"):
        return False
    from muflow.dask_predict import is_dask_collection

    return is_dask_collection(X)


def _chain(*callbacks):
    """One solver callback calling several; stops when any asks to."""
    active = [c for c in callbacks if c is not None]

    def call(iteration, alpha, objective):
        return any([c(iteration, alpha, objective) for c in active])

    return call


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


class SVC(ClassifierMixin, BaseEstimator):
    """Kernel support vector classifier trained by muflow's solvers.

    Takes every parameter of ``sklearn.svm.SVC`` with its meaning (the README's "Coming
    from scikit-learn" table lists each), plus muflow's own: ``multiclass``, ``solver``,
    ``intercept``, ``client``, ``gram_dtype`` and ``gram``.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly", "sigmoid", "laplacian", "precomputed"} or callable, \
default="rbf"
        A callable ``kernel(X, Y) -> ndarray of shape (n_X, n_Y)`` is evaluated on the
        training data once (its Gram is then used as a precomputed kernel) and on
        ``(X_test, X_train)`` to predict, as scikit-learn does.
    C : float, default=1.0
        Penalty per unit slack; ``float("inf")`` is the hard margin of the papers.
        ``sample_weight`` and ``class_weight`` scale it per sample.
    gamma : {"scale", "auto"} or float, default="scale"
        Kernel scale; the papers' Gaussian width sigma is ``muflow.kernels.gamma_from_sigma``.
    degree : int, default=3
    coef0 : float, default=0.0
    shrinking : bool, default=True
        libsvm's shrinking of the active set, in the solvers that shrink (smo,
        working_set, cd); the others ignore it.
    probability : bool, default="deprecated"
        Fit Platt's sigmoids by 5-fold internal cross-validation on the fit's Gram
        (:mod:`muflow.probability`) so that ``predict_proba`` is available. Deprecated in
        scikit-learn 1.9, and muflow warns as it does (a ``FutureWarning`` when given).
    tol : float, default=1e-3
        KKT violation at which the solver stops (:mod:`muflow.solvers.kkt`).
    cache_size : float, default=200
        Megabytes of kernel rows the subset solvers cache (libsvm's ``cache_size``); spent
        only when rows are computed on demand or fetched from a cluster.
    class_weight : dict or "balanced", default=None
        C of class i is ``class_weight[i] * C``; "balanced" is
        ``n_samples / (n_classes * np.bincount(y))``.
    verbose : bool, default=False
        Print progress on stderr while a fit takes longer than 2 s, a line every 2 s
        (:class:`muflow.progress.FitProgress`): the working-set solver reports its KKT
        gap, the kernel rows computed and the row cache's hit rate; the others their
        iteration and objective.
    max_iter : int, default=-1
        -1: no limit (scikit-learn's default). Otherwise at most this many of the solver's
        own iterations (``SOLVERS[solver_].iteration_unit``): passes over K
        (multiplicative), epochs (cd, adatron), single pair steps (smo: libsvm's and
        scikit-learn's unit; the solver alone counts sweeps of n steps), outer iterations
        (working_set). A solve stopped by it raises a
        ``ConvergenceWarning`` and sets ``fit_status_ = 1``.
    decision_function_shape : {"ovr", "ovo"}, default="ovr"
        Shape of ``decision_function`` with more than two classes under one-vs-one: the
        k(k-1)/2 pair decisions ("ovo") or k class scores ("ovr": votes plus a squashed
        summed confidence, scikit-learn's aggregation).
    break_ties : bool, default=False
        With ``decision_function_shape="ovr"`` and more than two classes, predict the
        argmax of the class scores (ties in votes broken by confidence) instead of
        libsvm's vote winner (ties to the first class).
    random_state : int, RandomState instance or None, default=None
        Shuffles the internal cross-validation folds of ``probability=True``.
    multiclass : {"ovo", "ovr"}, default="ovo"
        How more than two classes are trained: one-vs-one (libsvm's, scikit-learn's) or
        one-vs-rest (k problems of all samples; ``decision_function`` then returns the k
        one-vs-rest decisions and ``predict`` their argmax).
    solver : str, default="auto"
        A name from :data:`muflow.solvers.SOLVERS` ("m3", "m3_flipped", "munk", "musik",
        "seminmf", ...). "auto" picks a solver valid for the kernel and intercept and
        records it in ``solver_``.
    intercept : {"exact", "regularized", "none"}, default="exact"
        "exact": the bias of libsvm (constraint sum_i y_i alpha_i = 0); "regularized": the
        bias as a constant 1 added to the kernel (keeps a non-negative kernel
        non-negative); "none": hyperplane through the origin, as in the papers.
    client : distributed.Client or str, optional
        Train on a Dask cluster. A problem of at most
        :data:`muflow.routing.ONE_TASK_MAX_SAMPLES` samples in memory is fitted whole on one
        worker as one task, whatever the solver. Above, with ``solver="auto"`` or
        ``"working_set"``, X stays on the workers, split by rows (a NumPy or SciPy X is scattered once; the blocks of a
        dask.array or the partitions of a dask.dataframe are used where they are), and
        the working-set solver runs one round trip per iteration sending O(q d)
        (:mod:`muflow.dask_working_set`). A multiplicative solver ("m3", "munk", ...) runs
        on the same row partitions, each holding its kernel panel K(X_p, X) computed there,
        one round trip per pass sending V once (:mod:`muflow.dask_panels`), when an even
        share of K fits in half the smallest worker's memory limit
        (:func:`muflow.dask_panels.panels_fit`). Otherwise, and with the other solvers, the
        Gram store of K(X, X) is built (or reused) on the cluster in ``$MUFLOW_CACHE_DIR`` (a
        path the workers must reach; X in memory) and every solver iteration is served by
        the workers (:class:`muflow.distributed.DaskGram`). A
        scheduler address (``"tcp://host:8786"``) also works and, unlike a Client object,
        survives scikit-learn's ``clone``. None (default) keeps everything in process.
    gram_dtype : {"auto", "float64", "float32"}, default="auto"
        Storage of K in process memory: "auto" is float64 up to 4096 samples and float32
        above (half the memory; the solvers' gradients and certificates still sum in
        float64).
    gram : {"auto", "stored", "rows"}, default="auto"
        Where the kernel values come from in process (:func:`muflow.backends.gram_operator`):
        "stored" builds the whole n x n K once (fastest while it fits; refused before any
        allocation, naming the size, when it does not); "rows" computes rows of K from X on
        demand (:class:`muflow.kernel_rows.KernelRows`, memory O(n * rows cached));
        "auto" stores K up to :data:`muflow.routing.ROWS_MIN_SAMPLES` samples and computes
        rows above, or sooner when K would take more than half the available memory. Ignored with
        ``client`` or ``kernel="precomputed"``.
    time_limit : float, default=None
        Seconds the fit may take (from the start of ``fit``, the kernel included): the
        solver then stops cleanly with its best iterate so far, ``fit_status_`` is 1 and a
        ``ConvergenceWarning`` names the limit and the KKT violation reached
        (:mod:`muflow.time_limit`). None: no limit. Probability calibration
        (``probability=True``) is not bounded by it.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    class_weight_ : ndarray of shape (n_classes,)
        The multiplier of C per class.
    support_ : ndarray of shape (n_SV,)
        Indices of the support vectors (of at least one binary problem), grouped by class
        in the order of ``classes_``, ascending within a class (libsvm's order).
    support_vectors_ : ndarray or sparse matrix of shape (n_SV, n_features)
        Sparse (CSR) after a fit on sparse input; empty for precomputed and callable kernels.
    n_support_ : ndarray of int32 of shape (n_classes,)
        Support vectors per class.
    dual_coef_ : ndarray or sparse matrix
        y_i alpha_i. Two classes: shape (1, n_SV), positive for ``classes_[1]``.
        One-vs-one: libsvm's layout, shape (n_classes - 1, n_SV): a support vector of class
        c holds its coefficient in the pair (c, o) in row o - 1 if o > c, row o if o < c.
        One-vs-rest: shape (n_classes, n_SV), one row per class.
    coef_ : ndarray or sparse matrix of shape (n_problems, n_features)
        The weight vectors, for ``kernel="linear"`` only (read-only).
    intercept_ : ndarray of shape (n_problems,)
        One per binary problem: 1, k(k-1)/2 (one-vs-one, pairs in libsvm's order) or k.
    fit_status_ : int
        0 when every problem met ``tol``, 1 when a solve stopped at ``max_iter`` or at
        ``time_limit``.
    shape_fit_ : tuple
        Shape of the training X.
    n_iter_ : ndarray of shape (n_problems,)
        Iterations taken, in the unit of ``max_iter``; after a fit resumed from a
        checkpoint, those of this call (the checkpoint holds the total).
    probA_, probB_ : ndarray of shape (n_problems,)
        Platt's sigmoid per binary problem (deprecated, as scikit-learn 1.9's); empty
        without ``probability=True``.
    objective_ : ndarray of shape (n_problems,)
        Final dual objective 1/2 a'Qa - sum a (minimisation form).
    objective_curve_ : ndarray of shape (n_iter + 1, n_problems)
    kkt_violation_ : ndarray of shape (n_problems,)
    converged_ : ndarray of bool of shape (n_problems,)
    rows_computed_ : int
        Kernel rows computed from X during the solve (rows on demand; 0 when K was
        stored whole, whose n rows were built before it).
    timings_ : dict
        The solver's seconds and counts (its ``DualSolution.timings``).
    solver_ : str
    fit_time_ : float
    """

    def __init__(
        self,
        kernel="rbf",
        *,
        C=1.0,
        gamma="scale",
        degree=3,
        coef0=0.0,
        shrinking=True,
        probability="deprecated",
        tol=1e-3,
        cache_size=200.0,
        class_weight=None,
        verbose=False,
        max_iter=-1,
        decision_function_shape="ovr",
        break_ties=False,
        random_state=None,
        multiclass="ovo",
        solver="auto",
        intercept="exact",
        client=None,
        gram_dtype="auto",
        gram="auto",
        time_limit=None,
    ):
        self.kernel = kernel
        self.C = C
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.shrinking = shrinking
        self.probability = probability
        self.tol = tol
        self.cache_size = cache_size
        self.class_weight = class_weight
        self.verbose = verbose
        self.max_iter = max_iter
        self.decision_function_shape = decision_function_shape
        self.break_ties = break_ties
        self.random_state = random_state
        self.multiclass = multiclass
        self.solver = solver
        self.intercept = intercept
        self.client = client
        self.gram_dtype = gram_dtype
        self.gram = gram
        self.time_limit = time_limit

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.input_tags.sparse = self.kernel != "precomputed"
        return tags

    # -- validation --------------------------------------------------------------------
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
            check_number(self.max_iter, "max_iter", integer=True, low=1,
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

    def _kernel_for(self, X) -> Kernel:
        if callable(self.kernel):
            return kernel_from_setting({"kernel": "precomputed"}, X, intercept=self.intercept)
        setting = {"kernel": self.kernel, "gamma": self.gamma, "degree": self.degree, "coef0": self.coef0}
        return kernel_from_setting(setting, X, intercept=self.intercept)

    def _validate_dask_input(self, X, y):
        """A dask.array or dask.dataframe X stays on the workers (its partitions become
        the solver's, :class:`muflow.dask_partitions.DaskRowPartitions`); y (O(n)) comes
        to the client. Non-finite values are refused by the worker that holds them."""
        if not runs_on_workers(self.client, self.kernel, self.solver):
            raise MuflowInputError(
                "X is a dask collection: fit it on the cluster with client=... (a Client or a "
                "scheduler address) and solver='auto' or 'working_set' (or a multiplicative "
                "solver: 'm3', 'munk', ...), or pass a NumPy array")
        if hasattr(X, "to_dask_array"):
            X = X.to_dask_array(lengths=True)
        if X.ndim != 2:
            raise ValueError(f"Expected 2D array, got a dask array of shape {X.shape}")
        from muflow.dask_partitions import check_finite_blocks

        check_finite_blocks(X)
        if _is_dask_collection(y):
            y = y.compute()
        y = column_or_1d(np.asarray(y), warn=True)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: "
                             f"[{X.shape[0]}, {y.shape[0]}]")
        self.n_features_in_ = int(X.shape[1])
        return X, y, X

    def _validate_fit_input(self, X, y):
        """X (the Gram with a callable or precomputed kernel) and y, checked as scikit-learn
        checks them; returns (X_for_the_operator, y, X_kept_for_predict)."""
        if _is_dask_collection(X):
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
        return X, y, X

    def _upper_bounds(self, y_encoded, n, sample_weight):
        """C per sample: C * class_weight * sample_weight, samples of weight <= 0 pinned at
        zero (libsvm drops them, and scikit-learn's messages name what is left)."""
        weights = check_per_sample(sample_weight, n, "sample_weight", default=1.0)
        positive = weights > 0
        if not positive.any():
            raise MuflowInputError(
                "Invalid input - all samples have zero or negative weights. Give some samples "
                "a positive sample_weight")
        if len(np.unique(y_encoded[positive])) < 2:
            raise MuflowInputError(
                "Invalid input - all samples with positive weights belong to the same class; "
                "a classifier needs samples of at least 2 classes with positive weight")
        return float(self.C) * np.where(positive, weights, 0.0) * self.class_weight_[y_encoded]

    # -- fit ---------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None, offset=None, checkpoint_dir=None, checkpoint_every=100):
        """Fit the classifier.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Training data, or the (n_samples, n_samples) Gram matrix with
            kernel="precomputed"; anything the callable ``kernel`` takes.
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional
            Scales C per sample (the weighted SVM). Samples of weight <= 0 take no part
            (libsvm drops them).
        offset : array-like of shape (n_samples,), optional
            Fixed per-sample intercepts d_i of the drifted SVM
            (svm-variants-coordinate-descent.txt, section 2): the linear term becomes
            -(1 - y_i d_i).
        checkpoint_dir : str or Path, optional
            Save the solver state (alpha, bias, iteration) there atomically every
            ``checkpoint_every`` iterations; a fit given a directory that holds a checkpoint
            of the same problem continues from it with ``max_iter`` less the iterations
            it holds, both in the solver's unit (:mod:`muflow.checkpoint`).
        checkpoint_every : int, default=100

        Returns
        -------
        self
        """
        t0 = time.perf_counter()
        self._check_params()
        deadline = start_deadline(self.time_limit)
        probability = _wants_probability(self.probability)
        if self.probability != "deprecated":
            warnings.warn(PROBABILITY_DEPRECATION, FutureWarning, stacklevel=2)
        if checkpoint_dir is None and self.client is not None and fits_as_one_task(
                self.client, _num_samples(X), dask_input=_is_dask_collection(X)):
            return self._fit_as_one_task(X, y, sample_weight, offset)
        X, y, X_fit = self._validate_fit_input(X, y)
        check_classification_targets(y)
        self.classes_, y_encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise MuflowInputError(
                f"The number of classes has to be greater than one; got 1 class: the training "
                f"data hold only one class ({self.classes_[0].item()!r}); a classifier needs "
                "samples of at least 2 classes")
        if probability and self.multiclass == "ovr" and len(self.classes_) > 2:
            raise MuflowInputError(
                "probability=True needs the one-vs-one problems (libsvm's pairwise coupling); "
                "use multiclass='ovo'")
        self.class_weight_ = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        n = X.shape[0]
        upper = self._upper_bounds(y_encoded, n, sample_weight)
        drift = check_per_sample(offset, n, "offset", default=0.0)

        from muflow.backends import gram_operator

        kernel = self._kernel_for(X)
        operator = gram_operator(X, kernel, client=self.client, solver=self.solver,
                                 cache_mb=float(self.cache_size), gram=gram_mode(self.gram, n),
                                 gram_dtype=self.gram_dtype)
        try:
            info = choose_solver(solver_for(self.solver, client=self.client, operator=operator),
                                 intercept=self.intercept,
                                 kernel_nonnegative=operator.nonnegative, operator=operator)
        except BaseException:
            operator.close()
            raise
        Y, member = binary_problems(y_encoded, len(self.classes_), self.multiclass)
        U = upper[:, None] * member
        problem = DualProblem(operator, Y, upper=U, linear=-1.0 + Y * drift[:, None],
                              equality=self.intercept == "exact")
        progress = FitProgress() if self.verbose else None
        callback = progress.callback if progress is not None and not info.reports_progress else None
        init, checkpointer = None, None
        if checkpoint_dir is not None:
            init, checkpointer = self._checkpointing(checkpoint_dir, checkpoint_every, problem,
                                                     info.name, kernel, X)
            callback = _chain(checkpointer, callback)
        callback = chain_deadline(deadline, callback)
        # a checkpoint counts iterations in the solver's own unit, as max_iter does
        budget = NO_LIMIT if self.max_iter == -1 else int(self.max_iter)
        max_iter = budget - (checkpointer.start_iteration if checkpointer else 0)
        options = info.options(cache_mb=self.cache_size, shrinking=self.shrinking,
                               progress=progress, libsvm_iterations=True)
        try:
            # a spent budget (max_iter reached by the checkpoint) certifies the start only
            solution = info.solve(problem, init=init, tol=float(self.tol), max_iter=max(max_iter, 0),
                                  callback=callback, **options)
            if checkpointer is not None:
                checkpointer.finish(solution)
            if probability:
                self._fit_probability(operator, Y, U, info, options, drift)
            else:
                self._probA = self._probB = np.empty(0)
            if _is_dask_collection(X_fit):  # the support vectors' rows, from the workers
                from muflow.dask_fitting import RowsOnWorkers

                X_fit = RowsOnWorkers(operator, X_fit.shape)
            self._set_fitted(solution, X=X_fit, y_encoded=y_encoded, kernel=kernel, solver=info.name,
                             fit_time=time.perf_counter() - t0, budget=budget)
        finally:
            operator.close()
        if not finish_fit(self, deadline):
            self._warn_from_fit_status()
        return self

    def _fit_probability(self, operator, Y, U, info, options, drift):
        """Platt's sigmoid per binary problem from 5-fold out-of-fold decisions, every fold
        a column of one batch on this fit's Gram (:func:`muflow.probability.fit_platt`).
        Two classes are fitted in libsvm's orientation (positive for ``classes_[0]``), so
        that ``probA_`` and ``probB_`` read as scikit-learn's."""
        from muflow.probability import fit_platt

        sign = -1.0 if len(self.classes_) == 2 else 1.0
        rng = check_random_state(self.random_state)
        budget = NO_LIMIT if self.max_iter == -1 else int(self.max_iter)
        options = {k: v for k, v in options.items() if k != "progress"}

        def solve(problem):
            problem.linear = -1.0 + problem.y * drift[:, None] if np.any(drift) else problem.linear
            return info.solve(problem, tol=float(self.tol), max_iter=budget, **options)

        self._probA, self._probB = fit_platt(operator, sign * Y, U, solve,
                                             equality=self.intercept == "exact", rng=rng)

    def _warn_from_fit_status(self):
        if self.fit_status_ == 1:
            warnings.warn(
                f"Solver terminated early (max_iter={self.max_iter}).  Consider pre-processing "
                "your data with StandardScaler or MinMaxScaler.", ConvergenceWarning, stacklevel=3)

    def _fit_as_one_task(self, X, y, sample_weight, offset):
        """The whole fit on one worker, next to its data, as one task
        (:func:`muflow.dask_fitting.fit_on_one_worker`): a round trip per fit instead of one
        per solver iteration. The fitted attributes come back."""
        from muflow.dask_fitting import fit_on_one_worker

        params = self.get_params(deep=False)
        params.update(client=None, verbose=False)
        fitted, seconds = fit_on_one_worker(type(self)(**params), self.client, X, y,
                                            sample_weight, offset)
        for name, value in vars(fitted).items():
            if name not in params:
                setattr(self, name, value)
        self.timings_ = dict(self.timings_, one_task=seconds)
        self._warn_from_fit_status()
        return self

    def _checkpointing(self, checkpoint_dir, every, problem, solver, kernel, X):
        from muflow.checkpoint import Checkpointer, load_checkpoint, problem_fingerprint

        tag = {"solver": solver, "kernel": kernel.to_dict(), "C": float(self.C),
               "intercept": self.intercept, "data": problem_fingerprint(X, problem)}
        ckpt = load_checkpoint(checkpoint_dir, tag=tag, n=problem.n, m=problem.m)
        checkpointer = Checkpointer(checkpoint_dir, every, problem=problem, tag=tag, resume=ckpt)
        return (None if ckpt is None else ckpt.init), checkpointer

    @classmethod
    def from_solution(cls, solution, *, X, y_encoded, classes, kernel, fit_time=0.0, **params):
        """A fitted estimator from a dual solution solved elsewhere (the sweep's refit).

        Sets every fitted attribute exactly as :meth:`fit` does (``fit`` ends here too),
        so the result predicts, saves and reports like a fitted model.

        Parameters
        ----------
        solution : DualSolution
            The solution of the problems :func:`muflow.multiclass.binary_problems` poses
            for ``y_encoded`` (layout ``params["multiclass"]``, default one-vs-one).
        X : ndarray or sparse matrix of shape (n_samples, n_features)
            The training samples, validated (float64; CSR when sparse), or the
            (n_samples, n_samples) Gram matrix with ``kernel="precomputed"``.
        y_encoded : ndarray of int of shape (n_samples,)
            Class index of every training sample (into ``classes``).
        classes : array-like of shape (n_classes,)
            The class labels, sorted (``classes_``).
        kernel : Kernel
            The kernel the problems were posed with, offset included for
            ``intercept="regularized"``.
        fit_time : float, default=0.0
            Seconds the fit took (``fit_time_``).
        **params
            Estimator parameters (``C``, ``solver``, ``intercept``, ``tol`` ...);
            ``kernel``, ``gamma``, ``degree`` and ``coef0`` default to those of ``kernel``.
            ``solver_`` is ``solution.solver`` (the registered solver that solved it).

        Returns
        -------
        SVC
            A fitted estimator.
        """
        for name, value in (("kernel", kernel.name), ("gamma", kernel.gamma),
                            ("degree", kernel.degree), ("coef0", kernel.coef0)):
            params.setdefault(name, value)
        model = cls(**params)
        model.classes_ = np.asarray(classes)
        model.class_weight_ = np.ones(len(model.classes_))
        model.n_features_in_ = X.shape[1]
        model._probA = model._probB = np.empty(0)
        max_iter = params.get("max_iter", -1)
        budget = NO_LIMIT if max_iter == -1 else int(max_iter)
        if solution.solver == "smo" and "pair_steps" in solution.timings:
            # the solver counted sweeps of n pair steps; SVC counts libsvm's pair steps
            budget = budget if budget == NO_LIMIT else budget * max(X.shape[0], 1)
            solution = dataclasses.replace(solution, n_iter=int(solution.timings["pair_steps"]))
        return model._set_fitted(solution, X=X, y_encoded=np.asarray(y_encoded), kernel=kernel,
                                 solver=solution.solver or model.solver, fit_time=fit_time,
                                 budget=budget)

    def _set_fitted(self, solution, *, X, y_encoded, kernel, solver, fit_time, budget):
        """The fitted attributes from a solution; the one place both fit paths set them."""
        k = len(self.classes_)
        Y, _ = binary_problems(y_encoded, k, self.multiclass)
        alpha = solution.alpha
        largest = np.maximum(alpha.max(axis=0), np.finfo(float).tiny)
        candidates = np.flatnonzero((alpha > SUPPORT_THRESHOLD * largest[None, :]).any(axis=1))
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
        self._sparse = sp.issparse(X) and not callable(self.kernel)
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
        self.n_iter_ = np.full(Y.shape[1], solution.n_iter, dtype=np.int32)
        self.objective_ = np.asarray(solution.objective, dtype=np.float64)
        self.objective_curve_ = np.asarray(solution.objective_curve)
        self.kkt_violation_ = np.asarray(solution.kkt_violation)
        self.converged_ = np.asarray(solution.converged)
        self.fit_status_ = int(not self.converged_.all() and solution.n_iter >= budget)
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
        return len(self.classes_) > 2 and getattr(self, "multiclass", "ovo") == "ovo"

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
        before). What :mod:`muflow.dask_predict` ships to the workers, once."""
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
        :data:`muflow.prediction.PREDICT_BLOCK_BYTES`.
        """
        X = self._validate_for_predict(X)
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
        from is replaced."""
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
        if _is_dask_collection(X):
            from muflow.dask_predict import predict_lazy

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
        if _is_dask_collection(X):
            from muflow.dask_predict import predict_lazy

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
        if _is_dask_collection(X):
            from muflow.dask_predict import predict_lazy

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
        check_finite(X)
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
        if len(shape) != 2 or shape[1] != self.shape_fit_[0]:
            raise MuflowInputError(
                f"X.shape[1] = {shape[-1]} should be equal to {self.shape_fit_[0]}, the number "
                f"of samples at training time: a precomputed kernel for prediction is "
                f"K(X_test, X_train), got shape {tuple(shape)}")
