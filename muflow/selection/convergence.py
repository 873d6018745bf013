"""Solves that stopped short of ``tol``: how a sweep says so, and the advice it shares with
the run's summary.

Every (C, fold, class) column of a kernel setting is solved until its KKT violation
(:func:`muflow.solvers.kkt.kkt_violation`) is at most ``tol`` or its budget (``max_iter``)
is spent. A row of ``results.csv`` says ``converged=True`` when every fold solve of that
configuration reached ``tol``, and ``kkt_violation`` holds the worst of them; the CV scores
of a row that did not converge are those of iterates short of the optimum (C values whose
solves all stop at the budget can score alike). :func:`warn_not_converged` warns once per
sweep, as :meth:`muflow.SVC.fit` warns for its one solve; :func:`short_of_tol` and
:func:`advice` word it, and :func:`muflow.run_report.summary_rows` uses the same words for
a run's best model.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning


def short_of_tol(violation: float, tol: float) -> str:
    """``KKT violation 0.72 > tol 0.001``."""
    return f"KKT violation {violation:.3g} > tol {tol:g}"


def advice(*, max_iter: str, tol: str, solver: str) -> str:
    """What to change, with each option named as the caller's user sets it."""
    return f"raise {max_iter} (or {tol}), or use another {solver}"


def warn_not_converged(table, model, *, max_iter, tol: float, out_dir, timed_out=False) -> int:
    """One ``ConvergenceWarning`` (at the caller of :func:`~muflow.selection.run_sweep`) when configurations (finished, not stopped by successive
    halving: those have warnings or reasons of their own) or the best model's refit stopped
    above ``tol`` (not counted when the time limit stopped a solve, ``timed_out``: the
    limit may have stopped the refit, and :func:`muflow.selection.timeout.warn_unfinished` says so);
    returns how many configurations did not converge."""
    counted = [r for r in table if r.finished and not r.stopped_early]
    short = [r for r in counted if not r.converged]
    refit_short = not timed_out and not bool(np.all(model.converged_))
    if not short and not refit_short:
        return 0
    worst = max([r.kkt_violation for r in short] +
                ([float(np.max(model.kkt_violation_))] if refit_short else []))
    what = (f"{len(short)} of {len(counted)} configurations did not converge (converged=False "
            f"in {out_dir}/results.csv)" if short else "every configuration converged")
    best = ("; the best model's refit did not converge either (fit_status_=1)" if short and refit_short
            else "; the best model's refit did not converge (fit_status_=1)" if refit_short else "")
    warnings.warn(
        f"{what}{best}: solves stopped at max_iter={max_iter} with {short_of_tol(worst, tol)} "
        f"(the worst), and the CV scores of such configurations are those of unfinished "
        f"solves; {advice(max_iter='max_iter / --max-iter', tol='tol / --tol', solver='solver / --solver')}",
        ConvergenceWarning, stacklevel=4)
    return len(short)
