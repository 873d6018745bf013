"""Class probabilities from SVM decision values: Platt scaling fitted by internal
cross-validation, and pairwise coupling for more than two classes, as libsvm does.

- Platt (1999), "Probabilistic outputs for support vector machines", in the numerically
  robust form of Lin, Lin & Weng (2007), "A note on Platt's probabilistic outputs for
  support vector machines" (Machine Learning 68), Algorithm 1: P(y = +1 | f) =
  1 / (1 + exp(A f + B)), A and B minimising the cross-entropy against the smoothed targets
  (N+ + 1) / (N+ + 2) and 1 / (N- + 2), by Newton's method with a backtracking line search.
  libsvm's ``sigmoid_train`` and ``sigmoid_predict``.
- The decision values it is fitted on are out-of-fold: each binary problem's samples are
  shuffled and split into 5 folds, and fold f is predicted by the SVM trained on the other
  four (libsvm's ``svm_binary_svc_probability``). Here every (problem, fold) SVM is one
  column of ONE :class:`muflow.solvers.DualProblem` on the operator of the fit, its
  held-out samples pinned at alpha = 0 by their upper bound (as the sweeps pin a fold).
  The path is the fit's own (:func:`muflow.routing.solves_on_own_samples`): on a stored K
  the columns are solved as one batch and all held-out decision values come from one
  product ``K @ (y * alpha)``, no Gram built again; on rows computed on demand each column
  is solved on K over its problem's samples, the five folds of a problem together sharing
  its rows, or, where the row cache cannot hold them, on K over the fold's training samples
  alone (:func:`muflow.routing.folds_share_rows`,
  :func:`muflow.subproblems.solve_on_own_samples`); its held-out decisions come from
  ``K[held, sv] @ (y * alpha)[sv]`` (:func:`muflow.subproblems.decision_values`), so no
  kernel value outside the column's own samples is computed.
- More than two classes: the pairwise probabilities r_ij are coupled into class
  probabilities by method 2 of Wu, Lin & Weng (2004), "Probability estimates for
  multi-class classification by pairwise coupling" (JMLR 5), eq. (21)-(22): minimise
  sum_i sum_{j != i} (r_ji p_i - r_ij p_j)^2 on the simplex, by libsvm's fixed-point
  iteration (``multiclass_probability``).
"""

from __future__ import annotations

import numpy as np

from muflow.routing import folds_share_rows
from muflow.solvers import DualProblem
from muflow.solvers.rowcache import DEFAULT_CACHE_MB
from muflow.subproblems import decision_values, solve_by_rule

#: libsvm's internal cross-validation folds for the probability model.
FOLDS = 5

#: Pairwise probabilities are kept in [MIN_PROB, 1 - MIN_PROB] (libsvm's min_prob).
MIN_PROB = 1e-7


def sigmoid_train(decision: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """A, B of Platt's sigmoid fitted to ``decision`` values with ``labels`` in {-1, +1}
    (Lin, Lin & Weng 2007, Algorithm 1; libsvm's ``sigmoid_train``)."""
    f = np.asarray(decision, dtype=np.float64)
    positive = np.asarray(labels) > 0
    prior1 = float(positive.sum())
    prior0 = float(f.size - prior1)
    t = np.where(positive, (prior1 + 1.0) / (prior1 + 2.0), 1.0 / (prior0 + 2.0))
    max_iter, min_step, sigma, eps = 100, 1e-10, 1e-12, 1e-5

    def objective(A, B):
        z = f * A + B
        return float(np.sum(np.where(z >= 0, t * z + np.log1p(np.exp(-np.abs(z))),
                                     (t - 1) * z + np.log1p(np.exp(-np.abs(z))))))

    A, B = 0.0, float(np.log((prior0 + 1.0) / (prior1 + 1.0)))
    fval = objective(A, B)
    for _ in range(max_iter):
        z = f * A + B
        e = np.exp(-np.abs(z))
        # p = 1 / (1 + exp(z)), q = 1 - p, both without overflow
        p = np.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))
        q = 1.0 - p
        d2 = p * q
        h11 = sigma + np.dot(f * f, d2)
        h22 = sigma + d2.sum()
        h21 = np.dot(f, d2)
        d1 = t - p
        g1, g2 = np.dot(f, d1), d1.sum()
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            newA, newB = A + step * dA, B + step * dB
            newf = objective(newA, newB)
            if newf < fval + 1e-4 * step * gd:
                A, B, fval = newA, newB, newf
                break
            step /= 2.0
        if step < min_step:  # line search failed: libsvm keeps the last point
            break
    return float(A), float(B)


def sigmoid_predict(decision, A, B) -> np.ndarray:
    """P(y = +1 | f) = 1 / (1 + exp(A f + B)), computed without overflow."""
    z = np.asarray(decision, dtype=np.float64) * A + B
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))


def fold_columns(upper: np.ndarray, rng: np.random.RandomState, folds: int = FOLDS):
    """Membership of the (problem, fold) training sets and their held-out samples.

    Each problem's samples (``upper > 0``) are shuffled by ``rng`` and cut into ``folds``
    consecutive parts (libsvm's split). Returns ``train`` and ``held`` of shape
    (n, n_problems * folds), column ``p * folds + f``.
    """
    n, P = upper.shape
    train = np.zeros((n, P * folds), dtype=bool)
    held = np.zeros_like(train)
    for p in range(P):
        members = np.flatnonzero(upper[:, p] > 0)
        perm = members[rng.permutation(len(members))]
        for f in range(folds):
            part = perm[f * len(perm) // folds:(f + 1) * len(perm) // folds]
            held[part, p * folds + f] = True
            train[members, p * folds + f] = True
            train[part, p * folds + f] = False
    return train, held


def out_of_fold_decisions(operator, Y, upper, solve, *, equality: bool, rng,
                          folds: int = FOLDS, solver: str | None = None,
                          drift=None, cache_mb: float = DEFAULT_CACHE_MB) -> np.ndarray:
    """Decision value of every sample by the SVM of its problem trained without its fold.

    Parameters
    ----------
    operator : GramOperator
        The operator of the fit (all n samples).
    Y, upper : ndarray of shape (n, n_problems)
        Labels and upper bounds of the fitted problems (0 outside a problem).
    solve : callable
        ``solve(problem, init=None, callback=None) -> DualSolution``: the fit's solver with
        its options.
    equality : bool
        The sum constraint (the exact intercept).
    rng : numpy.random.RandomState
    solver : str, optional
        The registered name of ``solve``'s solver: with the operator it decides whether each
        column is solved on its own training samples
        (:func:`muflow.routing.solves_on_own_samples`); None solves one batch.
    drift : ndarray of shape (n,), optional
        Fixed per-sample intercepts (``SVC.fit``'s ``offset``): the linear term
        -(1 - y_i d_i).
    cache_mb : float
        The row cache of a solve: whether a problem's folds share its rows or each is
        solved on its own training samples (:func:`muflow.routing.folds_share_rows`).

    Returns
    -------
    ndarray of shape (n, n_problems)
        Out-of-fold decisions, positive for ``Y = +1``; NaN outside a problem. A fold whose
        training part holds one class only gets +1 or -1 (libsvm's rule), and 0 when empty.
    """
    n, P = Y.shape
    train, held = fold_columns(upper, rng, folds)
    Ycols = np.repeat(Y, folds, axis=1)
    Ucols = np.where(train, np.repeat(upper, folds, axis=1), 0.0)
    has_pos = (train & (Ycols > 0)).any(axis=0)
    has_neg = (train & (Ycols < 0)).any(axis=0)
    solvable = np.flatnonzero(has_pos & has_neg)
    out = np.full((n, P), np.nan)
    decision = np.zeros((n, P * folds))
    if len(solvable):
        y = Ycols[:, solvable]
        linear = -1.0 if drift is None or not np.any(drift) else -1.0 + y * drift[:, None]
        problem = DualProblem(operator, y, upper=Ucols[:, solvable], linear=linear,
                              equality=equality)
        # a column holds its fold's training samples, or its problem's (its held-out part
        # pinned at 0 within) where the folds share the problem's rows
        pair = np.repeat(upper > 0, folds, axis=1)[:, solvable]
        itemsize = getattr(operator, "dtype", np.dtype(np.float64)).itemsize
        share = folds_share_rows(pair.sum(axis=0), cache_mb, itemsize)
        member = np.where(share[None, :], pair, train[:, solvable])
        solution = solve_by_rule(problem, member, solve, solver)
        # each column is its own fold (P=1), scored on its problem's held-out samples
        decision[:, solvable] = decision_values(operator, problem.y * solution.alpha,
                                                solution.bias, train[:, solvable], 1,
                                                held=held[:, solvable])
    one_class = ~(has_pos & has_neg)
    decision[:, one_class] = np.where(has_pos[one_class], 1.0, np.where(has_neg[one_class], -1.0, 0.0))
    for c in range(P * folds):
        rows = held[:, c]
        out[rows, c // folds] = decision[rows, c]
    return out


def fit_platt(operator, Y, upper, solve, *, equality: bool, rng, folds: int = FOLDS,
              solver: str | None = None, drift=None, cache_mb: float = DEFAULT_CACHE_MB):
    """``probA``, ``probB`` (each of shape (n_problems,)): Platt's sigmoid of every problem,
    fitted on its out-of-fold decision values (:func:`out_of_fold_decisions`, which takes
    the other arguments)."""
    decision = out_of_fold_decisions(operator, Y, upper, solve, equality=equality, rng=rng,
                                     folds=folds, solver=solver, drift=drift,
                                     cache_mb=cache_mb)
    A = np.empty(Y.shape[1])
    B = np.empty(Y.shape[1])
    for p in range(Y.shape[1]):
        members = upper[:, p] > 0
        A[p], B[p] = sigmoid_train(decision[members, p], Y[members, p])
    return A, B


def pairwise_coupling(r: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Class probabilities (n, k) from pairwise probabilities ``r`` (n, k, k), r[:, i, j] =
    P(class i | class i or j), r_ji = 1 - r_ij: Wu, Lin & Weng (2004) method 2, libsvm's
    ``multiclass_probability``, vectorised over samples."""
    n, k, _ = r.shape
    max_iter = max(100, k) if max_iter is None else max_iter
    eps = 0.005 / k
    Q = -r.transpose(0, 2, 1) * r  # Q_tj = -r_jt r_tj
    diag = np.einsum("nji,nji->ni", r, r) - np.einsum("nii,nii->ni", r, r)  # sum_{j != t} r_jt^2
    idx = np.arange(k)
    Q[:, idx, idx] = diag
    p = np.full((n, k), 1.0 / k)
    active = np.ones(n, dtype=bool)
    for _ in range(max_iter):
        Qp = np.einsum("ntj,nj->nt", Q, p)
        pQp = np.einsum("nt,nt->n", p, Qp)
        active &= np.max(np.abs(Qp - pQp[:, None]), axis=1) >= eps
        if not active.any():
            break
        a = active
        for t in range(k):
            diff = (-Qp[a, t] + pQp[a]) / Q[a, t, t]
            p[a, t] += diff
            pQp[a] = (pQp[a] + diff * (diff * Q[a, t, t] + 2 * Qp[a, t])) / (1 + diff) / (1 + diff)
            Qp[a] = (Qp[a] + diff[:, None] * Q[a, t, :]) / (1 + diff)[:, None]
            p[a] /= (1 + diff)[:, None]
    return p


def predict_proba_ovo(decision: np.ndarray, probA, probB, n_classes: int) -> np.ndarray:
    """Class probabilities (n, k) from one-vs-one decisions (n, k(k-1)/2), each positive for
    the first class of its pair (libsvm's ``svm_predict_probability``)."""
    from muflow.multiclass import ovo_pairs

    decision = np.asarray(decision, dtype=np.float64)
    pair_p = np.clip(sigmoid_predict(decision, np.asarray(probA)[None, :], np.asarray(probB)[None, :]),
                     MIN_PROB, 1 - MIN_PROB)
    if n_classes == 2:
        return np.column_stack([pair_p[:, 0], 1 - pair_p[:, 0]])
    r = np.zeros((decision.shape[0], n_classes, n_classes))
    for q, (i, j) in enumerate(ovo_pairs(n_classes)):
        r[:, i, j] = pair_p[:, q]
        r[:, j, i] = 1 - pair_p[:, q]
    return pairwise_coupling(r)
