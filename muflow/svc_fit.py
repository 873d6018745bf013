"""The steps of :meth:`muflow.SVC.fit` around its solve (:class:`FitSteps`, a base of the
estimator): the fit's one plan asked of :mod:`muflow.routing`, the whole fit on one worker
when the plan says so, solver checkpoints, Platt's calibration on the fit's operator, and
the warning a solve stopped early raises.

:mod:`muflow.model` keeps the estimator's parameters and the main line of the fit
(validation, the problem posed, the solve); what each step here needs of the estimator is
its parameters and fitted classes.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from muflow.dask.predict import is_dask_collection
from muflow.device.arrays import to_host
from muflow.routing import plan_fit
from muflow.threads import thread_budget
from muflow.time_limit import chain

#: max_iter=-1 (scikit-learn's "no limit") hands the solver this many iterations.
NO_LIMIT = np.iinfo(np.int32).max


def iteration_budget(max_iter) -> int:
    """The iterations a solve may take for the estimator's ``max_iter`` (-1: no limit)."""
    return NO_LIMIT if max_iter == -1 else int(max_iter)


class FitSteps:
    """The steps of :meth:`muflow.SVC.fit` around the solve (see the module docstring)."""

    def _plan(self, X, *, checkpoint: bool, device: bool = False):
        """``(client, plan)``: the fit's one plan (:func:`muflow.routing.plan_fit`), asked of
        the cluster itself where ``client`` is a scheduler address (connected here, and then
        owned by the operator; closed at once on the one-task path, which connects on its
        own)."""
        from muflow.dask.cluster import connect

        client = connect(self.client) if isinstance(self.client, str) else self.client
        try:
            plan = plan_fit(X.shape[0], client=client, dask_input=is_dask_collection(X),
                            checkpoint=checkpoint, solver=self.solver, intercept=self.intercept,
                            kernel_name=self.kernel, gram=self.gram, gram_dtype=self.gram_dtype,
                            cache_mb=float(self.cache_size), device=device)
        except BaseException:
            if client is not self.client:
                client.close()
            raise
        if plan.path == "one-task" and client is not self.client:
            client.close()
        return client, plan

    def _fit_probability(self, operator, Y, U, info, options, drift, deadline=None):
        """Platt's sigmoid per binary problem from 5-fold out-of-fold decisions, every fold
        a column of one batch on this fit's operator, solved by the fit's path
        (:func:`muflow.probability.fit_platt`: on rows, each fold on its own samples).
        Two classes are fitted in libsvm's orientation (positive for ``classes_[0]``), so
        that ``probA_`` and ``probB_`` read as scikit-learn's."""
        from muflow.probability import fit_platt

        sign = -1.0 if len(self.classes_) == 2 else 1.0
        rng = check_random_state(self.random_state)
        budget = iteration_budget(self.max_iter)
        options = {k: v for k, v in options.items() if k != "progress"}

        def solve(problem, init=None, callback=None):
            return info.solve(problem, init=init, tol=float(self.tol), max_iter=budget,
                              callback=chain(callback, deadline), **options,
                              **info.options(n_threads=thread_budget(self.n_jobs)))

        self._probA, self._probB = fit_platt(operator, sign * Y, U, solve,
                                             equality=self.intercept == "exact", rng=rng,
                                             solver=info.name, drift=drift,
                                             cache_mb=float(self.cache_size))

    def _warn_from_fit_status(self):
        """scikit-learn's ``ConvergenceWarning`` for a solve that ended above ``tol``: it
        names the KKT violation reached and what stopped the solver, ``max_iter`` or no
        further progress (the time limit warns through :func:`muflow.time_limit.finish_fit`)."""
        if self.fit_status_ != 1:
            return
        reached = (f"with KKT violation {float(np.max(self.kkt_violation_)):.3e} > "
                   f"tol={float(self.tol):g} (fit_status_ = 1)")
        if getattr(self, "_budget_spent", True):
            # scikit-learn's words first (its tests match them), then what was reached
            message = (f"Solver terminated early (max_iter={self.max_iter}).  Consider "
                       "pre-processing your data with StandardScaler or MinMaxScaler. Stopped "
                       f"{reached}.")
        else:
            message = (f"Solver stopped {reached}: no further progress was possible at this "
                       "tol, which is below what floating-point arithmetic reaches on this "
                       "problem (or the kernel is not positive semi-definite); raise tol.")
        warnings.warn(message, ConvergenceWarning, stacklevel=3)

    def _fit_as_one_task(self, X, y, sample_weight, offset):
        """The whole fit on one worker, next to its data, as one task
        (:func:`muflow.dask.fitting.fit_on_one_worker`): a round trip per fit instead of one
        per solver iteration. The fitted attributes come back."""
        from muflow.dask.fitting import fit_on_one_worker

        params = self.get_params(deep=False)
        params.update(client=None, verbose=False)
        fitted, seconds = fit_on_one_worker(type(self)(**params), self.client, to_host(X),
                                            to_host(y), sample_weight, offset)
        for name, value in vars(fitted).items():
            if name not in params:
                setattr(self, name, value)
        self.timings_ = dict(self.timings_, one_task=seconds)
        return self

    def _checkpointing(self, checkpoint_dir, every, problem, solver, kernel, X):
        """``(init, checkpointer)``: the solver state to resume from (None when
        ``checkpoint_dir`` holds no checkpoint of this problem) and the callback that saves
        the state every ``every`` iterations (:mod:`muflow.checkpoint`)."""
        from muflow.checkpoint import Checkpointer, load_checkpoint, problem_fingerprint

        tag = {"solver": solver, "kernel": kernel.to_dict(), "C": float(self.C),
               "intercept": self.intercept, "data": problem_fingerprint(X, problem)}
        ckpt = load_checkpoint(checkpoint_dir, tag=tag, n=problem.n, m=problem.m)
        checkpointer = Checkpointer(checkpoint_dir, every, problem=problem, tag=tag, resume=ckpt)
        return (None if ckpt is None else ckpt.init), checkpointer
