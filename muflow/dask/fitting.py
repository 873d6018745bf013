"""Fitting on a Dask cluster from the estimator's side: a whole small fit on one worker, and
the fitted rows of X that stay on the workers.

:func:`fit_on_one_worker` runs a fit of at most :data:`muflow.routing.ONE_TASK_MAX_SAMPLES`
samples whole on one worker (:func:`muflow.routing.fits_as_one_task`), through an actor
(:class:`_Fitter`) that stays on its worker between fits, one per client (:data:`_FITTERS`):
a round trip per fit instead of one per solver iteration. :class:`RowsOnWorkers` reads the
support vectors of a fit whose X never left the workers. The estimator itself
(:mod:`muflow.model`) is handed in, not imported: this module is its plumbing.
"""

from __future__ import annotations

import collections
import time
import uuid

import scipy.sparse as sp

from muflow.dask.calls import ActorCall
from muflow.dask.scheduler_workers import require_workers
from muflow.dask.worker_memory import reuse_freed_memory


def fit_on_one_worker(estimator, client, X, y, sample_weight, offset):
    """``estimator`` (unfitted, its ``client`` cleared) fitted on one of ``client``'s
    workers next to its data; returns the fitted copy and the seconds the call took.

    ``client`` is a Client or a scheduler address (connected here and closed after). A call
    whose actor or worker is lost (not the fit: its errors pass through as raised) is made
    once more on a new actor; a lost scheduler raises
    :func:`muflow.exceptions.lost_scheduler_error`.
    """
    from muflow.exceptions import lost_scheduler_error

    owned = isinstance(client, str)
    if owned:
        from muflow.dask.cluster import connect

        client = connect(client)
    t0 = time.perf_counter()
    try:
        for attempt in (0, 1):
            try:
                fitted = _fitter_on(client).fit(estimator, X, y, sample_weight, offset)
                break
            except (OSError, _LostFit):  # the actor or its worker is gone, not the fit
                if getattr(client, "status", "running") != "running":
                    raise lost_scheduler_error(client) from None
                _FITTERS.pop(client, None)  # a new actor, once
                if attempt:
                    raise
    finally:
        if owned:
            _FITTERS.pop(client, None)
            client.close()
    return fitted, time.perf_counter() - t0


class _Fitter:
    """Actor on one worker that runs :func:`fit_on_one_worker`'s fits in process: a
    call goes from the client to the worker directly (no scheduler, no task), so a small fit
    pays one round trip and no task's scheduling. ``calls`` says which
    fits it has begun and which it has ended, for :meth:`_FitterOn.fit` to tell a fit still
    at work from a call or reply that was lost."""

    def __init__(self):
        reuse_freed_memory()  # the fits' temporaries reuse freed memory (worker_memory)
        self.running = set()
        self.ended = collections.deque(maxlen=64)

    @property
    def calls(self) -> tuple[set, list]:
        return set(self.running), list(self.ended)

    def fit(self, token, estimator, X, y, sample_weight, offset):
        """``estimator`` (unfitted, without a client) fitted here, in the worker's process."""
        self.running.add(token)
        try:
            return estimator.fit(X, y, sample_weight=sample_weight, offset=offset)
        finally:
            self.running.discard(token)
            self.ended.append(token)


class _LostFit(RuntimeError):
    """A call to a :class:`_Fitter` that will never answer: its actor or the reply is gone."""


#: How often a wait for a :class:`_Fitter` looks whether its call is still alive, and how
#: long a call may be neither running on the worker nor answered (in transit: at most
#: :data:`muflow.routing.ONE_TASK_MAX_SAMPLES` rows each way) before it counts as lost.
FITTER_POLL_S = 1.0
FITTER_LOST_S = 30.0


class _FitterOn:
    """A :class:`_Fitter` on one of ``client``'s workers, with the future that keeps it.

    Notes
    -----
    distributed's actors have two traps that hung a small fit forever (seen with a cold
    numba cache, which changes the timing). An actor binds its calls to the *current*
    client (``get_client()``), which for a client made with ``set_as_default=False``, as
    :func:`muflow.dask.cluster.connect` makes them, is another client or none; and an actor lives
    only as long as a client holds its future, so dropping the future of ``submit`` frees it
    on its worker. A call that reaches the worker after that fails there with a KeyError,
    which ``Actor`` drops in a callback without setting its ``ActorFuture``: ``result()``
    waits forever. Here the actor is read under ``client.as_current()`` and its future is
    kept; a wait looks every :data:`FITTER_POLL_S` whether the call is still alive, so
    that whatever else loses a call raises :class:`_LostFit` instead of hanging.
    """

    def __init__(self, client):
        require_workers(client)  # an actor for no worker waits forever
        self.future = client.submit(_Fitter, actor=True, pure=False)
        with client.as_current():
            self.actor = self.future.result()

    def fit(self, estimator, X, y, sample_weight, offset):
        """``estimator`` fitted on the worker; the fit's own errors pass through as raised."""
        token = uuid.uuid4().hex
        call = ActorCall(self.actor, "fit", token, estimator, X, y, sample_weight, offset)
        try:
            quiet = 0.0
            while True:
                try:
                    return call.result(timeout=FITTER_POLL_S)
                except TimeoutError:
                    pass
                if self.future.status != "finished":
                    raise _LostFit(f"the fit's actor is {self.future.status}")
                try:
                    running, ended = self.actor.calls
                except OSError:
                    raise
                except Exception as exc:  # the actor is no longer on its worker
                    raise _LostFit(f"the fit's actor cannot be read: {exc!r}") from exc
                # a call queued behind another one on the actor's thread has not begun yet
                quiet = 0.0 if token in running or (running and token not in ended) else quiet + FITTER_POLL_S
                if quiet >= FITTER_LOST_S:
                    where = "its reply" if token in ended else "the call"
                    raise _LostFit(f"{where} was lost: nothing came back in {FITTER_LOST_S:g} s")
        finally:
            call.release()  # a lost call's arrays too


#: One :class:`_FitterOn` per client, started by the first small fit (a client that closes
#: drops its own).
_FITTERS: dict = {}


def _fitter_on(client) -> _FitterOn:
    for other in [c for c in _FITTERS if c.status in ("closing", "closed")]:
        _FITTERS.pop(other, None)
    fitter = _FITTERS.get(client)
    if fitter is None:
        fitter = _FITTERS[client] = _FitterOn(client)
    return fitter


class RowsOnWorkers:
    """Rows of X that live on the workers, as :meth:`muflow.SVC._set_fitted` reads them:
    ``X[support]`` fetched from their partitions (the operator's ``take``), and whether X
    is sparse, from the type of the dask array's chunks (its ``_meta``), so that the model
    predicts on sparse input as one fitted on a CSR matrix."""

    def __init__(self, operator, X):
        self.operator = operator
        self.shape = tuple(X.shape)
        self.sparse = sp.issparse(X._meta)

    def __getitem__(self, idx):
        return self.operator.take(idx)

