"""The working set's selection and libsvm's shrinking over an active set held in this process.

:class:`HostActiveSet` is the part of the working-set loop's state
(:class:`muflow.solvers.working_set_loop.ColumnState`) that the in-process home
(:class:`muflow.solvers.working_set.InProcessState`) and the device home
(:class:`muflow.device.home.DeviceState`) share: the active set's indices, WSS 2 over it
(Fan, Chen & Lin, JMLR 6, 2005, eq. (14)) and libsvm's shrinking and unshrinking (Chang &
Lin 2011, section 5.1). The homes differ only in where the gradient and the cached rows
live.
"""

from __future__ import annotations

import time

import numpy as np

from muflow.solvers._subset_compiled import shrink_mask
from muflow.solvers.working_set_loop import ColumnState, previous_positions, select_working_set


class HostActiveSet(ColumnState):
    """Working-set selection and libsvm's shrinking (Chang & Lin 2011, section 5.1) over an
    active set whose indices, alpha, y and U this process holds: the in-process home's and
    the device's (:class:`muflow.device.home.DeviceState`), which differ only in where the
    gradient and the cached rows live (:meth:`_host_gradient`, :meth:`_second_order`),
    in what a new active set updates (:meth:`_set_active`) and in how the shrink reads the
    rule (:meth:`_drop_leaving`). Needs ``y``, ``alpha``, ``U``,
    ``valid``, ``act``, ``previous``, ``equality``, ``cache``, ``timings`` and the view of
    the last :meth:`extremes`."""

    def _host_gradient(self) -> np.ndarray:
        """G = Q alpha + p of the column, in this process."""
        raise NotImplementedError

    def _set_active(self, act) -> None:
        """The active set is now ``act``."""
        self.act = act

    def _drop_leaving(self, gmax1, gmax2) -> np.ndarray:
        """Drop the active variables that libsvm's rule drops (:func:`shrink_mask`, at the
        extremes ``gmax1``, ``gmax2``) from the active set; returns them."""
        drop = shrink_mask(self.y, self.alpha, self.U, self._host_gradient(), self.act, gmax1,
                           gmax2, self.equality)
        dropped = self.act[drop]
        self._set_active(self.act[~drop])
        return dropped

    def _second_order(self, view, q, pos, slot_i, slot_j) -> np.ndarray:
        """The working set's positions in the active set by second-order selection
        (:func:`muflow.solvers.working_set_loop.select_working_set`), given the cache slots
        of the two maximal violators' rows (-1: not cached)."""
        raise NotImplementedError

    def candidates(self, q: int) -> np.ndarray:
        view, act = self._view, self.act
        pos = previous_positions(act, self.previous)
        if not self.equality:
            return np.sort(act[select_working_set(view, q, pos)])
        # second order: each side by its pair with the other side's maximal violator,
        # whose row the cache holds more often than not (it was in a recent B); when it
        # does not, that side is ranked by its violation alone (first order) and the row
        # comes with B's batch, not in a call of its own
        slot_i, slot_j = self.cache.slot_of[act[view.ku]], self.cache.slot_of[act[view.kl]]
        self.timings["second_order_sides"] += int(slot_i >= 0) + int(slot_j >= 0)
        # sorted: K_BB is then gathered from rows of K in address order
        return np.sort(act[self._second_order(view, q, pos, slot_i, slot_j)])

    def shrink(self) -> None:
        t = time.perf_counter()
        dropped = self._drop_leaving(*self._view.extremes)
        self.cache.retire(dropped)  # their rows' slots go first to the next rows fetched
        self._view = None
        self.timings["max_shrunk"] = max(self.timings.get("max_shrunk", 0), self.shrunk)
        self.timings["shrink"] += time.perf_counter() - t

    @property
    def shrunk(self) -> int:
        return int(self.valid.sum()) - self.act.size

    def reactivate(self) -> None:
        """Every variable active again (their gradient is exact: see the module's notes)."""
        self.cache.unretire()
        self._set_active(np.flatnonzero(self.valid).astype(np.int64))
        self._view = None


__all__ = ["HostActiveSet"]
