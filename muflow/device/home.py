"""The working-set loop's state on a device: the third home of its seam.

The loop is :mod:`muflow.solvers.working_set_loop`'s (Joachims' decomposition as
ThunderSVM's ``CSMOSolver`` runs it, WSS 2 of Fan, Chen & Lin, JMLR 6, 2005, eq. (14)),
the one that runs in process (:mod:`muflow.solvers.working_set`) and on Dask workers
(:mod:`muflow.dask.working_set`). Here its O(n) state lives in an array module's memory
(a GPU with CuPy): alpha, the gradient G, y, the bounds, X and the row cache's storage
(:class:`DeviceRowCache`). Per outer iteration:

- ``extremes``: the violations of the active set, ``-y G`` on I_up and ``y G`` on I_low
  (:func:`~muflow.solvers.working_set_loop.side_violations`, eq. (9)), computed on the
  device; they come back (two vectors of the active set) and the loop's
  :class:`~muflow.solvers.working_set_loop.PairView` and
  :func:`~muflow.solvers.working_set_loop.select_working_set` rank them in this process.
  The ranking stays on the host because the set it picks depends on how ties are broken:
  at the start every variable of a side violates equally, and a pool cut on the device
  would break those ties otherwise than the in-process home, whose results this one
  reproduces;
- ``subproblem``: the rows of B that the cache lacks computed on the device in one batch
  (:meth:`muflow.device.rows.DeviceRows.rows_into`), K_BB gathered there and brought back
  with G_B (q^2 + q numbers); the q x q SMO (:func:`~muflow.solvers.working_set_loop.solve_subproblem`)
  runs in this process;
- ``apply``: alpha_B scattered to the device and G updated there from the cached rows by
  :func:`muflow.device.kernels.add_rows`.

The cache keeps :class:`~muflow.solvers.rowcache.RowCache`'s bookkeeping (its LRU policy,
slot for slot) in this process and only its storage on the device: the same rows are
cached as in process, so the second-order rule sees the same violators' rows. alpha is
kept in this process too (the loop, callbacks and certificates read it; q values change
per iteration); G comes back once per shrink and per certificate.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.device.arrays import to_host
from muflow.device.kernels import add_rows
from muflow.solvers._working_set_compiled import two_sums
from muflow.solvers.rowcache import DEFAULT_CACHE_MB, RowCache
from muflow.solvers.active_set import HostActiveSet
from muflow.solvers.working_set_loop import (ColumnHome, PairView, projected_gradient,
                                             select_working_set, side_violations)


class DeviceRowCache(RowCache):
    """A :class:`~muflow.solvers.rowcache.RowCache` whose storage (``data``) lives in the
    operator's array module; slots, stamps and evictions are the base class's, here.

    Parameters
    ----------
    operator : DeviceRows
    cache_mb : float
    max_rows, first_rows : int, optional
        As :class:`~muflow.solvers.rowcache.RowCache`'s.
    """

    def __init__(self, operator, cache_mb: float = DEFAULT_CACHE_MB, max_rows: int | None = None,
                 first_rows: int | None = None):
        # the base sizes the slots and lays out the bookkeeping; its host storage is never
        # written (untouched pages cost no memory) and is dropped for the device's
        super().__init__(operator, cache_mb, dtype=operator.dtype, reuse_storage=False,
                         max_rows=max_rows, first_rows=first_rows)
        self.xp = operator.xp
        self.data = self.xp.empty((self.slots, self.n), dtype=self.dtype)

    def release(self) -> None:
        self.data = self.xp.empty((0, self.n), dtype=self.dtype)


class DeviceState(HostActiveSet):
    """One column's state on the device (module notes).

    Parameters
    ----------
    col : Column
    cache : DeviceRowCache
    alpha : ndarray of shape (n,)
        A feasible start (kept in this process and mirrored on the device).
    G : device array of shape (n,)
        Its gradient Q alpha + p, float64.
    QD : ndarray of shape (n,)
        The diagonal of K.
    timings : dict
    """

    def __init__(self, col, cache: DeviceRowCache, alpha, G, QD, timings: dict):
        xp = cache.xp
        self.xp = xp
        self.col = col
        self.y, self.U = col.y, col.U
        self.equality = col.equality
        self.cache = cache
        self.alpha = alpha
        self.alpha_d = xp.asarray(alpha, dtype=xp.float64)
        self.y_d = xp.asarray(col.y, dtype=xp.float64)
        self.U_d = xp.asarray(col.U, dtype=xp.float64)
        self.G_d = G
        self.QD = QD
        self.timings = timings
        self.valid = self.U > 0
        self.previous = np.zeros(0, dtype=np.int64)
        self.F = col.objective(alpha, to_host(G))
        self.bias = 0.0
        self._view = None
        self.reactivate()

    def _set_active(self, act) -> None:
        self.act = act
        self.act_d = self.xp.asarray(act)

    def extremes(self) -> float:
        act, act_d, xp = self.act, self.act_d, self.xp
        if act.size == 0:
            self._view = None
            return -np.inf
        t = time.perf_counter()
        a_d, U_d, g_d = self.alpha_d[act_d], self.U_d[act_d], self.G_d[act_d]
        a, U = self.alpha[act], self.U[act]
        if self.equality:
            _, _, _, v_up, v_low = side_violations(self.y_d[act_d], a_d, U_d, g_d)
            v_up, v_low = to_host(xp.stack([v_up, v_low]))
            self._view = PairView(a, U, v_up=v_up, v_low=v_low)
        else:
            self._view = PairView(a, U, projected=to_host(xp.abs(projected_gradient(a_d, U_d, g_d))))
        self.timings["violations"] += time.perf_counter() - t
        return self._view.gap

    def _second_order(self, view, q, pos, slot_i, slot_j) -> np.ndarray:
        # the in-process home's rule on the same cache contents: the cached violators' rows
        # over the active set come to the host in one copy
        data, act_d = self.cache.data, self.act_d
        rows = [int(s) for s in (slot_i, slot_j) if s >= 0]
        fetched = iter(to_host(data[self.xp.asarray(rows)][:, act_d]) if rows else ())
        row_i = next(fetched) if slot_i >= 0 else None
        row_j = next(fetched) if slot_j >= 0 else None
        return select_working_set(view, q, pos, QD=self.QD[self.act], row_i=row_i, row_j=row_j)

    def subproblem(self, B):
        xp = self.xp
        self.timings["rows_requested"] += len(B)
        self._fresh = self.cache.slot_of[B] < 0
        slots, hits = self.cache.slots_for(B)
        self.timings["cache_hits"] += hits
        t = time.perf_counter()
        self._slots_d = xp.asarray(slots)
        B_d = xp.asarray(B)
        self._B_d = B_d
        K_BB = self.cache.data[self._slots_d[:, None], B_d[None, :]]
        K_BB = np.asarray(to_host(K_BB), dtype=np.float64)
        GB = to_host(self.G_d[B_d])
        self.timings["transfer"] += time.perf_counter() - t
        return K_BB, self.y[B], self.U[B], self.alpha[B].copy(), GB

    def apply(self, B, new, moved, coef, change) -> None:
        xp = self.xp
        self.alpha[B] = new
        self.alpha_d[self._B_d] = xp.asarray(new)
        self.F += change
        t = time.perf_counter()
        # the rows cached before the step, then those computed for it, where both moved
        fresh = self._fresh[moved]
        parts = (~fresh, fresh) if two_sums(fresh) else (slice(None),)
        for part in parts:
            add_rows(xp, self.G_d, self.y_d, self.cache.data,
                     self._slots_d[xp.asarray(moved[part])],
                     xp.asarray(np.ascontiguousarray(coef[part], dtype=np.float64)))
        self.timings["gradient"] += time.perf_counter() - t
        self.previous = np.sort(B)

    def _host_gradient(self) -> np.ndarray:
        return to_host(self.G_d)

    def certify(self) -> float:
        t = time.perf_counter()
        G = to_host(self.G_d)
        self.F = self.col.objective(self.alpha, G)
        violation, self.bias = self.col.kkt(self.alpha, G, self.bias)
        self.timings["kkt"] += time.perf_counter() - t
        return violation

    def gradient(self) -> np.ndarray:
        return np.array(to_host(self.G_d), dtype=np.float64)


class DeviceHome(ColumnHome):
    """Columns whose state lives on the device of a :class:`~muflow.device.rows.DeviceRows`,
    over one :class:`DeviceRowCache` of ``cache_mb`` that the columns share.

    ``timings`` of the solution add "violations" (seconds computing and bringing back the
    active set's violations), "transfer" (K_BB and G_B brought back), "gradient",
    "shrink", "full_gradient" (a warm start's product) and the cache's counters.
    """

    timing_keys = ("gradient", "shrink", "full_gradient", "violations", "transfer")

    def __init__(self, operator, cache_mb=None, max_rows=None, first_rows=None):
        self.operator = operator
        self.xp = operator.xp
        self.cache, self.kept = _row_cache(operator, DEFAULT_CACHE_MB if cache_mb is None
                                           else float(cache_mb), max_rows, first_rows)
        self.QD = operator.diagonal()
        self.gradients = []

    def q_limit(self, q: int) -> int:
        return max(2, min(q, self.cache.slots) // 2 * 2)

    def begin(self, cols, starts, timings, given=None) -> None:
        """G = Q alpha + p of every start on the device: p from zero, the gradient a warm
        start carried, else one product ``K @ V`` on the device for the columns left."""
        xp = self.xp
        timings.update(rows_requested=0, cache_hits=0, second_order_sides=0)
        given = [None] * len(cols) if given is None else given
        self.gradients = [xp.asarray(G if G is not None else col.p, dtype=xp.float64).copy()
                          if G is not None or not np.any(a) else None
                          for col, a, G in zip(cols, starts, given)]
        left = [j for j, G in enumerate(self.gradients) if G is None]
        if not left:
            return
        t = time.perf_counter()
        V = xp.asarray(np.column_stack([cols[j].y * starts[j] for j in left]))
        product = self.operator.product_on_device(V)
        timings["full_gradient"] += time.perf_counter() - t
        for k, j in enumerate(left):
            self.gradients[j] = xp.ascontiguousarray(
                xp.asarray(cols[j].y) * product[:, k] + xp.asarray(cols[j].p))

    def open(self, j, col, alpha, q, timings) -> DeviceState:
        return DeviceState(col, self.cache, alpha, self.gradients[j], self.QD, timings)

    def progress(self, state, timings) -> dict:
        return {"rows_computed": self.cache.rows_fetched,
                "rows_requested": timings["rows_requested"], "cache_hits": timings["cache_hits"],
                "active": int(state.act.size)}

    def finish(self, timings) -> None:
        timings.update(self.cache.stats())
        if not self.kept:
            self.cache.release()
        self.gradients = []


def _row_cache(operator, cache_mb: float, max_rows: int | None = None,
               first_rows: int | None = None):
    """``(cache, kept)``: a fresh :class:`DeviceRowCache` of at most ``max_rows`` rows
    (``first_rows`` at first, grown as in process), or
    the one an operator that keeps its caches holds for ``cache_mb``
    (:func:`muflow.solvers.rowcache.keep_row_cache`: a sweep's fold along its C path), its
    counters reset, as :func:`muflow.solvers.rowcache.row_cache` does in process."""
    kept = getattr(operator, "kept_row_caches", None)
    if kept is None:
        return DeviceRowCache(operator, cache_mb, max_rows, first_rows), False
    cache = kept.get(cache_mb)
    if cache is None:
        cache = kept[cache_mb] = DeviceRowCache(operator, cache_mb)
        cache.kept = True
    cache.fetches, cache.rows_fetched, cache.seconds = 0, 0, 0.0
    return cache, True
