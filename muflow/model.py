"""The scikit-learn compatible estimator :class:`SVC`, a drop-in for ``sklearn.svm.SVC``.

``__init__`` only stores arguments; ``fit`` validates them once, builds the Gram matrix,
poses one :class:`~muflow.solvers.DualProblem` column per binary problem and hands the
batch to a registered solver. More than two classes are one-vs-one by default, as libsvm:
the k(k-1)/2 pair problems are columns of the one batch on the one Gram, the samples
outside a pair pinned at alpha = 0 by their upper bound (:mod:`muflow.multiclass`); on rows
computed on demand each pair is solved on rows over its own samples
(:func:`muflow.routing.solves_on_own_samples`).
``probability=True`` adds Platt's sigmoids fitted by internal cross-validation on the same
Gram (:mod:`muflow.probability`). The steps around the solve (the plan asked of
:mod:`muflow.routing`, the one-task path, checkpoints, calibration) are
:class:`muflow.svc_fit.FitSteps`'s.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.class_weight import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets

from muflow.device.arrays import fit_device
from muflow.exceptions import MuflowInputError
from muflow.multiclass import binary_problems
from muflow.progress import FitProgress
from muflow.dask.predict import is_dask_collection
from muflow.svc_input import FitInput, _wants_probability
from muflow.svc_fit import NO_LIMIT, FitSteps, iteration_budget  # noqa: F401  (NO_LIMIT: its home before)
from muflow.svc_prediction import SUPPORT_THRESHOLD, FittedSVC  # noqa: F401 (muflow.model.SUPPORT_THRESHOLD)
from muflow.solvers import DualProblem
from muflow.solvers.registry import choose_solver, svc_iterations
from muflow.subproblems import solve_by_rule
from muflow.threads import budget_scope, thread_budget
from muflow.time_limit import chain, finish_fit
from muflow.time_limit import start as start_deadline

#: What :meth:`SVC._fit` returns for a fit made whole on one worker (no deadline here).
_ON_ONE_WORKER = object()

#: scikit-learn 1.9's deprecation of ``probability`` (sklearn/svm/_base.py), word for word.
PROBABILITY_DEPRECATION = (
    "The `probability` parameter was deprecated in 1.9 and will be removed in version 1.11. "
    "Use `CalibratedClassifierCV(SVC(), ensemble=False)` instead of `SVC(probability=True)`")


class SVC(FitInput, FitSteps, FittedSVC, ClassifierMixin, BaseEstimator):
    """Kernel support vector classifier trained by muflow's solvers.

    Takes every parameter of ``sklearn.svm.SVC`` with its meaning (docs/sklearn.md lists
    each), plus muflow's own: ``multiclass``, ``solver``,
    ``intercept``, ``client``, ``gram_dtype``, ``gram`` and ``device``.

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
        only when rows are computed on demand or fetched from a cluster. One-vs-one pairs
        solved side by side (below) each have their own, so up to one per core at once.
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
        the working-set solver sends each worker O(q d) per iteration, in two calls: one
        worker solves the subproblem while the others compute their kernel rows, then all
        apply the step (:mod:`muflow.dask.working_set`). A multiplicative solver ("m3", "munk", ...) runs
        on the same row partitions, each holding its kernel panel K(X_p, X) computed there,
        one round trip per pass sending V once (:mod:`muflow.dask.panels`), when an even
        share of K fits in half the smallest worker's memory limit
        (:func:`muflow.routing.panels_fit`); otherwise the Gram store of K(X, X) is built
        (or reused) on the cluster in ``$MUFLOW_CACHE_DIR`` (a path the workers must
        reach; X in memory) and every pass is served by the workers
        (:class:`muflow.dask.store_operator.DaskGram`). The solvers that read rows of K a
        pair at a time ("smo", "cd", "adatron", "hybrid") are refused on a cluster above
        the one-task size (:data:`muflow.routing.ONE_TASK_MAX_SAMPLES`). A
        scheduler address (``"tcp://host:8786"``) also works. scikit-learn's ``clone``
        shares a Client object (``GridSearchCV`` fits its candidates on the cluster), and a
        pickled model keeps its scheduler's address in its place. None (default) keeps
        everything in process.
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
        rows above, or sooner when K would take more than half the available memory; a
        solver that reads only products (the multiplicative family: a pass over K each)
        stores K whenever it fits in half the available memory, whatever n
        (:func:`muflow.routing.gram_mode`). With more than two classes on rows on demand,
        each one-vs-one pair is solved on rows over its own samples, pairs of at least
        :data:`muflow.routing.FORK_MIN_SAMPLES` samples side by side in forked processes,
        one per core, unless ``time_limit``, ``verbose`` or a checkpoint must hear every
        iteration (:func:`muflow.routing.subproblem_processes`). Ignored with
        ``client`` or ``kernel="precomputed"``.
    time_limit : float, default=None
        Seconds the fit may take (from the start of ``fit``, the kernel included): the
        solver then stops cleanly with its best iterate so far, ``fit_status_`` is 1 and a
        ``ConvergenceWarning`` names the limit and the KKT violation reached
        (:mod:`muflow.time_limit`). None: no limit. Probability calibration's folds
        (``probability=True``) are bounded by it too.
    device : {"cpu", "cuda", "auto"}, default="cpu"
        Where kernel values are computed and the working-set loop's state lives: "cuda"
        an NVIDIA GPU through CuPy (the ``gpu`` extra; a one-line error naming it when
        CuPy or the GPU is missing), "auto" the GPU when one is usable, else the CPU. On
        the GPU X, alpha, the gradient and the row cache stay there
        (:mod:`muflow.device`), products ``K @ V`` and prediction run there; CuPy arrays
        are accepted as X. The linear, poly, rbf and sigmoid kernels; not with
        ``client``.
    n_jobs : int, default=None
        Threads the fit uses (scikit-learn's convention): None or -1 every core this
        process may use, a positive integer that many, -k all but k - 1. Whatever is asked,
        the fit stays within what its caller allows (:func:`muflow.threads.thread_budget`):
        ``MUFLOW_NUM_THREADS``, ``OMP_NUM_THREADS`` (joblib's workers under
        ``GridSearchCV(n_jobs=...)`` get their share there), threadpoolctl limits and, in a
        Dask worker's task, the worker's threads. One-vs-one pairs solved in forked
        processes share the budget (P = min(pairs, budget) processes of budget // P
        threads, :func:`muflow.threads.divide_budget`). With ``client``, the fit on the
        workers is bounded by each worker's threads.

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
        0 when every problem met ``tol``, 1 (libsvm's "not converged") when a solve ended
        above it: stopped at ``max_iter``, at ``time_limit``, or where no further progress
        was possible (a ``tol`` below what the arithmetic reaches); a ``ConvergenceWarning``
        then names the KKT violation reached and the cause.
    shape_fit_ : tuple
        Shape of the training X.
    n_iter_ : ndarray of shape (n_problems,)
        Iterations taken, in the unit of ``max_iter``; after a fit resumed from a
        checkpoint, counted from the fit's beginning, as ``max_iter`` counts them.
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
    multiclass_ : {"ovo", "ovr"}
        The layout of the fitted problems, which prediction reads (``multiclass`` set after
        the fit changes nothing until the next fit).
    n_threads_ : int
        The thread budget the fit ran on (``n_jobs`` within the caller's limits; on one
        worker, the worker's).
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
        device="cpu",
        n_jobs=None,
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
        self.device = device
        self.n_jobs = n_jobs

    def __getstate__(self):
        """Pickled with a Client given as ``client`` replaced by its scheduler's address (a
        Client holds sockets and an event loop, which do not pickle): the unpickled model
        predicts as it did and connects again where it fits."""
        state = dict(super().__getstate__())  # object's is the instance's own __dict__
        client = state.get("client")
        if client is not None and not isinstance(client, str):
            address = getattr(getattr(client, "scheduler", None), "address", None)
            state["client"] = address if isinstance(address, str) else None
        return state

    def __sklearn_clone__(self):
        """scikit-learn's clone, with a Client given as ``client`` shared, not copied (a
        Client does not deep-copy): ``GridSearchCV(SVC(client=client), ...)`` fits its
        candidates on the same cluster."""
        from sklearn.base import _clone_parametrized

        client = self.client
        if client is None or isinstance(client, str):
            return _clone_parametrized(self)
        bare = type(self)(**{**self.get_params(deep=False), "client": None})
        twin = _clone_parametrized(bare)
        twin.client = client
        return twin

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.input_tags.sparse = self.kernel != "precomputed"
        return tags

    # -- validation --------------------------------------------------------------------
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
        xp = fit_device(self.device, self.client)
        if self.probability != "deprecated":
            warnings.warn(PROBABILITY_DEPRECATION, FutureWarning, stacklevel=2)
        threads = thread_budget(self.n_jobs)
        with budget_scope(threads):
            deadline = self._fit(t0, threads, xp, X, y, sample_weight, offset, checkpoint_dir,
                                 checkpoint_every)
        # warned from here, the caller's frame two levels up (stacklevel=3)
        if deadline is _ON_ONE_WORKER or not finish_fit(
                self, deadline, calibrated=_wants_probability(self.probability)):
            self._warn_from_fit_status()
        return self

    def _fit(self, t0, threads, xp, X, y, sample_weight, offset, checkpoint_dir,
             checkpoint_every):
        """:meth:`fit` on ``threads`` threads (its budget, in force in this thread); returns
        the fit's deadline (None without a time limit), or :data:`_ON_ONE_WORKER`."""
        deadline = start_deadline(self.time_limit)
        probability = _wants_probability(self.probability)
        X, y, X_fit = self._validate_fit_input(X_given := X, y_given := y)
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
        upper, drift = self._per_sample(y_encoded, n, sample_weight, offset)
        kernel = self._kernel_for(X)
        client, plan = self._plan(X, checkpoint=checkpoint_dir is not None, device=xp is not None)
        if plan.path == "one-task":
            self._fit_as_one_task(X_given, y_given, sample_weight, offset)
            return _ON_ONE_WORKER

        from muflow.backends import gram_operator

        operator = gram_operator(X, kernel, plan, client=client, owns_client=client is not self.client,
                                 device=xp, n_threads=threads)
        if is_dask_collection(X_fit):  # X stays on the workers: the fit reads its rows there
            from muflow.dask.fitting import RowsOnWorkers

            X_fit = RowsOnWorkers(operator, X_fit)
        try:
            info = choose_solver(plan.solver, intercept=self.intercept,
                                 kernel_nonnegative=operator.nonnegative, operator=operator)
        except BaseException:
            operator.close()
            raise
        Y, member = binary_problems(y_encoded, len(self.classes_), self.multiclass)
        U = np.where(member, upper[:, None], 0.0)  # (C = inf times 0 would be NaN)
        problem = DualProblem(operator, Y, upper=U, linear=-1.0 + Y * drift[:, None],
                              equality=self.intercept == "exact")
        progress = FitProgress() if self.verbose else None
        callback = progress.callback if progress is not None and not info.reports_progress else None
        init, checkpointer = None, None
        if checkpoint_dir is not None:
            init, checkpointer = self._checkpointing(checkpoint_dir, checkpoint_every, problem,
                                                     info.name, kernel, X)
            callback = chain(checkpointer, callback)
        callback = chain(callback, deadline)
        # a checkpoint counts iterations in the solver's own unit, as max_iter does
        budget = iteration_budget(self.max_iter)
        max_iter = budget - (checkpointer.start_iteration if checkpointer else 0)
        options = info.options(cache_mb=self.cache_size, shrinking=self.shrinking,
                               progress=progress, libsvm_iterations=True)
        try:
            # a spent budget (max_iter reached by the checkpoint) certifies the start only
            # the budget asked when the solve starts: a forked child's share there
            def solve(p, init=None, callback=None):
                return info.solve(p, init=init, tol=float(self.tol), max_iter=max(max_iter, 0),
                                  callback=callback, **options,
                                  **info.options(n_threads=thread_budget(threads)))

            solution = solve_by_rule(problem, member, solve, info.name, init=init, callback=callback)
            if checkpointer is not None:
                checkpointer.finish(solution)
                solution = checkpointer.counted_from_the_start(solution)
            if probability:  # its folds are bounded by the same time limit
                self._fit_probability(operator, Y, U, info, options, drift, deadline)
            else:
                self._probA = self._probB = np.empty(0)
            self._set_fitted(solution, X=X_fit, y_encoded=y_encoded, kernel=kernel, solver=info.name,
                             fit_time=time.perf_counter() - t0, budget=budget, upper=U)
            self.n_threads_ = int(threads)
        finally:
            operator.close()
        return deadline

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
        # max_iter in SVC's unit, the budget the solve was given (the sweep's solves count
        # SMO's pair steps, as SVC.fit's); n_iter_ counts pair steps whatever SMO counted
        budget = iteration_budget(params.get("max_iter", -1))
        if solution.solver == "smo" and "pair_steps" in solution.timings:
            solution = dataclasses.replace(solution, n_iter=svc_iterations(solution))
        return model._set_fitted(solution, X=X, y_encoded=np.asarray(y_encoded), kernel=kernel,
                                 solver=solution.solver or model.solver, fit_time=fit_time,
                                 budget=budget)

