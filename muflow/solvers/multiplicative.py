"""The multiplicative-update family, batched: every column of V advances with one pass over K.

All four rules update alpha_i <- alpha_i * r_i from the two non-negative halves of the
quadratic form, ``P = (Q)+`` and ``N = (Q)-`` (m3-multiplicative-updates-large-margin.txt
eq. (5), with Q = diag(y) K diag(y)), written ``P_i = (P alpha)_i`` and ``N_i = (N alpha)_i``,
and the linear term c (c = -1 for the SVM dual, eq. (29)):

- ``m3``:      r = (-c + sqrt(c^2 + 4 P N)) / (2 P)                           (M3 eq. (12))
- ``munk``:    r = (N + max(-c, 0)) / (P + max(c, 0))                          (munk eq. (7))
- ``seminmf``: r = sqrt((N + max(-c, 0)) / (P + max(c, 0)))        (slides, semiNMF update)
- ``musik``:   r = (N + max(-c, 0) + D alpha) / (P + max(c, 0) + D alpha)  (slides, MUSIK)

For MUNK on a non-negative kernel, P holds the same-class block K(X_A, X_A) and N the
cross-class block K(X_A, X_B), so r is exactly munk eq. (7). The slides leave MUSIK's
diagonal D unspecified; muflow takes D_ii = N_i / alpha_i (the Lee-Seung diagonal bound of
N at the current iterate), the choice for which the auxiliary-function argument of NMF
bounds the signed quadratic form, so the update is ``(2 N + 1) / (P + N)``.

Constraints:

- box 0 <= alpha <= U, clipped: ``min(U, alpha r)`` (M3 eq. (19), munk eq. (8)-(9));
- box, flipped (``m3_flipped``): the change of variables alpha_hat = alpha or U - alpha by
  the sign of the gradient (M3 eq. (20)-(24)) turns the problem into one with labels
  z = s * y and linear term s * (A u + c), on which the M3 update runs (eq. (25)). The signs
  come from the gradient of the previous pass (the pass that computes this iteration's
  products also yields the current gradient), so a flipped iteration still costs one pass;
- sum constraint sum_i y_i alpha_i = 0 (the exact intercept): the linear term becomes
  c + lambda y (eq. (14)-(16)) and lambda is solved at every iteration so that the updated
  alpha satisfies the constraint (eq. (17)); the left side of (17) decreases in lambda
  (Theorem 2: the root is unique), here also with the clipping inside it, so a root finder
  replaces the fixed-point iteration (18): Newton's method on the analytic slope of (17),
  from the previous pass's lambda, safeguarded by a bracket (two or three evaluations of
  the sum as a rule; see ``_equality_compiled``). A sample whose row of K is zero (a zero
  vector under a linear or homogeneous polynomial kernel) has a_i = 0, which Theorem 2
  excludes (footnote 4): its factor jumps from 0 to the bound where its linear term
  crosses zero, and (17) may have no root. lambda then sits on the jump, where that
  sample's term of (14) is flat, and it takes the value that satisfies the constraint.
  For MUNK this lambda is the bias multiplier of the slides (sum_A alpha = sum_B alpha =
  lambda expresses the same constraint); muflow keeps it as a Lagrange multiplier rather
  than rescaling beta = alpha / lambda, which lets the box constraint stay a plain clip.

Safeguard: each pass also yields F at the new iterate. Should a step ever raise F (MUNK's
parallel form and the combination of clipping with the sum constraint carry no monotonicity
proof), the iterate is moved back along the step to the exact minimiser of F on the segment
(one extra pass). Both ends are feasible, so the result is. F therefore never increases.

A hard margin (C = inf) on data that are not separable has no solution: the iterate's
direction certifies it (:mod:`muflow.solvers.unbounded`) and the solver raises.

Degenerate cases (the papers' a_i = 0 or c_i = 0 rows, alpha reaching 0) are guarded:
denominators are floored, the stable form of the quadratic root is used when c > 0, and
alpha is floored at a tiny fraction of its column maximum so that a coefficient can come
back from zero (the papers' "cannot set a variable directly to zero").
"""

from __future__ import annotations

import time

import numpy as np

from muflow.exceptions import MuflowError
from muflow.operators import operand_dtype
from muflow.solvers._compiled import (
    RULE_IDS,
    class_products_summary,
    multiplicative_step,
    objective_rose,
    pass_summary,
    pass_verdict,
    split_by_class,
)
from muflow.solvers._equality_compiled import equality_step
from muflow.solvers.kkt import kkt_violation
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers.unbounded import UNBOUNDED_MESSAGE, check_bounded, hard_margin_scale

RULES = ("m3", "munk", "seminmf", "musik")
_TINY = 1e-300
_RELATIVE_FLOOR = 1e-12
#: Passes between two tests of a hard margin's boundedness (a pass's cost is far above it)
_HARD_MARGIN_EVERY = 8
#: Passes in a row leaving every column above tol exactly as it was (a fixed point): stop
_STALLED_PASSES = 3


class _Products:
    """One pass over K for the current iterate, in the basis of the flip signs s.

    ``s`` is None when no coefficient is flipped (s = 1). On the common path (no flips,
    K >= 0) the pass also summarises the iterate (:meth:`_Constants.summary`, fused with
    the class split of the product): ``summary`` then holds (F, KKT test, max alpha) per
    column, else None.
    """

    def __init__(self, problem: DualProblem, alpha, s, scratch, constants):
        y, U = problem.y, problem.upper
        m = problem.m
        self.s = s
        self.summary = None
        if problem.operator.nonnegative and s is None:
            self._unflipped_nonnegative(problem, alpha, scratch, constants)
            return
        if s is None:
            s = np.ones_like(alpha)  # self.s stays None: the step's no-flip path applies
        flipped = s < 0
        any_flipped = bool(flipped.any())
        z = s * y
        self.w = np.where(flipped, U - alpha, alpha) if any_flipped else alpha
        pos = z > 0
        cols = [self.w * pos, self.w * ~pos]
        u = None
        if any_flipped:
            u = np.where(flipped, U, 0.0)
            cols.append(y * u)
        V = np.concatenate(cols, axis=1)
        op = problem.operator
        if op.nonnegative:
            KV = op.matmul(V)
            Kp, Kn = KV[:, :m], KV[:, m : 2 * m]
            self.P = np.where(pos, Kp, Kn)
            self.N = np.where(pos, Kn, Kp)
            K_zw = Kp - Kn
            K_yu = KV[:, 2 * m :] if u is not None else 0.0
        else:
            Kpos, Kneg = op.matmul_parts(V)
            pp, pn = Kpos[:, :m], Kpos[:, m : 2 * m]
            np_, nn = Kneg[:, :m], Kneg[:, m : 2 * m]
            self.P = np.where(pos, pp + nn, pn + np_)
            self.N = np.where(pos, np_ + pn, nn + pp)
            K_zw = (pp - np_) - (pn - nn)
            K_yu = (Kpos[:, 2 * m :] - Kneg[:, 2 * m :]) if u is not None else 0.0
        # y alpha = z w + y u, so Q alpha = y * K(y alpha)
        self.q_alpha = y * (K_zw + K_yu)
        # linear term in the flipped basis: s * (A u + p)   (M3 eq. (24))
        Au = y * K_yu if u is not None else 0.0
        self.c = s * (Au + problem.linear)

    def _unflipped_nonnegative(self, problem: DualProblem, alpha, scratch, constants):
        """The common case (clipped box, K >= 0) as two fused passes around the product.

        Without flips s = 1, so z = y, w = alpha and c = p, and the general path's
        np.where / concatenate / temporaries over (n, m) arrays reduce to one loop that
        splits alpha by class and one that unpacks K @ V into P, N and Q alpha and
        summarises the iterate.
        """
        y = problem.y
        n, m = alpha.shape
        self.w = alpha
        # in K's precision (a float32 Gram would convert a float64 operand at every product)
        dtype = operand_dtype(problem.operator)
        V = scratch.take((n, 2 * m), dtype)
        split_by_class(alpha, y, V)
        op = problem.operator
        # class_products_summary widens a float32 product as it reads it
        KV = op.matmul_native(V, out=scratch.take((n, 2 * m), dtype))
        self.P = scratch.take((n, m))
        self.N = scratch.take((n, m))
        self.q_alpha = scratch.take((n, m))
        self.summary = constants.summary(alpha, KV, self)
        scratch.give(V, KV)
        self.c = problem.linear


class _Scratch:
    """Work arrays handed back by one pass and handed out again to the next.

    A pass of the unflipped path needs five n x m arrays (the operand, the product, P, N and
    Q alpha); allocated afresh, glibc returns the freed memory to the system and pages it
    back in at the next pass, a page fault per 4 KiB every pass. Only arrays no caller can
    hold go back (never alpha, which the callback receives)."""

    def __init__(self):
        self._free = {}

    def take(self, shape, dtype=np.float64):
        stack = self._free.get((shape, np.dtype(dtype)))
        return stack.pop() if stack else np.empty(shape, dtype=dtype)

    #: Arrays kept of one shape and dtype: as many as one pass takes. A path that takes
    #: none (flips, or a kernel with negative entries) still gives its arrays back; more
    #: would pile up, three n x m arrays a pass, until memory ran out.
    KEEP = 4

    def give(self, *arrays):
        for a in arrays:
            if a is not None and a.flags.c_contiguous and a.flags.owndata:
                stack = self._free.setdefault((a.shape, a.dtype), [])
                if len(stack) < self.KEEP:
                    stack.append(a)


class _Constants:
    """The constant inputs of a solve in the layouts its compiled loops read, made once.

    In the common case every sample of a column has the same bound and linear term (no
    sample weights): then the per-pass summary and the equality-constrained step take
    one value per column, (1, m), and stream neither.
    """

    def __init__(self, problem: DualProblem, tol: float):
        upper, linear = problem.upper, problem.linear
        self.problem = problem
        self.tol = float(tol)
        self.uniform = bool(np.all(upper == upper[:1]) and np.all(linear == linear[:1]))
        self.upper_rows = np.ascontiguousarray(upper[:1]) if self.uniform else upper
        self.linear_rows = np.ascontiguousarray(linear[:1]) if self.uniform else linear

    def summary(self, alpha, KV=None, prod=None):
        """F, the KKT test "violation <= tol" (_kkt_compiled.accumulate) and max alpha per column,
        in one pass; the violation's value and the bias are found once, at the end.

        With ``KV`` (the product of the unflipped class split), the pass also writes
        ``prod``'s P, N and Q alpha (:func:`class_products_summary`); otherwise it reads
        ``prod.q_alpha``.
        """
        problem = self.problem
        m = problem.m
        f = np.empty(m)
        ok = np.empty(m, dtype=np.bool_)
        top = np.empty(m)
        if KV is None:
            pass_summary(alpha, prod.q_alpha, self.linear_rows, problem.y, self.upper_rows,
                         bool(problem.equality), self.tol, f, ok, top)
        else:
            class_products_summary(KV, problem.y, alpha, self.linear_rows, self.upper_rows,
                                   bool(problem.equality), self.tol, prod.P, prod.N,
                                   prod.q_alpha, f, ok, top)
        return f, ok, top


def _full(values, shape) -> np.ndarray:
    """``values`` broadcast to ``shape`` as a C-contiguous, writable float64 array.

    Every array handed to the compiled steps has these flags, so that each step is compiled
    for one signature only (a read-only view, as ``np.broadcast_to`` returns, is another
    type to numba and costs another compilation of every step)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != shape:
        values = np.broadcast_to(values, shape)
    return np.require(values, requirements=("C", "W"))


def _step(rule, prod: _Products, problem: DualProblem, lam, floor, constants):
    """alpha after one update (lambda solved in place when the sum constraint is on)."""
    out = np.empty_like(prod.w)
    y = problem.y
    if prod.s is None and constants.uniform:
        # no flip: s = 1 and the linear term is the problem's (M3 eq. (24) with u = 0)
        c, s, upper, uniform = constants.linear_rows, y, constants.upper_rows, True
    else:
        shape = prod.w.shape
        c = _full(prod.c, shape)
        s = _full(1.0 if prod.s is None else prod.s, shape)
        upper, uniform = _full(problem.upper, shape), False
    if problem.equality:
        equality_step(RULE_IDS[rule], prod.w, prod.P, prod.N, c, y, s, floor, upper, uniform,
                      lam, out)
    else:
        multiplicative_step(RULE_IDS[rule], prod.w, prod.P, prod.N, c, s, floor, upper, uniform,
                            out)
    return out


def _initial_alpha(problem: DualProblem) -> np.ndarray:
    """Equal coefficients per class, balanced so that sum_i y_i alpha_i = 0 (as the papers)."""
    y, U = problem.y, problem.upper
    active = U > 0
    n_pos = np.maximum((active & (y > 0)).sum(axis=0), 1)
    n_neg = np.maximum((active & (y < 0)).sum(axis=0), 1)
    per_class = np.where(y > 0, 1.0 / n_pos, 1.0 / n_neg)
    scale = min(problem.n, 1.0e3) / 2.0
    alpha = per_class * scale
    finite_min = np.where(active & np.isfinite(U), U, np.inf).min(axis=0)
    shrink = np.minimum(1.0, 0.5 * finite_min / np.maximum(alpha.max(axis=0), _TINY))
    return np.where(active, alpha * shrink[None, :], 0.0)


def _rescale(problem, alpha, prod):
    """Scale the starting point by the exact minimiser of F(t alpha) over t.

    Multiplicative factors are invariant to a common scale of alpha (P and N scale with it),
    so a start off by orders of magnitude (polynomial kernels on raw features) would take
    many passes to correct. F(t alpha) = t^2/2 alpha'Q alpha + t p'alpha is minimised in
    closed form from the products already computed; the box caps t. All products scale by
    t, so no extra pass is needed.
    """
    quad = np.einsum("ij,ij->j", alpha, prod.q_alpha)
    lin = np.einsum("ij,ij->j", alpha, problem.linear)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(quad > 0, -lin / quad, 1.0)
        cap = np.where(alpha > 0, problem.upper / alpha, np.inf).min(axis=0)
    t = np.clip(np.nan_to_num(t, nan=1.0, posinf=1.0), 1e-300, np.minimum(cap, 1e300))
    t = np.where(t > 0, t, 1.0)
    prod.w = prod.w * t
    prod.summary = None  # of the unscaled iterate
    prod.P = prod.P * t
    prod.N = prod.N * t
    prod.q_alpha = prod.q_alpha * t
    return alpha * t


def solve_multiplicative(
    problem: DualProblem,
    *,
    rule: str = "m3",
    box: str = "clip",
    init=None,
    tol: float = 1e-3,
    max_iter: int = 10_000,
    callback=None,
    solver_name: str | None = None,
) -> DualSolution:
    """Run one multiplicative rule on every column of ``problem`` until the KKT tolerance.

    Parameters
    ----------
    problem : DualProblem
    rule : {"m3", "munk", "seminmf", "musik"}
    box : {"clip", "flip"}
        How the upper bounds are enforced: clipped (M3 eq. (19)) or flipped (eq. (20)-(25)).
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
        Warm start; coefficients at exactly zero are lifted to the floor.
    tol : float, default=1e-3
        Stop when the KKT violation (:func:`muflow.solvers.kkt.kkt_violation`) of every
        column is at most ``tol``.
    max_iter : int, default=10000
        Passes at most, a pass being one product with K and one multiplicative update of
        every coefficient (0: certify the start only).
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` before the first pass (iteration 0) and
        after every pass; returning True stops.

    Returns
    -------
    DualSolution
        ``n_iter`` counts passes (at most ``max_iter``).
    """
    if rule not in RULES:
        raise ValueError(f"unknown multiplicative rule {rule!r}; choose one of {RULES}")
    if box not in ("clip", "flip"):
        raise ValueError(f"box must be 'clip' or 'flip', got {box!r}")
    t_start = time.perf_counter()
    timings = {"products": 0.0, "updates": 0.0, "kkt": 0.0, "safeguard_passes": 0}
    given, problem = problem, problem.one_sided_pinned()  # lambda would run off to inf there
    U = problem.upper
    m = problem.m
    alpha, bias0 = problem.check_init(init)
    if alpha is None:
        alpha = _initial_alpha(problem)
    lam = np.zeros(m) if bias0 is None else bias0.copy()
    can_flip = (box == "flip") & np.isfinite(U) & (U > 0)
    # the floor per column; sample i's is min(floor_j, U_ij), as the update applies it
    alpha = np.maximum(alpha, np.minimum(_RELATIVE_FLOOR * np.maximum(alpha.max(axis=0), 1e-8), U))
    s = None  # flip signs: none yet
    flipping = bool(can_flip.any())

    scratch = _Scratch()
    constants = _Constants(problem, tol)
    scale = hard_margin_scale(U, problem.operator)  # C = inf: is the dual bounded?

    def products(a):
        """(timed with the summary fused into them on the common path)"""
        t = time.perf_counter()
        p = _Products(problem, a, s, scratch, constants)
        timings["products"] += time.perf_counter() - t
        return p

    def summarize(a, p):
        """:meth:`_Constants.summary` of ``a``, unless its products already made it."""
        if p.summary is not None:
            return p.summary
        t = time.perf_counter()
        summary = constants.summary(a, prod=p)
        timings["kkt"] += time.perf_counter() - t
        return summary

    prod = products(alpha)
    if bias0 is None and init is None:
        alpha = _rescale(problem, alpha, prod)
    objective, satisfied, col_max = summarize(alpha, prod)
    curve = [objective]
    prev = None
    n_iter = stalled = 0
    worse = np.empty(m, dtype=np.bool_)
    floor = np.empty(m)  # per column; sample i's floor is min(floor_j, U_ij) (as the floor of alpha above)
    for iteration in range(max_iter + 1):
        if prev is not None:
            slack = rounding_slack(problem, prod, objective)
            if objective_rose(objective, prev[2], slack, worse):
                alpha, prod, objective = _line_search(problem, prev, alpha, prod, worse, products, slack)
                _, satisfied, col_max = summarize(alpha, prod)
                timings["safeguard_passes"] += 1
            curve.append(objective)
        stalled = _stalled(prev, alpha, satisfied, stalled)
        unbounded, done = pass_verdict(objective, satisfied, col_max, _RELATIVE_FLOOR, floor)
        if unbounded:
            raise MuflowError(UNBOUNDED_MESSAGE)
        if scale is not None and not done and iteration % _HARD_MARGIN_EVERY == 0:
            check_bounded(alpha, prod.q_alpha, problem.linear, U, scale)
        if callback is not None and callback(iteration, alpha, objective):
            break
        if done or iteration == max_iter or stalled >= _STALLED_PASSES:
            break
        t = time.perf_counter()
        new_alpha = _step(rule, prod, problem, lam, floor, constants)
        scratch.give(prod.P, prod.N)  # read by the step only
        prod.P = prod.N = None
        if flipping:
            s = _flip_signs(problem, prod, lam, can_flip)
        timings["updates"] += time.perf_counter() - t
        if prev is not None:  # its products served the last line search; none refer to them
            scratch.give(prev[1].q_alpha)
        prev = (alpha, prod, objective)
        alpha = new_alpha
        prod = products(alpha)
        objective, satisfied, col_max = summarize(alpha, prod)
        n_iter += 1
    return _certified(given, alpha, prod, lam, tol, n_iter, curve, timings, t_start,
                      solver_name or (rule if box == "clip" else f"{rule}_flipped"))


def _stalled(prev, alpha, satisfied, count):
    """``count`` + 1 when the last pass left every column not yet within tol exactly as it
    was, else 0. The next pass starts from the same iterate (lambda aside, which the step
    solves afresh), so such a column cannot progress: the loop stops there, unconverged,
    where it would otherwise run to max_iter (for ever with scikit-learn's -1)."""
    if prev is None:
        return 0
    unchanged = (alpha == prev[0]).all(axis=0)
    return count + 1 if bool(np.all(unchanged | satisfied)) else 0


def _flip_signs(problem, prod, lam, can_flip):
    """The signs of the next pass where the box flips: the sign of the current Lagrangian
    gradient (eq. (20)); None when no sample flips."""
    grad = prod.q_alpha + problem.linear
    lagr = grad + (lam[None, :] * problem.y if problem.equality else 0.0)
    flip = can_flip & (lagr < 0)
    return np.where(flip, -1.0, 1.0) if flip.any() else None


def _certified(problem, alpha, prod, lam, tol, n_iter, curve, timings, t_start, solver):
    """The :class:`DualSolution` of the last iterate, its KKT violation and bias certified
    from the gradient its products give. With the sum constraint an iterate that misses it
    beyond rounding is not converged, and its violation is at least |sum_i y_i alpha_i|."""
    t = time.perf_counter()
    violation, bias = kkt_violation(problem, alpha, prod.q_alpha + problem.linear,
                                    bias_hint=lam if problem.equality else None)
    # V(b) assumes sum_i y_i alpha_i = 0: an iterate off it is no solution, whatever V
    off = np.abs(np.einsum("ij,ij->j", problem.y, alpha)) * bool(problem.equality)
    feasible = off <= 1e-9 * (1.0 + np.abs(alpha).sum(axis=0))
    violation = np.where(feasible, violation, np.maximum(violation, off))
    timings["kkt"] += time.perf_counter() - t
    timings["total"] = time.perf_counter() - t_start
    return DualSolution(alpha=alpha, bias=bias, n_iter=n_iter, objective_curve=np.asarray(curve),
                        kkt_violation=violation, converged=(violation <= tol) & feasible,
                        timings=timings, solver=solver)


def rounding_slack(problem, prod, objective) -> np.ndarray:
    """Per column, how far F computed from the products of ``prod`` may lie from the exact
    F by their rounding: a rise within it is no rise. On a float64 K, 1e-13 of |F|. On a
    float32 K (the products rounded to 2^-24, summed over n terms), F = 1/2 a'Qa + p'a
    carries an error up to about eps sqrt(n) a'|Q|a, with a'|Q|a = sum_i w_i (P_i + N_i)
    from the halves of the product; near the optimum a pass lowers F by less than that,
    and judged on the rounded values every step there looked like a rise: the line search
    put back the previous iterate, whose next step was the same, for ever. The precision is
    the one the operator's products are rounded in (:func:`muflow.operators.operand_dtype`),
    whichever operator: float32 rows on demand round as a float32 Gram in memory does."""
    slack = 1e-13 * np.abs(objective)
    if operand_dtype(problem.operator) == np.float64 or prod.P is None:
        return slack
    n = prod.P.shape[0]
    absolute = np.einsum("ij,ij->j", prod.w, prod.P) + np.einsum("ij,ij->j", prod.w, prod.N)
    return np.maximum(slack, 4.0 * np.finfo(np.float32).eps * np.sqrt(n) * absolute)


def _line_search(problem, prev, alpha, prod, worse, products, slack):
    """Move the columns whose objective rose to the minimiser of F on the step's segment."""
    alpha0, prod0, f0 = prev
    d = alpha - alpha0
    g0 = prod0.q_alpha + problem.linear
    qd = prod.q_alpha - prod0.q_alpha
    slope = np.einsum("ij,ij->j", g0, d)
    curvature = np.einsum("ij,ij->j", d, qd)
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = np.where(curvature > 0, -slope / curvature, 0.0)
    theta = np.clip(np.nan_to_num(theta), 0.0, 1.0)
    theta = np.where(worse, theta, 1.0)
    alpha = alpha0 + theta[None, :] * d
    prod = products(alpha)
    objective = problem.objective(alpha, prod.q_alpha)
    # round-off can still leave a hair above f0: then keep the previous iterate exactly
    still = objective > f0 + slack
    if still.any():
        alpha = np.where(still[None, :], alpha0, alpha)
        prod = products(alpha)
        objective = problem.objective(alpha, prod.q_alpha)
    return alpha, prod, objective
