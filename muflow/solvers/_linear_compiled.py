"""Compiled loop of linear dual coordinate descent (the n > d form, primal vector kept;
numba, cached on disk): dense and CSR rows. Driven by :class:`muflow.linear.LinearSVC`."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _beta(v, nonneg, j):
    b = v[j]
    if nonneg[j] and b < 0.0:
        return 0.0
    return b


@njit(cache=True, inline="always")
def _linear_grad_dense(X, y, p, v, nonneg, i, any_nonneg):
    s = 0.0
    if any_nonneg:
        for j in range(X.shape[1]):
            s += X[i, j] * _beta(v, nonneg, j)
    else:
        for j in range(X.shape[1]):
            s += X[i, j] * v[j]
    return y[i] * s + p[i]


@njit(cache=True, inline="always")
def _linear_grad_csr(data, indices, indptr, y, p, v, nonneg, i, any_nonneg):
    s = 0.0
    if any_nonneg:
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * _beta(v, nonneg, indices[k])
    else:
        for k in range(indptr[i], indptr[i + 1]):
            s += data[k] * v[indices[k]]
    return y[i] * s + p[i]


@njit(cache=True, inline="always")
def _xorshift(state):
    x = state[0]
    x ^= (x << np.uint64(13))
    x ^= (x >> np.uint64(7))
    x ^= (x << np.uint64(17))
    state[0] = x
    return x


@njit(cache=True)
def _linear_cd(dense, X, data, indices, indptr, y, p, U, alpha, v, nonneg, QD, tol,
               max_epochs, seed, shrinking, shuffle, out_curve, info):
    """Dual coordinate descent keeping v = sum_i alpha_i y_i x_i (LIBLINEAR, Hsieh et al.
    2008; svm-variants-coordinate-descent.txt eq. (4)).

    The primal vector is beta = v, or, for the nonnegative drifted SVM (eq. (5)-(6)),
    beta_j = max(v_j, 0) on the features flagged ``nonneg``: that is v + rho with rho the
    exact minimiser over rho >= 0 of dual (6), i.e. the paper's rho update
    delta_rho = max(-rho_j, -beta_j) carried out after every alpha step. The gradient of
    the dual in alpha_i is y_i beta' x_i + p_i with p = -(e - dbar) (drifted, sec. 2).

    Stops when the natural KKT residual (muflow.solvers.kkt, no equality) over all samples
    is at most ``tol``, checked whenever the projected gradient of an epoch (over the
    active set) is within ``tol``. ``info`` receives (epochs, violation, updates).
    """
    n = y.shape[0]
    rng = np.empty(1, dtype=np.uint64)
    rng[0] = np.uint64(seed) * np.uint64(2654435761) + np.uint64(88172645463325252)
    any_nonneg = False
    for j in range(nonneg.shape[0]):
        if nonneg[j]:
            any_nonneg = True
    act = np.empty(n, dtype=np.int64)
    n_act = 0
    for i in range(n):
        if U[i] > 0.0:
            act[n_act] = i
            n_act += 1
    n_all = n_act
    pg_max_old = np.inf
    pg_min_old = -np.inf
    violation = np.inf
    updates = 0
    epoch = 0
    F = 0.0
    # F(alpha) = 1/2 ||beta||^2 + p' alpha, evaluated exactly at epoch ends
    while epoch < max_epochs:
        if shuffle:
            for k in range(n_act - 1, 0, -1):
                r = np.int64(_xorshift(rng) % np.uint64(k + 1))
                tmp = act[k]
                act[k] = act[r]
                act[r] = tmp
        pg_max = -np.inf
        pg_min = np.inf
        k = 0
        while k < n_act:
            i = act[k]
            if dense:
                g = _linear_grad_dense(X, y, p, v, nonneg, i, any_nonneg)
            else:
                g = _linear_grad_csr(data, indices, indptr, y, p, v, nonneg, i, any_nonneg)
            pg = 0.0
            if alpha[i] <= 0.0:
                if shrinking and g > pg_max_old:
                    n_act -= 1
                    act[k] = act[n_act]
                    act[n_act] = i
                    continue
                if g < 0.0:
                    pg = g
            elif alpha[i] >= U[i]:
                if shrinking and g < pg_min_old:
                    n_act -= 1
                    act[k] = act[n_act]
                    act[n_act] = i
                    continue
                if g > 0.0:
                    pg = g
            else:
                pg = g
            if pg > pg_max:
                pg_max = pg
            if pg < pg_min:
                pg_min = pg
            if abs(pg) > 1e-14 and QD[i] > 0.0:
                new = alpha[i] - g / QD[i]
                if new < 0.0:
                    new = 0.0
                if new > U[i]:
                    new = U[i]
                d = (new - alpha[i]) * y[i]
                alpha[i] = new
                updates += 1
                if dense:
                    for j in range(X.shape[1]):
                        v[j] += d * X[i, j]
                else:
                    for kk in range(indptr[i], indptr[i + 1]):
                        v[indices[kk]] += d * data[kk]
            k += 1
        epoch += 1
        # objective after this epoch
        F = 0.0
        for j in range(v.shape[0]):
            b = _beta(v, nonneg, j)
            F += 0.5 * b * b
        for i in range(n):
            F += p[i] * alpha[i]
        if epoch < out_curve.shape[0]:
            out_curve[epoch] = F
        if n_act == 0:
            pg_max = 0.0
            pg_min = 0.0
        if max(abs(pg_max), abs(pg_min)) <= tol:
            # full check with the natural residual over every sample
            violation = 0.0
            for i in range(n):
                if U[i] <= 0.0:
                    continue
                if dense:
                    g = _linear_grad_dense(X, y, p, v, nonneg, i, any_nonneg)
                else:
                    g = _linear_grad_csr(data, indices, indptr, y, p, v, nonneg, i, any_nonneg)
                t = alpha[i] - g
                if t < 0.0:
                    t = 0.0
                if t > U[i]:
                    t = U[i]
                r = abs(alpha[i] - t)
                if r > violation:
                    violation = r
            if violation <= tol:
                break
            n_act = n_all
            pg_max_old = np.inf
            pg_min_old = -np.inf
            continue
        pg_max_old = pg_max if pg_max > 0.0 else np.inf
        pg_min_old = pg_min if pg_min < 0.0 else -np.inf
    info[0] = epoch
    info[1] = violation
    info[2] = updates
    return F


def linear_cd(X, y, p, U, alpha, v, nonneg, *, tol, max_epochs, seed, shrinking=True,
              shuffle=True, curve=None):
    """Run :func:`_linear_cd` on dense ``X`` or a scipy CSR matrix; returns (F, info)."""
    import scipy.sparse as sp

    if curve is None:
        curve = np.empty(max_epochs + 1)
    info = np.zeros(3)
    if sp.issparse(X):
        X = X.tocsr()
        dense_X = np.empty((1, 1))
        QD = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        F = _linear_cd(False, dense_X, X.data.astype(np.float64), X.indices.astype(np.int64),
                       X.indptr.astype(np.int64), y, p, U, alpha, v, nonneg, QD, tol,
                       max_epochs, seed, shrinking, shuffle, curve, info)
    else:
        QD = np.einsum("ij,ij->i", X, X)
        empty_f = np.empty(0)
        empty_i = np.zeros(1, dtype=np.int64)
        F = _linear_cd(True, X, empty_f, empty_i, empty_i, y, p, U, alpha, v, nonneg, QD,
                       tol, max_epochs, seed, shrinking, shuffle, curve, info)
    return F, info
