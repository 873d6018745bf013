"""``time_limit``: a fit or a sweep that stops cleanly at a wall-clock deadline.

Every solver takes ``callback(iteration, alpha, objective)`` and stops when it returns True
(:mod:`muflow.solvers.registry`); a :class:`Deadline` is such a callback that answers True
once its seconds have passed. The solver then returns its current iterate, the best so
far (the subset solvers and the multiplicative updates decrease the dual objective at
every step), certified by the common KKT measure as on any other stop. :func:`finish_fit`
turns a stop at the deadline into ``fit_status_ = 1`` and a ``ConvergenceWarning`` that
names the limit and the KKT violation reached.

How soon a solver sees the deadline is its callback cadence: the multiplicative solvers
call back every pass over K, coordinate descent every epoch, the working-set solver every
outer iteration, SMO every :func:`muflow.solvers.smo.callback_interval` pair steps (a
sweep of n steps up to n = 2048, then a fixed amount of work, so that the interval does
not grow with n). A batch of m columns solved one after another (one-vs-one pairs, a
sweep's folds) stops each remaining column at its first call back, so the overrun is at
most m such intervals.

One deadline serves every process of a fit or a sweep (:class:`Deadline`), and it starts
before the solvers' compiled loops are loaded, so their loading counts against it.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import time
import warnings

from sklearn.exceptions import ConvergenceWarning

from muflow.exceptions import MuflowInputError


def check_time_limit(value, name: str = "time_limit") -> float | None:
    """None (no limit) or a positive, finite number of seconds. ``name`` is the option or
    key the user wrote (``--time-limit``, ``sweep.time_limit``), which no limit leaves out:
    None is Python's word, said only for a parameter."""
    if value is None:
        return None
    unlimited = "None" if name.isidentifier() else "left out"
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise MuflowInputError(f"{name} must be a number of seconds or {unlimited}, got "
                               f"{value!r}") from None
    if isinstance(value, bool) or not (seconds > 0 and math.isfinite(seconds)):
        raise MuflowInputError(f"{name} must be a positive number of seconds (or {unlimited} "
                               f"for no limit), got {value!r}")
    return seconds


class Deadline:
    """A solver callback that stops the solver once ``seconds`` have passed since it was
    made; ``stopped`` tells whether it stopped one, in this process or in any process
    forked from it.

    One deadline serves a whole fit or sweep, forked children included (the sweep's chains,
    one-vs-one pairs: :mod:`muflow.forking`): ``end`` is a point on the monotonic clock,
    which a forked child shares, and ``stopped`` lives in a one-byte anonymous shared
    mapping that fork does not copy, so a child's stop is the parent's stop. (A plain
    attribute set in a child was lost with it: a sweep's cut chains read as finished.)
    A copy pickled to another machine keeps its flag to itself.
    """

    def __init__(self, seconds: float, clock=time.monotonic):
        self.seconds = float(seconds)
        self._clock = clock
        self.start = clock()
        self.end = self.start + self.seconds
        self._flag = mmap.mmap(-1, 1)  # MAP_SHARED | MAP_ANONYMOUS: shared across fork

    @property
    def stopped(self) -> bool:
        return self._flag[0] != 0

    @stopped.setter
    def stopped(self, value: bool) -> None:
        self._flag[0] = 1 if value else 0

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_flag"] = self.stopped
        return state

    def __setstate__(self, state):
        stopped = state.pop("_flag")
        self.__dict__.update(state)
        self._flag = mmap.mmap(-1, 1)
        self.stopped = stopped

    @property
    def expired(self) -> bool:
        return self._clock() >= self.end

    @property
    def elapsed(self) -> float:
        return self._clock() - self.start

    def __call__(self, iteration, alpha, objective) -> bool:
        if self._clock() >= self.end:
            self.stopped = True
            return True
        return False


def start(time_limit) -> Deadline | None:
    """A deadline ``time_limit`` seconds from now, or None without a limit."""
    seconds = check_time_limit(time_limit)
    return None if seconds is None else Deadline(seconds)


def chain(*callbacks):
    """One solver callback calling each of ``callbacks`` that is not None, in order (every
    one hears of every iteration: a checkpointer, progress, a :class:`Deadline`); it stops
    the solver when any asks to. None when there is none, the callback itself when one."""
    active = [c for c in callbacks if c is not None]
    if len(active) <= 1:
        return active[0] if active else None

    def call(iteration, alpha, objective):
        return any([c(iteration, alpha, objective) for c in active])

    return call


def bounded(info, deadline: Deadline | None):
    """A registry entry whose ``solve`` stops at ``deadline`` whatever callback it is
    given (the sweep hands it to its solve paths and refits unchanged)."""
    if deadline is None:
        return info
    solve = info.solve

    def bounded_solve(problem, *args, callback=None, **kwargs):
        return solve(problem, *args, callback=chain(callback, deadline), **kwargs)

    bounded_solve.__signature__ = _signature(solve)  # options are read from the signature
    return dataclasses.replace(info, solve=bounded_solve)


def _signature(func):
    import inspect

    return inspect.signature(func)


def finish_fit(model, deadline: Deadline | None, calibrated: bool = False) -> bool:
    """After a fit: a solve stopped at the deadline before meeting ``tol`` sets
    ``fit_status_ = 1`` and warns; so does a deadline that stopped ``probability=True``'s
    calibration folds after the model itself converged (its sigmoid then comes from
    unfinished folds). Returns whether it did."""
    if deadline is None or not deadline.stopped or (model.converged_.all() and not calibrated):
        return False
    model.fit_status_ = 1
    if model.converged_.all():
        warnings.warn(f"time_limit={deadline.seconds:g} s passed (after {deadline.elapsed:.2f} s) "
                      "during probability=True's calibration folds: the model converged, but "
                      "probA_/probB_ come from folds stopped before tol (fit_status_ = 1); "
                      "raise time_limit for a calibrated sigmoid", ConvergenceWarning, stacklevel=3)
        return True
    warnings.warn(time_limit_message(deadline, model.kkt_violation_.max(), model.tol),
                  ConvergenceWarning, stacklevel=3)
    return True


def time_limit_message(deadline: Deadline, violation: float, tol: float) -> str:
    return (f"Solver stopped at time_limit={deadline.seconds:g} s (after {deadline.elapsed:.2f} s) "
            f"with KKT violation {violation:.3e} > tol={tol:g}: the model holds the best "
            "iterate so far (fit_status_ = 1); raise time_limit to let it converge")
