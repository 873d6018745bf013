"""The Kernel Adatron (Friess, Cristianini & Campbell, ICML 1998).

For each sample in turn, z_i = sum_j alpha_j y_j K(x_i, x_j) and

    alpha_i <- clip(alpha_i + eta_i (1 - y_i z_i), 0, C_i),

sweeping the training set until the margin conditions hold. With a general linear term
the step reads alpha_i <- clip(alpha_i - eta_i G_i, 0, U_i), G = Q alpha + p, which is the
drifted SVM's update as well. Friess et al. take eta_i = eta / K(x_i, x_i), 0 < eta < 2;
eta = 1 makes every step the exact one-variable minimiser, and the objective decreases
monotonically for any eta in (0, 2). There is no sum constraint (the Adatron's bias is
the kernel's offset), so it serves ``intercept="none"`` and ``"regularized"``; the M3
paper (section 4) compares it with clipped M3 on USPS.

It is the coordinate loop of :mod:`muflow.solvers.coordinate` in its original form:
sequential sweeps in index order, no shrinking, no random permutation. Rows of K come
through the row cache; the stopping rule is the common KKT measure.
"""

from __future__ import annotations

from muflow.solvers.coordinate import solve_coordinate
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.rowcache import DEFAULT_CACHE_MB


def solve_adatron(problem: DualProblem, *, init=None, tol: float = 1e-3, max_iter: int = 10_000,
                  callback=None, cache_mb: float = DEFAULT_CACHE_MB,
                  eta: float = 1.0) -> DualSolution:
    """Kernel Adatron on every column of ``problem``.

    Parameters
    ----------
    problem : DualProblem
        ``equality`` must be False.
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
    tol : float, default=1e-3
        Common KKT measure to reach.
    max_iter : int, default=10000
        Epochs at most, an epoch being one step on every sample, in index order.
    callback : callable, optional
        ``callback(epoch, alpha, objective)`` after every epoch; returning True stops.
    cache_mb : float, default=256
        Size of the row cache in MB.
    eta : float, default=1.0
        Learning rate as a multiple of 1 / K_ii (Friess et al.), in (0, 2).

    Returns
    -------
    DualSolution
        ``n_iter`` counts epochs (at most ``max_iter``).
    """
    return solve_coordinate(problem, init=init, tol=tol, max_iter=max_iter, callback=callback,
                            cache_mb=cache_mb, shuffle=False, shrinking=False, eta=eta,
                            solver_name="adatron")
