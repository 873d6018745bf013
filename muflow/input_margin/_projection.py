"""Projection of samples on the decision boundary and the input-space margin
(input-space-margin.txt, sections 3.1 and 3.4): the iteration of eq. (12), its slow-down
(section 3.4) and the safeguards that keep it on track, and the distances of eq. (3).

Eq. (12) is the step of sequential quadratic programming for ``min ||x - x_i||^2_{G_i}``
subject to ``f(x) = 0`` with the Hessian of the Lagrangian replaced by ``G_i``: from
``x_hat`` it jumps to the nearest point of the boundary's linearisation. On the section 4
simulation (hard-margin RBF discriminants, whose ``f`` is far from linear over one step)
the plain iteration failed in three ways:

- off the boundary it cycles (run 24's SVM, sample 17: three points, forever);
- where ``grad f`` nearly vanishes (far from the bases of an RBF ``f``) the linearised
  boundary lies up to 1e135 away; the next step overflowed in the slow-down;
- round-off in ``f`` (hard-margin coefficients reach 1e9) keeps ``|f| / ||grad f||`` above
  a fixed tolerance, so settled points were reported as not converged.

Safeguards, per sample: (i) no move is longer than the reach ``R_i``, the G_i-diameter of
the cloud of samples and bases (a correctly classified sample has a boundary point on its
segment to any point of the other side, so no useful move is longer); (ii) while the point is off the boundary
(``|f| / ||q|| > 1e-3 ||x_hat - x_i||``) the step is halved until it decreases the l1 merit
function ``1/2 ||x - x_i||^2_{G_i} + mu |f(x)|``, ``mu >= 2 |lambda|`` with ``lambda`` the
multiplier of eq. (12) (Han's merit function for SQP, of which eq. 12's step is a descent
direction), and the slow-down, whose analysis (Proposition 1) assumes a point on the
boundary, is kept to points on it; on the boundary the step is taken whole, as the paper
does; (iii) the convergence test allows for the rounding error of ``f``. A sample whose
gradient vanishes, or whose linearised boundary lies beyond reach when the iterations
end, is reported as ``diverged``.

On the 600 discriminants that Algorithm 1 reached, before these changes, in the
simulation's 100 runs (benchmarks/bench_input_margin_simulation.py), 200 iterations from the
samples left 321 of 12,000 projections unconverged (in 125 discriminants; 27 at the sample setting the
margin, 8 of them with a positive margin) before the safeguards, and leave 50 (in 29;
5 at the margin's sample, none with a positive margin) with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from muflow.input_margin._discriminant import Discriminant

_TINY = 1e-300
#: The point is "off the boundary" while |f| / ||q|| exceeds this fraction of ||x_hat - x_i||.
_OFF_BOUNDARY = 1e-3
#: Armijo constant and most halvings of one backtracking search.
_ARMIJO = 1e-4
_MAX_HALVINGS = 30
#: Rounding error of f, in units of eps times the sum of |terms| of eq. (2).
_ROUNDOFF = 16.0


def _slow_down(step, x_hat, X, grad, hess, L):
    """Shrink the tangential movement where the iteration (12) is unstable at a local
    minimum of the distance (section 3.4, Proposition 1).

    In whitened coordinates z = L^T x (where G = L L^T and the metric is Euclidean), with
    d = z_hat - z_i, lambda from grad f ~ lambda d (eq. 13) and c_j the curvatures of f in an
    orthonormal basis of the tangent space (eq. 16), the iteration multiplies the tangential
    error by c_j / lambda (eq. 17). The point is a local minimum of the distance when
    c_j / lambda < 1 for all j; it is then unstable along the axes with c_j / lambda <= -1
    and oscillates slowly along those with c_j / lambda near -1. Along every axis with
    c_j / lambda < 0 the movement is multiplied by e_j = 1 / (1 - c_j / lambda), inside the
    paper's range 0 < e_j < |lambda| / |c_j|, which cancels the linearised error factor
    1 + e_j (c_j / lambda - 1) of eq. (17).
    Local maxima and saddle points are left unstable so that the iteration leaves them.
    """
    n, m = X.shape
    if m < 2:
        return step
    Linv = np.linalg.inv(L)
    d = np.einsum("nts,nt->ns", L, x_hat - X)  # L^T d
    gz = np.einsum("nst,nt->ns", Linv, grad)
    Hz = Linv @ hess @ np.transpose(Linv, (0, 2, 1))
    dd = np.einsum("ns,ns->n", d, d)
    ok = dd > 1e-24
    lam = np.where(ok, np.einsum("ns,ns->n", gz, d) / np.where(ok, dd, 1.0), 0.0)
    ok &= np.abs(lam) > _TINY
    # unit normal where defined, 0 elsewhere (an unnormalised d of 1e135 overflowed below)
    u = np.where(ok[:, None], d, 0.0) / np.sqrt(np.where(ok, dd, 1.0))[:, None]
    # Householder reflector mapping e_1 to u: its columns 2..m span the tangent space.
    v = u.copy()
    v[:, 0] -= 1.0
    vv = np.einsum("ns,ns->n", v, v)
    R = np.broadcast_to(np.eye(m), (n, m, m)).copy()
    big = vv > 1e-20
    R[big] -= 2.0 * v[big, :, None] * v[big, None, :] / vv[big, None, None]
    P = R[:, :, 1:]
    C = np.transpose(P, (0, 2, 1)) @ Hz @ P
    c, V = np.linalg.eigh(C)
    ratio = c / np.where(ok, lam, 1.0)[:, None]
    local_min = ok & np.all(ratio < 1.0, axis=1)
    unstable = local_min[:, None] & (ratio < 0.0)
    if not np.any(unstable):
        return step
    e = np.where(unstable, 1.0 / (1.0 - np.minimum(ratio, 0.0)), 1.0)
    W = P @ V  # tangent eigen-directions, (n, m, m-1)
    dz = np.einsum("nts,nt->ns", L, step)
    along = np.einsum("ns,ns->n", u, dz)[:, None] * u
    coef = np.einsum("nsk,ns->nk", W, dz)
    dz_new = along + np.einsum("nsk,nk->ns", W, e * coef)
    new = np.einsum("nst,nt->ns", np.transpose(Linv, (0, 2, 1)), dz_new)
    return np.where(unstable.any(axis=1)[:, None], new, step)


def reach(disc: Discriminant, X, G_inv) -> np.ndarray:
    """``R_i``: no point of the cloud of samples and bases is farther than this from x_i in
    G_i, ``sqrt(lambda_max(G_i))`` times the Euclidean diagonal of the cloud's bounding box,
    shape (n,)."""
    cloud = np.vstack([X, disc.centers])
    diagonal = float(np.linalg.norm(np.ptp(cloud, axis=0)))
    diagonal = max(diagonal, 1e-6 * max(1.0, float(np.abs(cloud).max())))
    return diagonal / np.sqrt(np.linalg.eigvalsh(G_inv)[:, 0])


def _g_norm2(v, G):
    return np.einsum("ns,nst,nt->n", v, G, v)


def project_onto_boundary(disc: Discriminant, X, G_inv, L, x_start=None, *, max_iter=50,
                          tol=1e-9, slow_down=True):
    """Estimate the projection x*_i of every x_i on {f = 0} by iterating eq. (12).

    ``x_hat[l+1] = x_i - G_i^-1 q / ||q||^2_{G_i^-1} [p - (x_hat[l] - x_i)^T q + f0]``, with
    ``p = f(x_hat[l]) - f0`` and ``q = grad f(x_hat[l])``: the closest point to x_i, in G_i,
    on the linearisation of the boundary at x_hat[l]. (The paper prints ``q`` for
    ``G_i^-1 q``; the two agree for G_i = I, and only ``G_i^-1 q`` makes the rule invariant
    under a change of metric, as the proof of Proposition 1 uses.) With the slow-down of
    section 3.4 and the safeguards of this module's docstring (reach, merit backtracking,
    round-off-aware stopping test).

    Returns
    -------
    x_hat : ndarray of shape (n, m)
    n_iter : int
    converged : ndarray of bool, shape (n,)
        The point stopped moving (by ``tol`` times the data's scale, or the rounding error of
        f) and lies on the boundary to that precision.
    diverged : ndarray of bool, shape (n,)
        Not converged, and ``grad f`` vanished (the point is left where it was) or the
        linearised boundary lay beyond the reach ``R_i`` at the last iteration: f is flat
        around x_hat and no boundary point near x_i was found.
    """
    X = np.asarray(X, dtype=np.float64)
    n = X.shape[0]
    x_hat = X.copy() if x_start is None else np.array(x_start, dtype=np.float64)
    G = np.linalg.inv(G_inv)
    R = reach(disc, X, G_inv)
    floor = tol * max(1.0, float(np.abs(X).max()))
    eps = np.finfo(np.float64).eps
    converged = np.zeros(n, dtype=bool)
    diverged = np.zeros(n, dtype=bool)
    mu = np.zeros(n)
    f = disc.value(x_hat)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        q = disc.gradient(x_hat)
        Gq = np.einsum("nst,nt->ns", G_inv, q)
        N = np.einsum("ns,ns->n", q, Gq)
        flat = ~(N > _TINY) | ~np.isfinite(N) | ~np.isfinite(f)
        root = np.sqrt(np.where(flat, 1.0, N))
        d = x_hat - X
        level = np.where(flat, 0.0, f - np.einsum("ns,ns->n", d, q))  # = p - d_hat^T q + f0
        # target = x_i - (G^-1 q / ||q||) * level / ||q||, at G-distance |level| / ||q|| from x_i
        beyond = (np.abs(level) > R * root) & ~flat
        step = X - (Gq / root[:, None]) * (level / root)[:, None] - x_hat
        step[flat] = 0.0
        d_norm = np.sqrt(np.einsum("ns,nst,nt->n", d, G, d))
        off = ~flat & (np.abs(f) / root > _OFF_BOUNDARY * d_norm + floor)
        if slow_down and n_iter > 1 and not np.all(off | flat):
            on = ~(off | flat)  # Proposition 1 linearises on the boundary: slow down there only
            step[on] = _slow_down(step[on], x_hat[on], X[on], q[on], disc.hessian(x_hat[on]), L[on])
        # off the boundary, backtracking on the l1 merit function
        Gd = np.einsum("nst,nt->ns", G, d)
        # mu >= 2 |lambda|, lambda = level / ||q||^2 (with the reach bounding |level| / ||q||)
        mu = np.maximum(mu, 2.0 * np.minimum(np.abs(level) / root, R) / root)
        phi = 0.5 * d_norm**2 + mu * np.abs(f)
        slope_f = np.einsum("ns,ns->n", q, step)
        dphi = np.einsum("ns,ns->n", Gd, step) + mu * np.where(f != 0, np.sign(f) * slope_f, np.abs(slope_f))
        search = off & (dphi < 0)
        # no move longer than the reach (a target 1e135 away once overflowed the slow-down)
        size = np.abs(step).max(axis=1)
        length = size * np.sqrt(_g_norm2(step / np.where(size > 0, size, 1.0)[:, None], G))
        t = np.minimum(1.0, R / np.where(length > 0, length, 1.0))
        x_new = x_hat + t[:, None] * step
        f_new = disc.value(x_new)
        for _ in range(_MAX_HALVINGS):
            phi_new = 0.5 * _g_norm2(x_new - X, G) + mu * np.abs(f_new)
            short = search & ~(phi_new <= phi + _ARMIJO * t * dphi)
            if not short.any():
                break
            t[short] *= 0.5
            x_new[short] = x_hat[short] + t[short, None] * step[short]
            f_new[short] = disc.value(x_new[short])
        moved = np.sqrt(_g_norm2(x_new - x_hat, G))
        x_hat, f = x_new, f_new
        # f carries the rounding error of its terms: no test can ask for less
        noise = _ROUNDOFF * eps * disc.magnitude(x_hat) / root
        precision = np.maximum(floor, noise)
        converged = ~flat & (moved <= precision) & (np.abs(f) / root <= precision)
        diverged = (flat | beyond) & ~converged
        if np.all(converged):
            break
    return x_hat, n_iter, converged, diverged


def signed_distances(disc, X, y, x_hat, G_inv):
    """Signed distances by eq. (3): |f(x_hat) - q^T d_hat| / ||q||_{G^-1}, positive for
    correctly classified samples."""
    q = disc.gradient(x_hat)
    N = np.einsum("ns,nst,nt->n", q, G_inv, q)
    level = disc.value(x_hat) - np.einsum("ns,ns->n", x_hat - X, q)
    dist = np.abs(level) / np.sqrt(np.maximum(N, _TINY))
    side = np.where(y * disc.value(X) > 0, 1.0, -1.0)
    return side * dist


@dataclass
class InputMargin:
    """What :func:`measure_margin` (and :func:`~muflow.input_margin.input_space_margin`) returns.

    Attributes
    ----------
    projections : ndarray of shape (n, m)
        Estimated projection point x*_i of each sample on the decision boundary.
    distances : ndarray of shape (n,)
        Distance from x_i to x*_i in the metric G_i (eq. 3), negative for misclassified samples.
    margin : float
        The smallest distance.
    converged : ndarray of bool, shape (n,)
        Whether the iteration (12) settled on the boundary for each sample.
    n_iter : int
    diverged : ndarray of bool, shape (n,)
        Samples whose projection found no boundary within reach (see
        :func:`project_onto_boundary`); their distances are those of eq. (3) at the last
        point, not measured ones.
    """

    projections: np.ndarray
    distances: np.ndarray
    margin: float
    converged: np.ndarray
    n_iter: int
    diverged: np.ndarray


def measure_margin(disc: Discriminant, X, y, G_inv, L, x_start=None, *, max_iter=50, tol=1e-9,
                   slow_down=True) -> InputMargin:
    """Project every sample on the boundary of ``disc`` (eq. 12) and measure its signed
    distance there (eq. 3); the margin is the smallest distance.

    Parameters
    ----------
    disc : Discriminant
    X : ndarray of shape (n, m)
    y : ndarray of shape (n,)
        Labels in {-1, +1}, the sign of ``disc`` for a correct classification.
    G_inv, L : ndarray of shape (n, m, m)
        Inverse metric and Cholesky factor of each G_i (:func:`check_metric`).
    x_start, max_iter, tol, slow_down
        As for :func:`project_onto_boundary`.
    """
    x_hat, n_iter, converged, diverged = project_onto_boundary(
        disc, X, G_inv, L, x_start, max_iter=max_iter, tol=tol, slow_down=slow_down)
    dist = signed_distances(disc, X, y, x_hat, G_inv)
    return InputMargin(x_hat, dist, float(dist.min()), converged, n_iter, diverged)
