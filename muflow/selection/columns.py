"""The columns of one kernel setting's batch: labels and upper bounds of each (C, fold,
problem), made for the columns a solve holds.

Column ``(c * folds + f) * P + p`` of a sweep's batch (:mod:`muflow.selection.kernel_solve`)
is binary problem p (:func:`muflow.multiclass.binary_problems`) on the training samples of
fold f at C_c: its labels are those of problem p and its upper bounds ``C_c`` on the
samples it holds, 0 elsewhere (a fold or a pair is a mask, not a copy of K). They are made
from the n x P labels, the n x folds masks and the n x P memberships for the columns a solve
holds (a chain of one fold: its own, :class:`muflow.selection.continuation.ChainState`), so
that the client of a sweep on X partitioned over the workers holds one fold's labels and
bounds at a time, not an n x m copy of each (issue 39).
"""

from __future__ import annotations

import numpy as np


def columns(Y, masks, Cs, member=None, cols=None):
    """Labels and upper bounds of the columns (C, fold, problem), problem fastest.

    Column ``(c * folds + f) * P + p``: labels of binary problem p, ``U = C_c`` on the
    training samples of fold f that belong to problem p (``member``, default all) and 0 on
    the others. ``cols``: those columns only, in that order (default all): a chain of one
    fold holds its own columns, not every fold's (:class:`muflow.selection.continuation.ChainState`).
    """
    n, P = Y.shape
    F = masks.shape[1]
    cols = range(len(Cs) * F * P) if cols is None else cols
    ycols = np.empty((n, len(cols)))
    upper = np.empty_like(ycols)
    for k, j in enumerate(cols):
        c, f, p = j // (F * P), j // P % F, j % P
        held = masks[:, f] if member is None else masks[:, f] & member[:, p]
        ycols[:, k] = Y[:, p]
        upper[:, k] = np.where(held, Cs[c], 0.0)
    return ycols, upper


def labelled(Y, alpha) -> np.ndarray:
    """``y * alpha`` of every column (C, fold, problem) of ``alpha``, its labels those of
    its problem (:func:`columns`), without the n x m labels."""
    P = Y.shape[1]
    coef = np.empty_like(alpha)
    for j in range(alpha.shape[1]):
        np.multiply(Y[:, j % P], alpha[:, j], out=coef[:, j])
    return coef


__all__ = ["columns", "labelled"]
