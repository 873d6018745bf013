"""Compiled loop of linear dual coordinate descent (the n > d form, primal vector kept;
numba, cached on disk): dense and CSR rows. Driven by :class:`muflow.linear.LinearSVC`.

The loop is LIBLINEAR's ``solve_l2r_l1l2_svc`` (Hsieh et al. 2008, Algorithm 3): a random
permutation of the active set each epoch, shrinking against last epoch's projected-gradient
range, and a final pass over every sample before stopping. What makes it fast:

- a visit costs one sparse row (dot and axpy) plus a handful of per-sample scalars; the rows
  are visited in random order, so every visit misses the cache. The row and the scalars of
  the visit a few steps ahead are prefetched, which overlaps those misses;
- nothing per epoch is O(n) beyond the shuffle of the active set: the objective is tracked
  incrementally (p'alpha) and only O(d) work is added per epoch when a curve is recorded;
- the bias feature (liblinear's constant feature) is implicit: no copy of X is made.
- dense or CSR rows, with or without the nonnegativity of beta, are chosen at compile time
  (overloads on the argument types): each compiled loop holds only its own branch.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from muflow.solvers._kkt_compiled import residual

_AHEAD = 4  # visits between a prefetch and the use of what it fetched
_PREFETCH_BYTES = 1 << 18  # prefetch only when the active rows take more than this


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint the cache to load ``arr[idx]`` (llvm.prefetch: read, high locality)."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]],
                                       wraparound=False, boundscheck=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, inline="always")
def _xorshift(state):
    x = state[0]
    x ^= (x << np.uint64(13))
    x ^= (x >> np.uint64(7))
    x ^= (x << np.uint64(17))
    state[0] = x
    return x


# Row access, specialised at compile time: ``X`` is a 2-D array (dense rows; the CSR arrays
# are None) or None (CSR rows in data/indices/indptr); ``lo`` is None (beta = v, and w is v
# itself) or the floor of beta (0 on the nonnegative features, -inf elsewhere; w = max(v, lo)
# is kept next to v). One source, and each compiled loop holds only its own branch.

def _row_dot(X, data, indices, indptr, w, i):
    """x_i' w."""


def _row_axpy(X, data, indices, indptr, v, w, lo, i, a):
    """v += a x_i, and w = max(v, lo) on the entries touched."""


def _row_sq(X, data, indptr, i):
    """||x_i||^2."""


def _row_prefetch(X, data, indices, indptr, i):
    """Prefetch the row, one hint per cache line."""


def _row_prefetch_ptr(X, indptr, i):
    """Prefetch the row's start in indptr (CSR)."""


def _row_len(X, indptr, n):
    """Mean number of stored entries per row."""


def _refresh_w(v, w, lo, j0, j1):
    """w = max(v, lo) on [j0, j1)."""


@overload(_row_dot, jit_options={"cache": True})
def _ov_row_dot(X, data, indices, indptr, w, i):
    if isinstance(X, types.NoneType):
        def impl(X, data, indices, indptr, w, i):
            s = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                s += data[k] * w[indices[k]]
            return s
    else:
        def impl(X, data, indices, indptr, w, i):
            s = 0.0
            for j in range(X.shape[1]):
                s += X[i, j] * w[j]
            return s
    return impl


@overload(_row_axpy, jit_options={"cache": True})
def _ov_row_axpy(X, data, indices, indptr, v, w, lo, i, a):
    sparse = isinstance(X, types.NoneType)
    if isinstance(lo, types.NoneType):
        if sparse:
            def impl(X, data, indices, indptr, v, w, lo, i, a):
                for k in range(indptr[i], indptr[i + 1]):
                    v[indices[k]] += a * data[k]
        else:
            def impl(X, data, indices, indptr, v, w, lo, i, a):
                for j in range(X.shape[1]):
                    v[j] += a * X[i, j]
    else:
        if sparse:
            def impl(X, data, indices, indptr, v, w, lo, i, a):
                for k in range(indptr[i], indptr[i + 1]):
                    j = indices[k]
                    t = v[j] + a * data[k]
                    v[j] = t
                    w[j] = max(t, lo[j])
        else:
            def impl(X, data, indices, indptr, v, w, lo, i, a):
                for j in range(X.shape[1]):
                    t = v[j] + a * X[i, j]
                    v[j] = t
                    w[j] = max(t, lo[j])
    return impl


@overload(_row_sq, jit_options={"cache": True})
def _ov_row_sq(X, data, indptr, i):
    if isinstance(X, types.NoneType):
        def impl(X, data, indptr, i):
            s = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                s += data[k] * data[k]
            return s
    else:
        def impl(X, data, indptr, i):
            s = 0.0
            for j in range(X.shape[1]):
                s += X[i, j] * X[i, j]
            return s
    return impl


@overload(_row_prefetch, jit_options={"cache": True})
def _ov_row_prefetch(X, data, indices, indptr, i):
    if isinstance(X, types.NoneType):
        def impl(X, data, indices, indptr, i):
            lo = indptr[i]
            hi = indptr[i + 1]
            k = lo
            while k < hi:
                _prefetch(data, k)
                _prefetch(indices, k)
                k += 8
            if hi > lo:
                _prefetch(data, hi - 1)
    else:
        def impl(X, data, indices, indptr, i):
            row = X[i]
            for j in range(0, row.shape[0], 8):
                _prefetch(row, j)
    return impl


@overload(_row_prefetch_ptr, jit_options={"cache": True})
def _ov_row_prefetch_ptr(X, indptr, i):
    if isinstance(X, types.NoneType):
        def impl(X, indptr, i):
            _prefetch(indptr, i)
    else:
        def impl(X, indptr, i):
            pass
    return impl


@overload(_row_len, jit_options={"cache": True})
def _ov_row_len(X, indptr, n):
    if isinstance(X, types.NoneType):
        def impl(X, indptr, n):
            return (indptr[n] - indptr[0]) / max(n, 1)
    else:
        def impl(X, indptr, n):
            return float(X.shape[1])
    return impl


@overload(_refresh_w, jit_options={"cache": True})
def _ov_refresh_w(v, w, lo, j0, j1):
    if isinstance(lo, types.NoneType):
        def impl(v, w, lo, j0, j1):
            pass
    else:
        def impl(v, w, lo, j0, j1):
            for j in range(j0, j1):
                w[j] = max(v[j], lo[j])
    return impl


@njit(cache=True, inline="always")
def _sq(w):
    s = 0.0
    for j in range(w.shape[0]):
        s += w[j] * w[j]
    return s


@njit(cache=True)
def _violation(X, data, indices, indptr, nfeat, bias, y, p, U, alpha, w):
    """The natural KKT residual (:func:`muflow.solvers._kkt_compiled.residual`, no
    equality) at ``alpha``, the largest over every sample that is not pinned (U_i > 0),
    shrunk or not: the measure of :mod:`muflow.solvers.kkt`."""
    violation = 0.0
    for i in range(y.shape[0]):
        if U[i] <= 0.0:
            continue
        s = _row_dot(X, data, indices, indptr, w, i)
        if bias != 0.0:
            s += bias * w[nfeat]
        r = residual(alpha[i], y[i] * s + p[i], U[i])
        if not r <= violation:  # a NaN residual counts as inf, never as met
            violation = r if r == r else np.inf
    return violation


@njit(cache=True)
def _linear_cd(X, data, indices, indptr, nfeat, bias, y, p, U, alpha, v, w, lo, tol,
               max_epochs, seed, shrinking, shuffle, out_curve, info):
    """Dual coordinate descent keeping v = sum_i alpha_i y_i x_i (LIBLINEAR, Hsieh et al.
    2008; svm-variants-coordinate-descent.txt eq. (4)).

    Rows are ``X[i]`` (dense; data/indices/indptr None) or CSR ``data/indices/indptr`` (X
    None), ``nfeat`` columns, plus the constant feature ``bias`` at position ``nfeat`` when
    bias != 0 (then v has nfeat + 1 entries). ``alpha`` is the start (warm start; clipped to
    [0, U]) and the result; v is recomputed from it here.

    The primal vector is beta = v (``lo`` None; ``w`` is v), or, for the nonnegative drifted
    SVM (eq. (5)-(6)), beta = max(v, lo) with lo_j = 0 on the nonnegative features and -inf
    elsewhere, kept in ``w``: that is v + rho with rho the exact minimiser over rho >= 0 of
    dual (6), i.e. the paper's rho update delta_rho = max(-rho_j, -beta_j) carried out after
    every alpha step. The gradient of the dual in alpha_i is y_i beta' x_i + p_i with
    p = -(e - dbar) (drifted, sec. 2).

    Stops when the natural KKT residual (:func:`_violation`) over all samples is at most
    ``tol``, checked whenever the projected gradient of an epoch (over the active set) is
    within ``tol``, or after ``max_epochs`` epochs. ``out_curve[e]`` receives F after
    epoch e (if it has room); ``info`` receives (epochs, violation, updates), the violation
    measured over every sample at the returned alpha either way (above ``tol`` only when
    the epochs ran out). Returns F(alpha) = 1/2 ||beta||^2 + p' alpha.
    """
    n = y.shape[0]
    nv = v.shape[0]
    rng = np.empty(1, dtype=np.uint64)
    rng[0] = np.uint64(seed) * np.uint64(2654435761) + np.uint64(88172645463325252)
    QD = np.empty(n)
    for j in range(nv):
        v[j] = 0.0
    act = np.empty(n, dtype=np.int64)
    n_act = 0
    pa = 0.0  # p' alpha, kept up to date
    for i in range(n):
        QD[i] = _row_sq(X, data, indptr, i) + bias * bias
        a = alpha[i]
        if a > U[i]:
            a = U[i]
        if a < 0.0:
            a = 0.0
        alpha[i] = a
        if a != 0.0:
            pa += p[i] * a
            _row_axpy(X, data, indices, indptr, v, v, None, i, a * y[i])
            if bias != 0.0:
                v[nfeat] += a * y[i] * bias
        if U[i] > 0.0:
            act[n_act] = i
            n_act += 1
    _refresh_w(v, w, lo, 0, nv)
    n_all = n_act
    # bytes a visit reads, about: the row (value, index) and five per-sample scalars
    row_bytes = 40.0 + 12.0 * _row_len(X, indptr, n)
    pg_max_old = np.inf
    pg_min_old = -np.inf
    violation = np.inf
    updates = 0
    epoch = 0
    while epoch < max_epochs:
        if shuffle:
            for k in range(n_act - 1, 0, -1):
                # uniform in [0, k] by multiply-shift (Lemire; k < 2^32), no division
                r = np.int64(((_xorshift(rng) >> np.uint64(32)) * np.uint64(k + 1))
                             >> np.uint64(32))
                tmp = act[k]
                act[k] = act[r]
                act[r] = tmp
        pg_max = -np.inf
        pg_min = np.inf
        k = 0
        # an active set that stays in cache gains nothing from the hints
        prefetching = n_act * row_bytes > _PREFETCH_BYTES
        while k < n_act:
            if prefetching and k + _AHEAD < n_act:
                # the row and the scalars of a later visit: their cache misses overlap
                # this visit's work
                t = act[k + _AHEAD]
                _row_prefetch(X, data, indices, indptr, t)
                _prefetch(alpha, t)
                _prefetch(U, t)
                _prefetch(QD, t)
                _prefetch(p, t)
                _prefetch(y, t)
                if k + 2 * _AHEAD < n_act:
                    _row_prefetch_ptr(X, indptr, act[k + 2 * _AHEAD])
            i = act[k]
            s = _row_dot(X, data, indices, indptr, w, i)
            if bias != 0.0:
                s += bias * w[nfeat]
            g = y[i] * s + p[i]
            ai = alpha[i]
            pg = 0.0
            if ai <= 0.0:
                if shrinking and g > pg_max_old:
                    n_act -= 1
                    act[k] = act[n_act]
                    act[n_act] = i
                    continue
                if g < 0.0:
                    pg = g
            elif ai >= U[i]:
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
                new = ai - g / QD[i]
                if new < 0.0:
                    new = 0.0
                if new > U[i]:
                    new = U[i]
                alpha[i] = new
                pa += p[i] * (new - ai)
                updates += 1
                a = (new - ai) * y[i]
                _row_axpy(X, data, indices, indptr, v, w, lo, i, a)
                if bias != 0.0:
                    v[nfeat] += a * bias
                    _refresh_w(v, w, lo, nfeat, nfeat + 1)
            k += 1
        epoch += 1
        if epoch < out_curve.shape[0]:
            out_curve[epoch] = pa + 0.5 * _sq(w)
        if n_act == 0:
            pg_max = 0.0
            pg_min = 0.0
        if max(abs(pg_max), abs(pg_min)) <= tol:
            # full check with the natural residual over every sample
            violation = _violation(X, data, indices, indptr, nfeat, bias, y, p, U, alpha, w)
            if violation <= tol:
                break
            n_act = n_all
            pg_max_old = np.inf
            pg_min_old = -np.inf
            continue
        pg_max_old = pg_max if pg_max > 0.0 else np.inf
        pg_min_old = pg_min if pg_min < 0.0 else -np.inf
    if not violation <= tol:
        # out of epochs: the violation at the alpha returned (inf if never checked, or
        # stale from an earlier check)
        violation = _violation(X, data, indices, indptr, nfeat, bias, y, p, U, alpha, w)
    # the objective, exactly
    F = 0.5 * _sq(w)
    for i in range(n):
        F += p[i] * alpha[i]
    info[0] = epoch
    info[1] = violation
    info[2] = updates
    return F


def linear_cd(X, y, p, U, alpha, v, nonneg, *, tol, max_epochs, seed, shrinking=True,
              shuffle=True, curve=None, bias=0.0):
    """Run :func:`_linear_cd` on dense ``X`` (C-contiguous float64) or a scipy CSR matrix
    (float64 data; int32 or int64 indices are used as they are); returns (F, info).

    ``bias`` != 0 appends the constant feature ``bias`` to every row without copying X; v
    then has n_features + 1 entries, the last one the bias weight, and ``nonneg`` as many.
    ``alpha`` holds the start (zeros for a cold start) and receives the solution; ``v``
    receives sum_i alpha_i y_i x_i (beta = v, or max(v, 0) on the ``nonneg`` features).
    ``curve`` (optional) receives F after each epoch.
    """
    import scipy.sparse as sp

    nonneg = np.asarray(nonneg, dtype=bool)
    if nonneg.any():
        lo = np.where(nonneg, 0.0, -np.inf)
        w = np.empty_like(v)
    else:
        lo = None
        w = v
    if curve is None:
        curve = np.empty(0)
    info = np.zeros(3)
    bias = float(bias)
    if sp.issparse(X):
        X = X.tocsr()
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        indptr = X.indptr
        if indptr.dtype != X.indices.dtype:
            indptr = indptr.astype(X.indices.dtype)
        F = _linear_cd(None, np.asarray(X.data, dtype=np.float64), X.indices, indptr,
                       X.shape[1], bias, y, p, U, alpha, v, w, lo, tol, max_epochs, seed,
                       shrinking, shuffle, curve, info)
    else:
        X = np.ascontiguousarray(X, dtype=np.float64)
        F = _linear_cd(X, None, None, None, X.shape[1], bias, y, p, U, alpha, v, w, lo, tol,
                       max_epochs, seed, shrinking, shuffle, curve, info)
    return F, info
