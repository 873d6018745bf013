"""Multiclass problems as columns of one dual batch, and how their decisions combine.

Two layouts, both posed on the one Gram matrix of all n training samples (every column of a
:class:`muflow.solvers.DualProblem` shares it and every row read from it):

- one-vs-one (libsvm's and scikit-learn's, the default): one column per pair of classes
  (i, j), i < j, in libsvm's order (0,1), (0,2), ..., (0,k-1), (1,2), ... . Its labels are
  +1 for class i and -1 for class j; every sample of another class gets the upper bound 0,
  which pins it at alpha = 0 (as a cross-validation fold pins its held-out samples), so the
  column is exactly the binary SVM of the pair without a copy of its block of K. The
  decision value of the pair is positive for class i, as libsvm's.
- one-vs-rest: one column per class, +1 for the class and -1 for the others.

Two classes are one column in both, +1 for ``classes_[1]`` (scikit-learn's sign).

The combination of pair decisions into class scores is scikit-learn's
(``sklearn.utils.multiclass._ovr_decision_function``): a class's votes plus its summed
confidence squashed into (-1/3, 1/3), so that the score's argmax is the vote winner and ties
in votes go to the class with the larger summed confidence. libsvm's own prediction is the
vote winner, ties to the smallest class index. :func:`ovr_scores` and :func:`vote_winner`
are the one implementation that :class:`muflow.SVC` and the sweeps
(:mod:`muflow.selection.scoring`) both use.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

MULTICLASS = ("ovo", "ovr")


def ovo_pairs(n_classes: int) -> list[tuple[int, int]]:
    """The pairs (i, j), i < j, in libsvm's order."""
    return [(i, j) for i in range(n_classes) for j in range(i + 1, n_classes)]


def n_problems(n_classes: int, multiclass: str = "ovo") -> int:
    """Columns per fit: 1 for two classes, k(k-1)/2 one-vs-one, k one-vs-rest."""
    if n_classes == 2:
        return 1
    return n_classes * (n_classes - 1) // 2 if multiclass == "ovo" else n_classes


def binary_problems(y_encoded: np.ndarray, n_classes: int, multiclass: str = "ovo"):
    """Labels and membership of every binary column, each of shape (n, n_problems).

    Parameters
    ----------
    y_encoded : ndarray of int of shape (n,)
        Class index per sample (0 .. n_classes - 1).
    n_classes : int
    multiclass : {"ovo", "ovr"}, default="ovo"

    Returns
    -------
    Y : ndarray of shape (n, n_problems)
        Labels in {-1, +1}; +1 for samples outside a pair (any sign will do: they are pinned).
    member : ndarray of bool of shape (n, n_problems)
        Whether the sample belongs to the column's problem; the caller multiplies its
        upper bounds by it (0 pins the others at alpha = 0).
    """
    y_encoded = np.asarray(y_encoded)
    n = y_encoded.shape[0]
    if n_classes == 2:
        return np.where(y_encoded == 1, 1.0, -1.0)[:, None], np.ones((n, 1), dtype=bool)
    if multiclass == "ovr":
        Y = np.where(y_encoded[:, None] == np.arange(n_classes)[None, :], 1.0, -1.0)
        return Y, np.ones_like(Y, dtype=bool)
    pairs = np.asarray(ovo_pairs(n_classes))
    first = y_encoded[:, None] == pairs[None, :, 0]
    second = y_encoded[:, None] == pairs[None, :, 1]
    return np.where(second, -1.0, 1.0), first | second


# -- the libsvm layout of the dual coefficients ----------------------------------------
def libsvm_dual_coef(coef: np.ndarray, sv_class: np.ndarray, n_classes: int) -> np.ndarray:
    """Pair columns (n_SV, k(k-1)/2) of y_i alpha_i -> libsvm's (k-1, n_SV) dual_coef_.

    libsvm keeps, for a support vector s of class c, its coefficient in the pair (c, o) in
    row ``o - 1`` when o > c and in row ``o`` when o < c: each support vector has k-1
    coefficients, one per pair it belongs to.
    """
    n_sv = coef.shape[0]
    out = np.zeros((n_classes - 1, n_sv))
    for p, (i, j) in enumerate(ovo_pairs(n_classes)):
        in_i, in_j = sv_class == i, sv_class == j
        out[j - 1, in_i] = coef[in_i, p]
        out[i, in_j] = coef[in_j, p]
    return out


def pair_coefficients(dual_coef, n_support) -> np.ndarray:
    """libsvm's (k-1, n_SV) dual_coef_ -> pair columns (n_SV, k(k-1)/2), the inverse of
    :func:`libsvm_dual_coef`: column p holds the coefficients of pair p's support vectors
    and 0 elsewhere, so that the pair decisions are ``K(X, SV) @ columns + intercept_``."""
    dual = dual_coef.toarray() if sp.issparse(dual_coef) else np.asarray(dual_coef)
    n_support = np.asarray(n_support)
    k = len(n_support)
    start = np.concatenate([[0], np.cumsum(n_support)])
    out = np.zeros((dual.shape[1], k * (k - 1) // 2))
    for p, (i, j) in enumerate(ovo_pairs(k)):
        si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
        out[si, p] = dual[j - 1, si]
        out[sj, p] = dual[i, sj]
    return out


def ovo_coef(dual_coef, n_support, support_vectors):
    """coef_ of a linear one-vs-one model: one row w_p = sum_s coef_sp x_s per pair."""
    W = pair_coefficients(dual_coef, n_support)
    coef = (support_vectors.T @ W).T
    return sp.csr_matrix(coef) if sp.issparse(support_vectors) else np.asarray(coef)


# -- combining the pair decisions ------------------------------------------------------
def ovr_scores(decision: np.ndarray, n_classes: int) -> np.ndarray:
    """Class scores (n, k) from one-vs-one decisions (n, k(k-1)/2), positive for the first
    class of each pair: votes plus the summed confidence mapped to (-1/3, 1/3), as
    scikit-learn's ``_ovr_decision_function(dec < 0, -dec, k)`` (its ovr shape)."""
    decision = np.asarray(decision, dtype=np.float64)
    votes = np.zeros((decision.shape[0], n_classes))
    confidence = np.zeros_like(votes)
    for p, (i, j) in enumerate(ovo_pairs(n_classes)):
        d = decision[:, p]
        confidence[:, i] += d
        confidence[:, j] -= d
        votes[:, i] += d >= 0
        votes[:, j] += d < 0
    return votes + confidence / (3 * (np.abs(confidence) + 1))


def vote_winner(decision: np.ndarray, n_classes: int) -> np.ndarray:
    """libsvm's one-vs-one prediction: the class with most votes (a pair votes for its first
    class when its decision is positive), ties to the smallest class index."""
    decision = np.asarray(decision, dtype=np.float64)
    votes = np.zeros((decision.shape[0], n_classes), dtype=np.int64)
    rows = np.arange(decision.shape[0])
    for p, (i, j) in enumerate(ovo_pairs(n_classes)):
        np.add.at(votes, (rows, np.where(decision[:, p] > 0, i, j)), 1)
    return np.argmax(votes, axis=1)


def predict_index(decision: np.ndarray, n_classes: int, multiclass: str = "ovo",
                  break_ties: bool = False) -> np.ndarray:
    """Class index per sample from the decisions of the binary columns (n, n_problems).

    Two classes: the sign, positive and zero for class 1 (libsvm gives an exact tie to the
    pair's second class, as :func:`vote_winner` does). One-vs-rest: the argmax. One-vs-one:
    the vote winner (libsvm), or with ``break_ties`` the argmax of :func:`ovr_scores`.
    """
    decision = np.asarray(decision)
    if n_classes == 2:
        return (decision.reshape(decision.shape[0], -1)[:, 0] >= 0).astype(np.intp)
    if multiclass == "ovr":
        return np.argmax(decision, axis=1)
    if break_ties:
        return np.argmax(ovr_scores(decision, n_classes), axis=1)
    return vote_winner(decision, n_classes)
