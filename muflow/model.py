"""The scikit-learn compatible estimator :class:`SVC`.

``__init__`` only stores arguments; ``fit`` validates them once, builds the Gram matrix,
poses one :class:`~muflow.solvers.DualProblem` column per binary problem (one-vs-rest
classes share the Gram matrix and every pass over it) and hands it to a registered solver.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from muflow.data import check_finite
from muflow.exceptions import MuflowInputError
from muflow.inmemory import GRAM_DTYPES
from muflow.memory import GRAM_CHOICES
from muflow.progress import FitProgress
from muflow.kernels import KERNELS, Kernel, kernel_from_setting
from muflow.solvers import DualProblem
from muflow.solvers.registry import INTERCEPTS, SOLVERS, choose_solver
from muflow.validation import check_choice, check_number, check_per_sample

#: decision_function evaluates K(X, support vectors) in blocks of rows of at most this many
#: bytes (float64), so that predicting on many samples never holds n_samples x n_SV at once.
PREDICT_BLOCK_BYTES = 64 * 2**20

#: gram="auto" computes kernel rows on demand (the working-set solver) above this many
#: samples: one fit computes only the rows its working sets touch (a8a: 10,293 of 22,696)
#: where a stored K costs all n^2 values. Measured on a8a subsets, RBF gamma=0.05, C=1
#: (stored + smo against rows + working_set): 0.57 s / 0.52 s at 8,000 rows, 1.48 / 0.85 at
#: 12,000, 2.03 / 1.45 at 16,000, 4.56 / 3.09 at 22,696 (benchmarks/bench_single_fit.py).
ROWS_MIN_SAMPLES = 8192

#: alpha below this fraction of the largest coefficient of its problem is not a support
#: vector (multiplicative iterates approach zero without reaching it).
SUPPORT_THRESHOLD = 1e-8


def binary_problems(y_encoded: np.ndarray, n_classes: int) -> np.ndarray:
    """Labels in {-1, +1} per binary problem, shape (n, n_problems).

    Two classes: one problem, +1 for ``classes_[1]`` (scikit-learn's sign convention).
    More: one-vs-rest, one column per class, all sharing one Gram matrix.
    """
    if n_classes == 2:
        return np.where(y_encoded == 1, 1.0, -1.0)[:, None]
    return np.where(y_encoded[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)


def _is_dask_array(X) -> bool:
    """Whether X is a ``dask.array.Array``, importing nothing (no Dask, no zarr) for any
    other input: predicting from a saved model needs NumPy and SciPy only."""
    if not type(X).__module__.startswith("dask"):
        return False
    from muflow.distributed import is_dask_array

    return is_dask_array(X)


def _chain(*callbacks):
    """One solver callback calling several; stops when any asks to."""
    active = [c for c in callbacks if c is not None]

    def call(iteration, alpha, objective):
        return any([c(iteration, alpha, objective) for c in active])

    return call


class SVC(ClassifierMixin, BaseEstimator):
    """Kernel support vector classifier trained by muflow's solvers.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly", "sigmoid", "laplacian", "precomputed"}, default="rbf"
    C : float, default=1.0
        Penalty per unit slack; ``float("inf")`` is the hard margin of the papers.
        ``sample_weight`` scales it per sample.
    gamma : {"scale", "auto"} or float, default="scale"
        Kernel scale; the papers' Gaussian width sigma is ``muflow.kernels.gamma_from_sigma``.
    degree : int, default=3
    coef0 : float, default=0.0
    solver : str, default="auto"
        A name from :data:`muflow.solvers.SOLVERS` ("m3", "m3_flipped", "munk", "musik",
        "seminmf", ...). "auto" picks a solver valid for the kernel and intercept and
        records it in ``solver_``.
    intercept : {"exact", "regularized", "none"}, default="exact"
        "exact": the bias of libsvm (constraint sum_i y_i alpha_i = 0); "regularized": the
        bias as a constant 1 added to the kernel (keeps a non-negative kernel
        non-negative); "none": hyperplane through the origin, as in the papers.
    tol : float, default=1e-3
        KKT violation at which the solver stops (:mod:`muflow.solvers.kkt`).
    max_iter : int, default=10000
        At most this many of the solver's own iterations
        (``SOLVERS[solver_].iteration_unit``): passes over K (multiplicative), epochs of n
        coordinate steps (cd, adatron), sweeps of n pair steps (smo), passes plus sweeps
        (hybrid). ``n_iter_`` counts the same unit, and so does a resumed fit.
    verbose : bool, default=False
        Print progress on stderr while a fit takes longer than 2 s, a line every 2 s
        (:class:`muflow.progress.FitProgress`): the working-set solver reports its KKT
        gap, the kernel rows computed and the row cache's hit rate; the others their
        iteration and objective.
    client : distributed.Client or str, optional
        Train on a Dask cluster: the Gram store of K(X, X) is built (or reused) on the
        cluster in ``$MUFLOW_CACHE_DIR`` (a path the workers must reach) and every solver
        iteration is served by the workers (:class:`muflow.distributed.DaskGram`). A
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
        "auto" stores K up to :data:`ROWS_MIN_SAMPLES` samples and computes rows above, or
        sooner when K would take more than half the available memory. Ignored with
        ``client`` or ``kernel="precomputed"``.
    cache_size : float, default=200
        Megabytes of kernel rows the subset solvers cache (libsvm's ``cache_size``); spent
        only when rows are computed on demand or fetched from a cluster.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    support_ : ndarray of shape (n_SV,)
        Indices of the samples that are support vectors of at least one binary problem.
    support_vectors_ : ndarray of shape (n_SV, n_features)
    dual_coef_ : ndarray of shape (n_problems, n_SV)
        y_i alpha_i per binary problem (one row for two classes, one per class otherwise).
    intercept_ : ndarray of shape (n_problems,)
    n_iter_ : ndarray of shape (n_problems,)
        Iterations taken, in the unit of ``max_iter`` (at most ``max_iter``); after a fit
        resumed from a checkpoint, those of this call (the checkpoint holds the total).
    objective_ : ndarray of shape (n_problems,)
        Final dual objective 1/2 a'Qa - sum a (minimisation form).
    objective_curve_ : ndarray of shape (n_iter + 1, n_problems)
    kkt_violation_ : ndarray of shape (n_problems,)
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
        solver="auto",
        intercept="exact",
        tol=1e-3,
        max_iter=10_000,
        verbose=False,
        client=None,
        gram_dtype="auto",
        gram="auto",
        cache_size=200.0,
    ):
        self.kernel = kernel
        self.C = C
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.solver = solver
        self.intercept = intercept
        self.tol = tol
        self.max_iter = max_iter
        self.verbose = verbose
        self.client = client
        self.gram_dtype = gram_dtype
        self.gram = gram
        self.cache_size = cache_size

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.input_tags.sparse = self.kernel != "precomputed"
        return tags

    # -- validation --------------------------------------------------------------------
    def _check_params(self):
        check_choice(self.kernel, "kernel", KERNELS)
        check_choice(self.intercept, "intercept", INTERCEPTS)
        check_choice(self.solver, "solver", ("auto", *SOLVERS))
        check_number(self.C, "C", low=0, closed="neither", allow_inf=True,
                     hint="float('inf') is the hard margin")
        check_choice(self.gram_dtype, "gram_dtype", GRAM_DTYPES)
        check_choice(self.gram, "gram", GRAM_CHOICES)
        check_number(self.cache_size, "cache_size", low=0, closed="neither",
                     hint="megabytes of kernel rows to cache, as libsvm's cache_size")
        check_number(self.tol, "tol", low=0, closed="neither")
        check_number(self.max_iter, "max_iter", integer=True, low=1)

    def _kernel_for(self, X) -> Kernel:
        setting = {"kernel": self.kernel, "gamma": self.gamma, "degree": self.degree, "coef0": self.coef0}
        return kernel_from_setting(setting, X, intercept=self.intercept)

    # -- fit ---------------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None, offset=None, checkpoint_dir=None, checkpoint_every=100):
        """Fit the classifier.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Training data, or the (n_samples, n_samples) Gram matrix with kernel="precomputed".
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional
            Scales C per sample (the weighted SVM); must be >= 0.
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
        X, y = validate_data(
            self, X, y,
            accept_sparse="csr" if self.kernel != "precomputed" else False,
            dtype=np.float64,
            ensure_all_finite=False,
        )
        check_finite(X)
        check_classification_targets(y)
        if self.kernel == "precomputed" and X.shape[0] != X.shape[1]:
            raise MuflowInputError(
                f"a precomputed kernel must be square (n_samples, n_samples), got {X.shape}; "
                "pass K(X_train, X_train)"
            )
        self.classes_, y_encoded = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise MuflowInputError(
                f"the training data hold only one class ({self.classes_[0]!r}); a classifier "
                "needs samples of at least 2 classes"
            )
        n = X.shape[0]
        weights = check_per_sample(sample_weight, n, "sample_weight", default=1.0)
        if np.any(weights < 0):
            raise MuflowInputError("sample_weight must be >= 0 (negative weights have no meaning for C_i)")
        if not np.any(weights > 0):
            raise MuflowInputError("sample_weight is zero for every sample; give some samples a positive weight")
        weighted_classes = np.unique(y_encoded[weights > 0])
        if len(weighted_classes) < 2:
            raise MuflowInputError(
                "after dropping the samples with zero sample_weight only one class is left; a "
                "classifier needs samples of at least 2 classes with positive weight"
            )
        drift = check_per_sample(offset, n, "offset", default=0.0)

        from muflow.backends import gram_operator

        kernel = self._kernel_for(X)
        operator = gram_operator(X, kernel, client=self.client, gram_dtype=self.gram_dtype,
                                 gram=self._gram_for(n))
        try:
            info = choose_solver(self._solver_for(operator), intercept=self.intercept,
                                 kernel_nonnegative=operator.nonnegative, operator=operator)
        except BaseException:
            operator.close()
            raise
        Y = binary_problems(y_encoded, len(self.classes_))
        problem = DualProblem(
            operator, Y,
            upper=float(self.C) * weights,
            linear=-1.0 + Y * drift[:, None],
            equality=self.intercept == "exact",
        )
        progress = FitProgress() if self.verbose else None
        callback = progress.callback if progress is not None and not info.reports_progress else None
        init, checkpointer = None, None
        if checkpoint_dir is not None:
            init, checkpointer = self._checkpointing(checkpoint_dir, checkpoint_every, problem, info.name, kernel)
            callback = _chain(checkpointer, callback)
        # a checkpoint counts iterations in the solver's own unit, as max_iter does
        max_iter = int(self.max_iter) - (checkpointer.start_iteration if checkpointer else 0)
        try:
            # a spent budget (max_iter reached by the checkpoint) certifies the start only
            options = {"cache_mb": float(self.cache_size)} if info.needs == "rows" else {}
            if progress is not None and info.reports_progress:
                options["progress"] = progress
            solution = info.solve(problem, init=init, tol=float(self.tol), max_iter=max(max_iter, 0),
                                  callback=callback, **options)
            if checkpointer is not None:
                checkpointer.finish(solution)
        finally:
            operator.close()
        return self._set_fitted(solution, X=X, Y=Y, kernel=kernel, solver=info.name,
                                fit_time=time.perf_counter() - t0)

    def _gram_for(self, n: int) -> str:
        """The ``gram`` asked for; "auto" above :data:`ROWS_MIN_SAMPLES` samples is "rows"
        (below, :func:`muflow.backends.gram_operator` stores K when it fits)."""
        if self.gram == "auto" and n > ROWS_MIN_SAMPLES:
            return "rows"
        return self.gram

    def _solver_for(self, operator) -> str:
        """The solver asked for; for "auto" on rows computed on demand (no K in memory, no
        cluster), the working-set solver, which fetches rows q at a time in one product."""
        if (self.solver == "auto" and self.client is None and operator.dense is None
                and "working_set" in SOLVERS):
            return "working_set"
        return self.solver

    def _checkpointing(self, checkpoint_dir, every, problem, solver, kernel):
        from muflow.checkpoint import Checkpointer, load_checkpoint

        tag = {"solver": solver, "kernel": kernel.to_dict(), "C": float(self.C),
               "intercept": self.intercept}
        ckpt = load_checkpoint(checkpoint_dir, tag=tag, n=problem.n, m=problem.m)
        checkpointer = Checkpointer(checkpoint_dir, every, problem=problem, tag=tag, resume=ckpt)
        return (None if ckpt is None else ckpt.init), checkpointer

    @classmethod
    def from_solution(cls, solution, *, X, Y, classes, kernel, fit_time=0.0, **params):
        """A fitted estimator from a dual solution solved elsewhere (the sweep's refit).

        Sets every fitted attribute exactly as :meth:`fit` does (``fit`` ends here too),
        so the result predicts, saves and reports like a fitted model.

        Parameters
        ----------
        solution : DualSolution
            The solution of the problems posed on ``X`` and ``Y``.
        X : ndarray or sparse matrix of shape (n_samples, n_features)
            The training samples, validated (float64; CSR when sparse), or the
            (n_samples, n_samples) Gram matrix with ``kernel="precomputed"``.
        Y : ndarray of shape (n_samples, n_problems)
            Labels in {-1, +1} per binary problem, as :func:`binary_problems` poses them.
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
        model.n_features_in_ = X.shape[1]
        return model._set_fitted(solution, X=X, Y=Y, kernel=kernel,
                                 solver=solution.solver or model.solver, fit_time=fit_time)

    def _set_fitted(self, solution, *, X, Y, kernel, solver, fit_time):
        """The fitted attributes from a solution; the one place both fit paths set them."""
        alpha = solution.alpha
        largest = np.maximum(alpha.max(axis=0), np.finfo(float).tiny)
        is_support = (alpha > SUPPORT_THRESHOLD * largest[None, :]).any(axis=1)
        self.support_ = np.flatnonzero(is_support).astype(np.int32)
        self.dual_coef_ = (Y * alpha)[self.support_].T.copy()
        if kernel.offset:
            # f(x) = sum a y (k + r) = sum a y k + r sum a y: the bias of the augmented kernel
            self.intercept_ = kernel.offset * (Y * alpha).sum(axis=0) + solution.bias
        else:
            self.intercept_ = np.asarray(solution.bias, dtype=np.float64).copy()
        if self.kernel == "precomputed":
            self.support_vectors_ = np.empty((0, 0))
        else:
            self.support_vectors_ = X[self.support_]
        self.kernel_ = kernel.with_offset(0.0)
        self.n_iter_ = np.full(Y.shape[1], solution.n_iter, dtype=np.int64)
        self.objective_ = np.asarray(solution.objective, dtype=np.float64)
        self.objective_curve_ = np.asarray(solution.objective_curve)
        self.kkt_violation_ = np.asarray(solution.kkt_violation)
        self.converged_ = np.asarray(solution.converged)
        self.timings_ = dict(solution.timings)
        self.rows_computed_ = int(solution.timings.get("rows_fetched", 0))
        self.shape_fit_ = X.shape
        self.solver_ = solver
        self.fit_time_ = float(fit_time)
        return self

    # -- predict -----------------------------------------------------------------------
    def decision_function(self, X):
        """Signed distance to the separating surface(s).

        Returns
        -------
        ndarray of shape (n_samples,) for two classes, (n_samples, n_classes) otherwise.
        """
        check_is_fitted(self)
        if _is_dask_array(X):  # blockwise, against the support vectors only
            from muflow.distributed import map_rows

            n_out = None if len(self.classes_) == 2 else len(self.classes_)
            return map_rows(self.decision_function, X, n_outputs=n_out)
        X = self._validate_for_predict(X)
        n_support = max(len(self.support_), 1)
        step = max(1, PREDICT_BLOCK_BYTES // (8 * n_support))
        scores = np.empty((X.shape[0], self.dual_coef_.shape[0]))
        for start in range(0, X.shape[0], step):  # K(X, SV) a block of rows at a time
            rows = X[start:start + step]
            if self.kernel == "precomputed":
                K = rows[:, self.support_]
            else:
                K = self.kernel_.block(rows, self.support_vectors_)
            scores[start:start + step] = K @ self.dual_coef_.T + self.intercept_[None, :]
        return scores.ravel() if len(self.classes_) == 2 else scores

    def predict(self, X):
        """Class labels: the sign of the decision function, or the largest one-vs-rest score."""
        if _is_dask_array(X):
            from muflow.distributed import map_rows

            check_is_fitted(self)
            return map_rows(self.predict, X, dtype=self.classes_.dtype)
        scores = self.decision_function(X)
        if len(self.classes_) == 2:
            return self.classes_[(scores > 0).astype(int)]
        return self.classes_[np.argmax(scores, axis=1)]

    def _validate_for_predict(self, X):
        X = validate_data(
            self, X, reset=False,
            accept_sparse="csr" if self.kernel != "precomputed" else False,
            dtype=np.float64, ensure_all_finite=False,
        ) if self.kernel != "precomputed" else self._check_precomputed(X)
        check_finite(X)
        return X

    def _check_precomputed(self, X):
        if sp.issparse(X):
            raise MuflowInputError("a precomputed kernel must be a dense array")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.shape_fit_[0]:
            raise MuflowInputError(
                f"a precomputed kernel for prediction must have shape (n_samples, "
                f"{self.shape_fit_[0]}) = K(X_test, X_train), got {X.shape}"
            )
        return X
