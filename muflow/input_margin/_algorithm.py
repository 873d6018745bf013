"""The maths of the input-space margin (input-space-margin.txt, Akaho): no validation of
user input beyond what the formulas need (see :mod:`muflow.input_margin.estimator`).

The ordinary SVM maximizes the margin in the kernel's feature space. These functions
measure and maximize it where the inputs live, in a metric ``||x - x_i||_{G_i}^2 =
(x - x_i)^T G_i (x - x_i)`` that may differ per sample (section 2).

- :class:`~muflow.input_margin._discriminant.Discriminant`: ``f(x) = sum_i {a_i k(x_hat_i, x) + b_i^T k_x(x_hat_i, x)} + f_0``
  (eq. 2), its gradient, Hessian and ``r = omega . omega``;
- the projection on ``{f = 0}`` (eq. 12, section 3.4) and the margin (eq. 3) live in
  :mod:`muflow.input_margin._projection` (:func:`project_onto_boundary`, :func:`measure_margin`);
- Algorithm 1 (section 3.6), one step at a time: :func:`project_hyperplane` (eq. 18),
  :func:`full_step_problem` (the QP of eq. 8 as a :class:`muflow.solvers.DualProblem`),
  :func:`update_parameters` (eq. 10-11); and the simplified algorithm of section 6
  (:func:`simplified_g`, eq. 22). :func:`run_steps` runs either for a number of steps.

Notation follows the paper: ``p_i = omega . phi(x_hat_i) = f(x_hat_i) - f_0``,
``q_i = omega . psi(x_hat_i) = grad f(x_hat_i)``, ``r = omega . omega``,
``d_hat_i = x_hat_i - x_i``, ``g_i = ||q_i||_{G_i^-1} / sqrt(r)`` (eq. 6).

Estimated and measured margin
-----------------------------
Algorithm 1 estimates the margin of step k by eq. (3) at the projections of its step 1:
``n_projection_iter`` iterations of eq. (12) from the previous step's points (section 3.4,
``x_hat[0] = x_hat_old``); the paper keeps the step with the largest estimate (section 3.6).
:func:`measure_margin` starts eq. (12) from the samples and runs it to convergence. Eq. (3)
is exact at a converged projection (section 3.1): from the same start the two agree (step
0), and no misprint is behind the gap (those found, noted at eq. 10, 12 and 22, vanish for
the Euclidean metric of the simulation). On the 100 runs of the section 4 simulation
(600 steps) the figures agree to 1e-6 in 543 steps; of the 57 others:

- 30: both converge, to different critical points of the distance. Eq. (12) settles on the
  critical point near its start (Proposition 1), and the QP of eq. (8) imposes constraint
  (5) only at the old x_hat_i: the new boundary is pushed away there and may come closer to
  x_i elsewhere. The estimate stays on the piece where (5) was imposed; from x_i the
  measure finds the nearer piece. All 12 such steps with a positive margin are
  overestimates, some several-fold (docs/benchmarks.md, "Input-space margin");
- 23: the 10 iterations stop off the boundary, where eq. (3) is the distance to the
  boundary's linearisation at x_hat, not to the boundary (all in steps with a negative
  margin since the safeguards of :mod:`~muflow.input_margin._projection`);
- 4: the measurement does not settle (misclassified samples, negative margins).

By the estimate 7 runs keep another step than by the measure, and run 20 a step whose
measured margin is below the SVM's. The linearisation of constraint (4) into (5) decides
how far a step gets, not how it is judged. Hence :class:`InputMarginSVC` keeps the step with
the largest measured margin (:attr:`StepTrace.best`), and step 0, the SVM it started from,
unless a later step measured throughout beats it (:func:`reference_margin` when some of
step 0's projections diverged): the step kept is never worse than the start.

Notes
-----
Algorithm 1 holds the (n, n, m, m) array of ``K_xy(x_hat_i, x_hat_j)``: memory scales as
``8 * n^2 * m^2`` bytes (section 3.6, O(m^2 n^2)). Above ``max_bytes`` :func:`check_memory`
refuses unless ``force=True``; the simplified algorithm needs only ``8 * n^2 * m`` bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.input_margin._discriminant import Discriminant
from muflow.input_margin._projection import measure_margin, project_onto_boundary, signed_distances
from muflow.kernel_derivatives import kernel_cross_hessian, kernel_gradient, kernel_value
from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers import DualProblem, DualSolution

#: Default bound on the temporary arrays of Algorithm 1 (bytes).
DEFAULT_MAX_BYTES = 2**30

#: Iterations of eq. (12) at most when a margin is measured (input_space_margin, run_steps).
MEASURE_MAX_ITER = 200


# ---------------------------------------------------------------------------------------
# Metric
# ---------------------------------------------------------------------------------------
def check_metric(metric, n: int, m: int):
    """Validate ``metric`` and return ``(G, G_inv, L)`` per sample, each of shape (n, m, m),
    with ``G_i = L_i L_i^T`` (Cholesky).

    ``None`` is the Euclidean metric; one (m, m) matrix is shared by all samples; an
    (n, m, m) array gives G_i per sample (section 2). Each must be symmetric positive definite.
    """
    if metric is None:
        G = np.broadcast_to(np.eye(m), (n, m, m))
        return G, G, G
    G = np.asarray(metric, dtype=np.float64)
    if G.ndim == 2:
        if G.shape != (m, m):
            raise MuflowInputError(
                f"metric has shape {G.shape}; expected ({m}, {m}) for one matrix shared by all "
                f"samples or ({n}, {m}, {m}) for one per sample"
            )
        G = np.broadcast_to(G, (n, m, m))
    elif G.ndim != 3 or G.shape != (n, m, m):
        raise MuflowInputError(
            f"metric has shape {G.shape}; expected ({m}, {m}) or ({n}, {m}, {m}) "
            "(one symmetric positive definite matrix per sample)"
        )
    if not np.all(np.isfinite(G)):
        raise MuflowInputError("metric contains NaN or infinite values")
    if not np.allclose(G, np.transpose(G, (0, 2, 1)), rtol=1e-10, atol=1e-12 * max(1.0, np.abs(G).max())):
        raise MuflowInputError("metric must be symmetric: G_i = G_i^T for every sample")
    try:
        L = np.linalg.cholesky(G)
    except np.linalg.LinAlgError:
        raise MuflowInputError(
            "metric must be positive definite (every G_i); add a small multiple of the identity"
        ) from None
    return G, np.linalg.inv(G), L


def check_memory(n, n_b, m, max_bytes, force, what):
    """Refuse (unless ``force``) when the (n, n_b, m, m) second derivatives of the kernel
    exceed ``max_bytes`` (section 3.6: O(m^2 n^2) memory); ``what`` names the caller."""
    needed = 8 * n * n_b * m * m
    if needed > max_bytes and not force:
        raise MuflowInputError(
            f"{what} needs about {needed / 2**20:.0f} MiB for the (n, n, m, m) array of second "
            f"kernel derivatives (O(m^2 n^2) memory: n = {n}, m = {m}), above the limit of "
            f"{max_bytes / 2**20:.0f} MiB; raise max_bytes, pass force=True, or use "
            "method='simplified' (O(m n^2))"
        )


# ---------------------------------------------------------------------------------------
# Algorithm 1: the pieces of one step
# ---------------------------------------------------------------------------------------
def project_hyperplane(old: Discriminant, new_centers, X, support) -> Discriminant:
    """Re-express omega_hat on the new bases x_hat_new (section 3.5, eq. 18).

    Least squares over T = {x_i, x_hat_old_i, x_hat_new_i}: find a, b (on the bases in
    ``support``) and f0 minimising ``sum_{x in T} (f_new(x) - f_old(x))^2``; the minimum-norm
    solution when the system is underdetermined.
    """
    kernel = old.kernel
    C = new_centers[support]
    T = np.vstack([X, old.centers, new_centers])
    target = old.value(T)
    n_b, m = C.shape
    design = np.empty((T.shape[0], n_b * (m + 1) + 1))
    design[:, :n_b] = kernel_value(kernel, T, C)
    design[:, n_b:n_b * (m + 1)] = np.transpose(kernel_gradient(kernel, C, T), (1, 0, 2)).reshape(T.shape[0], n_b * m)
    design[:, -1] = 1.0
    coef = np.linalg.lstsq(design, target, rcond=None)[0]
    a = np.zeros(new_centers.shape[0])
    b = np.zeros_like(new_centers)
    a[support] = coef[:n_b]
    b[support] = coef[n_b:n_b * (m + 1)].reshape(n_b, m)
    return Discriminant(kernel, new_centers.copy(), a, b, float(coef[-1]))


@dataclass
class QPStep:
    """The temporaries of one QP step (section 3.3) and the posed problem.

    ``gram[i, j] = z_i . z_j`` with ``z_i = phi_tilde_i - y_i eta_i`` and ``phi_tilde_i =
    phi(x_hat_i) - psi(x_hat_i)^T d_hat_i``, so that ``y_i y_j gram_ij`` is the quadratic form
    of eq. (8): ``y_i y_j s_ij - y_j t_ij - y_i t_ji + u_ij``. The linear term is ``-g_hat``.
    """

    gram: np.ndarray
    g: np.ndarray
    q: np.ndarray
    Gq: np.ndarray
    r: float
    d_hat: np.ndarray
    problem: DualProblem


def full_step_problem(disc: Discriminant, X, y, G_inv, upper, *, identity=False) -> QPStep:
    """Pose the QP of eq. (8) (constraints (9), or (21) with a finite C) as a DualProblem.

    Maximising W(alpha) = sum_i g_i alpha_i - 1/2 sum_ij alpha_i alpha_j (y_i y_j s_ij -
    y_j t_ij - y_i t_ji + u_ij) is minimising 1/2 alpha' Q alpha + p' alpha with
    ``Q = diag(y) K' diag(y)``, ``K'_ij = s_ij - y_i t_ij - y_j t_ji + y_i y_j u_ij`` (the
    Gram matrix of z_i = phi_tilde_i - y_i eta_i, symmetric positive semidefinite) and
    ``p = -g``: muflow's dual with the equality constraint sum_i y_i alpha_i = 0.
    The bias of that dual is f_0 of eq. (11) (constraint (5) holds with equality on the
    support set), so the solver's bias is f_0^(k+1).

    Parameters
    ----------
    disc : Discriminant
        omega_hat and f_0 on the bases x_hat (already projected, eq. 18).
    identity : bool, default=False
        The special case of section 3.2: x_hat_i = x_i, eta_i = 0, g_i = 1. The QP is then
        exactly the ordinary SVM's.
    """
    kernel = disc.kernel
    x_hat = disc.centers
    n = X.shape[0]
    d_hat = x_hat - X
    k = kernel_value(kernel, x_hat, x_hat)
    kx = kernel_gradient(kernel, x_hat, x_hat)  # kx[i, j] = k_x(x_hat_i, x_hat_j)
    Kxy = kernel_cross_hessian(kernel, x_hat, x_hat)
    s = (k + np.einsum("is,ijst,jt->ij", d_hat, Kxy, d_hat)
         - np.einsum("is,ijs->ij", d_hat, kx) - np.einsum("js,jis->ij", d_hat, kx))
    if identity:
        gram = s
        g = np.ones(n)
        q = Gq = np.zeros_like(X)
        r = 1.0
    else:
        q = disc.gradient(x_hat)
        p = disc.value(x_hat) - disc.f0
        r = disc.squared_norm()
        if not r > 0:
            raise MuflowInputError("the discriminant is constant (omega = 0); no margin to maximise")
        Gq = np.einsum("nst,nt->ns", G_inv, q)
        N = np.einsum("ns,ns->n", q, Gq)
        g = np.sqrt(np.maximum(N, 0.0) / r)
        g_safe = np.maximum(g, 1e-12 * max(1.0, g.max()))
        # t_ij = eta_i . phi_tilde_j
        t = (np.einsum("is,ijs->ij", Gq, kx) - np.einsum("is,ijst,jt->ij", Gq, Kxy, d_hat)
             - (N / r)[:, None] * (p - np.einsum("js,js->j", d_hat, q))[None, :]) / (g_safe * r)[:, None]
        # u_ij = eta_i . eta_j
        u = (np.einsum("is,ijst,jt->ij", Gq, Kxy, Gq) - np.outer(N, N) / r) / (np.outer(g_safe, g_safe) * r**2)
        gram = s - y[:, None] * t - y[None, :] * t.T + np.outer(y, y) * u
    gram = 0.5 * (gram + gram.T)
    problem = DualProblem(DenseGram(gram), y, upper=upper, linear=-g, equality=True)
    return QPStep(gram, g, q, Gq, r, d_hat, problem)


def update_parameters(disc: Discriminant, step: QPStep, alpha, bias, y) -> Discriminant:
    """Eq. (10): ``a_i = alpha_i y_i + beta a_hat_i``, ``b_i = -alpha_i (y_i d_hat_i +
    G_i^-1 q_i / (g_i r)) + beta b_hat_i`` with ``beta = sum_j alpha_j ||q_j||^2_{G_j^-1} /
    (g_j r^2)`` (the paper prints G_i^-1 inside the sum for G_j^-1); f_0 from the QP's bias
    (eq. 11)."""
    g_safe = np.maximum(step.g, 1e-12 * max(1.0, step.g.max()))
    N = np.einsum("ns,ns->n", step.q, step.Gq)
    beta = float(np.sum(alpha * N / g_safe) / step.r**2)
    a = alpha * y + beta * disc.a
    b = -alpha[:, None] * (y[:, None] * step.d_hat + step.Gq / (g_safe * step.r)[:, None]) + beta * disc.b
    return Discriminant(disc.kernel, disc.centers.copy(), a, b, float(bias))


def simplified_g(disc: Discriminant, X, G_inv) -> np.ndarray:
    """Eq. (22): ``g_i = ||sum_j a_j k_x(x_i, x_j)||_{G_i^-1} / sqrt(sum_jk a_j a_k k(x_j, x_k))``
    (the paper's ``a_i`` in the numerator is a misprint for ``a_j``)."""
    q = disc.gradient(X)
    N = np.einsum("ns,nst,nt->n", q, G_inv, q)
    r = disc.squared_norm()
    if not r > 0:
        raise MuflowInputError("the discriminant is constant (omega = 0); no margin to maximise")
    return np.sqrt(np.maximum(N, 0.0) / r)


@dataclass
class StepTrace:
    """What :func:`run_steps` returns: one entry per step k = 0..n_steps (fewer when a
    projection left the finite numbers), step 0 being the starting discriminant.

    Attributes
    ----------
    estimates : list of float
        The algorithm's own margin estimate of each step: eq. (3) at the projections of
        step 1, ``n_projection_iter`` iterations of eq. (12) from the previous step's.
    measures : list of InputMargin
        The margin of each step's discriminant measured by :func:`measure_margin`: eq. (12)
        from the samples themselves until it converges, then eq. (3).
    discriminants : list of Discriminant
    projections : list of ndarray of shape (n, m)
        The x_hat of step 1 on each step's boundary (the estimate's points).
    """

    estimates: list
    measures: list
    discriminants: list
    projections: list

    @property
    def measured(self) -> np.ndarray:
        """Measured margins, shape (n_steps + 1,)."""
        return np.array([m.margin for m in self.measures])

    @property
    def settled(self) -> np.ndarray:
        """Whether each step's margin was measured throughout: no projection diverged and
        the margin is finite, shape (n_steps + 1,)."""
        return np.array([not np.any(m.diverged) and np.isfinite(m.margin) for m in self.measures],
                        dtype=bool)

    @property
    def reference(self) -> float:
        """Step 0's margin as a later step must beat it: :func:`reference_margin` of its
        measure."""
        return reference_margin(self.measures[0])

    @property
    def best(self) -> int:
        """The step kept: step 0, the starting SVM, unless a later step's margin was
        measured throughout (:attr:`settled`) and exceeds :attr:`reference`; then the
        largest such margin (the first of equals).

        Step 0 is always a valid fallback, whatever the trust in its measure: its model is
        the SVM the caller started from. A later step is judged only by a measure: eq. (3)
        at a diverged point is no distance (values of -1e149 made margins), so a step with a
        diverged projection never wins. Since the reference is at most 0 when step 0
        misclassifies a sample and otherwise positive, a negative margin never beats a
        positive one.
        """
        measured = self.measured
        better = self.settled & (measured > self.reference)
        better[0] = False
        if not better.any():
            return 0
        return int(np.argmax(np.where(better, measured, -np.inf)))


def reference_margin(measure) -> float:
    """The margin of a starting step (step 0) that a later step must exceed to replace it.

    With every projection settled, the measured margin. Otherwise the smallest distance
    over the samples whose projection settled with a finite distance (``inf`` if none),
    and at most 0 when an unmeasured sample is misclassified (or of unknown side): a
    correctly classified sample whose projection diverged lies where f is flat, far from
    the boundary, and does not set the margin, while a misclassified one makes the true
    margin negative by an unknown amount, so only a step that classifies every sample
    (a positive measured margin) is known to be better.
    """
    dist = measure.distances
    measured = ~measure.diverged & np.isfinite(dist)
    ref = float(dist[measured].min()) if measured.any() else np.inf
    if np.any(~measured & ~(dist > 0)):
        ref = min(ref, 0.0)
    return ref


def run_steps(disc: Discriminant, X, y, G_inv, L, *, upper, method, n_steps, n_projection_iter,
              solve: Callable[[DualProblem, np.ndarray], DualSolution],
              measure_iter=MEASURE_MAX_ITER) -> StepTrace:
    """Algorithm 1 (``method="full"``, section 3.6) or the simplified algorithm of section 6
    (``method="simplified"``) for ``n_steps`` steps from ``disc``, measuring the margin of
    every step.

    Every step first projects the samples on the current boundary (step 1, eq. 12), which
    also estimates the current margin (eq. 3). Algorithm 1 then re-expresses the
    discriminant on the projections (step 2, eq. 18), poses the QP of eq. (8) (step 3) and
    updates a, b and f_0 (eq. 10-11). The simplified algorithm keeps x_hat_i = x_i and
    eta_i = 0 and solves the ordinary SVM's QP with the linear term -g of eq. (22).
    Each step's margin is also measured from the samples (:func:`measure_margin`), the
    figure by which a caller should choose a step (see the module's docstring).

    Parameters
    ----------
    disc : Discriminant
        The starting point (step 0), usually the ordinary SVM's, on the bases X.
    X : ndarray of shape (n, m)
    y : ndarray of shape (n,)
        Labels in {-1, +1}.
    G_inv, L : ndarray of shape (n, m, m)
        From :func:`check_metric`.
    upper : float
        C of constraint (21); ``inf`` for the hard margin of constraint (9).
    method : {"full", "simplified"}
    n_steps : int
    n_projection_iter : int
        Iterations of eq. (12) per step.
    solve : callable
        ``solve(problem, g) -> DualSolution``, a QP step (``g`` scales its tolerance).
    measure_iter : int, default=MEASURE_MAX_ITER
        Iterations of eq. (12) at most for each measurement.
    """
    kernel = disc.kernel
    trace = StepTrace([], [], [], [])
    x_hat = X.copy()
    for k in range(n_steps + 1):
        # Step 1 (and the margin estimate of step k): x_hat by eq. (12) on the current f.
        x_new = project_onto_boundary(disc, X, G_inv, L, x_hat, max_iter=n_projection_iter)[0]
        trace.estimates.append(float(signed_distances(disc, X, y, x_new, G_inv).min()))
        # on the kept bases only, as the fitted model and input_space_margin hold f: the same
        # sums in the same order, so the figures agree to the last bit
        trace.measures.append(measure_margin(disc.compact(), X, y, G_inv, L, max_iter=measure_iter))
        trace.discriminants.append(disc)
        trace.projections.append(x_new)
        if k == n_steps or not np.all(np.isfinite(x_new)):
            break
        if method == "full":
            projected = project_hyperplane(disc, x_new, X, disc.support())  # step 2, eq. (18)
            step = full_step_problem(projected, X, y, G_inv, upper)  # step 3, eq. (8)
            sol = solve(step.problem, step.g)
            disc = update_parameters(projected, step, sol.alpha[:, 0], sol.bias[0], y)  # eq. (10-11)
            x_hat = x_new
        else:
            g = simplified_g(disc, X, G_inv)  # eq. (22)
            problem = DualProblem(DenseGram(kernel.block(X)), y, upper=upper, linear=-g, equality=True)
            sol = solve(problem, g)
            disc = Discriminant(kernel, X.copy(), sol.alpha[:, 0] * y, np.zeros_like(X), float(sol.bias[0]))
    return trace
