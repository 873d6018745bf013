"""Calls to ``distributed`` actors whose array arguments this process lets go once answered.

An actor's method call (``actor.method(*args)``, ``distributed.actor.Actor.__getattr__``)
keeps its arguments in a coroutine function that refers to itself (it retries itself when
the actor was not yet started): a reference cycle, which only Python's cyclic garbage
collector frees. In a process with many long-lived objects (Dask, Prefect, pandas) that
collector's full passes are rare, so every call's arrays outlived it: on X partitioned over
the workers, the rows X_B of every working-set iteration and the column's slices of y, the
bounds, the linear term and alpha (views that keep the whole vectors), megabytes a minute
that counted in the client's peak memory (issue 39).

:class:`ActorCall` sends each array (NumPy or SciPy sparse) inside a :class:`Lent`, which
pickles as its value (the actor receives the array itself) and is emptied when the answer
is in (:func:`answers`): the cycle then holds an empty shell. The call's future, which
holds the answer, goes then too: the answer lives as long as the caller keeps it.

A call goes straight to the actor's worker on the client's own connection to it
(:class:`DirectCall`) when the client can reach the workers. ``distributed`` sends an
actor's calls through the scheduler unless the client was made with
``direct_to_workers=True``: each call then crosses two connections, and the scheduler
(in this process, with a ``LocalCluster``) serialises it a second time. Whether the client
reaches the workers is asked once per client (:func:`direct_rpc`); a client made with
``direct_to_workers=False`` keeps the scheduler's relay.

Workers in this very process (``LocalCluster(processes=False)``, ``Client(processes=False)``:
``inproc://`` addresses) take a message's objects as they are, unpickled: there an array is
sent as a copy of its own instead (:func:`lend`), what pickling gives a worker elsewhere: the
actor neither receives a :class:`Lent` nor shares memory with the caller's arrays.
"""

from __future__ import annotations

import weakref

import numpy as np
import scipy.sparse as sp

#: Arguments of these exact types travel in the message itself (msgpack), the others as
#: serialised frames of their own (:class:`DirectCall`): a frame each costs its pickling
#: and its share of the message's writes and reads.
_PLAIN = (bool, int, float, str, type(None))

#: Seconds the one probe of a client's connection to a worker may take (:func:`direct_rpc`)
PROBE_SECONDS = 5.0

_REACHES = weakref.WeakKeyDictionary()  # client -> whether it reaches the workers itself


def _value(value):
    """What a :class:`Lent` becomes where it is unpickled: its value."""
    return value


class Lent:
    """An array lent to an actor call: pickled as the array, emptied by :meth:`release`."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return _value, (self.value,)

    def release(self) -> None:
        self.value = None


def lend(arg, in_process: bool = False):
    """``arg`` in a :class:`Lent` when it is an array (NumPy or SciPy sparse), a copy of it
    for an actor ``in_process`` (:func:`in_this_process`: nothing pickles the message),
    else ``arg`` itself."""
    if not (isinstance(arg, np.ndarray) or sp.issparse(arg)):
        return arg
    return arg.copy() if in_process else Lent(arg)


def in_this_process(actor) -> bool:
    """Whether ``actor`` lives on a worker of this process (an ``inproc://`` address), whose
    calls pass their arguments unpickled."""
    return str(getattr(actor, "_address", "") or "").startswith("inproc://")


class ActorCall:
    """``actor.method(*args)`` with its arrays lent (:class:`Lent`); awaited by
    :func:`answers` (or :meth:`result`), which release them."""

    __slots__ = ("future", "lent")

    def __init__(self, actor, method: str, *args):
        in_process = in_this_process(actor)
        sent = [lend(a, in_process) for a in args]
        self.lent = [a for a in sent if isinstance(a, Lent)]
        rpc = direct_rpc(actor)
        if rpc is None:
            self.future = getattr(actor, method)(*sent)
        else:
            self.future = DirectCall(actor._client, rpc, actor.key, method, sent)

    async def _result(self):
        return await self.future._result()

    def result(self, timeout=None):
        """The answer (``ActorFuture.result``); the arrays are released once it is in, or
        the call failed (a ``TimeoutError`` leaves the call waiting, and them lent)."""
        try:
            answer = self.future.result(timeout=timeout)
        except TimeoutError:
            raise
        except BaseException:
            self.release()
            raise
        self.release()
        return answer

    def release(self) -> None:
        """Let go of the arrays sent (the call is answered: nothing reads them again) and of
        the future, which holds the answer (the caller holds it as long as it needs it)."""
        for lent in self.lent:
            lent.release()
        self.lent = []
        self.future = None


class DirectCall:
    """``method(*args)`` of the actor ``key``, sent on ``rpc``, the client's connection to
    the actor's worker, as ``distributed``'s own actor calls are made on a worker (the
    worker's ``actor_execute`` handler): begun on the client's event loop at once, awaited
    by :meth:`_result` or :meth:`result`. An error the method raised is raised here."""

    __slots__ = ("_future",)

    def __init__(self, client, rpc, key, method: str, args):
        import asyncio

        from distributed.protocol import to_serialize

        async def call():
            response = await rpc.actor_execute(function=method, actor=key,
                                               args=[a if type(a) in _PLAIN else to_serialize(a)
                                                     for a in args], kwargs={})
            if response["status"] == "OK":
                return response["result"]
            raise response["exception"]

        self._future = asyncio.run_coroutine_threadsafe(call(), client.loop.asyncio_loop)

    async def _result(self):
        import asyncio

        return await asyncio.wrap_future(self._future)

    def result(self, timeout=None):
        return self._future.result(timeout)


def direct_rpc(actor):
    """The client's connection to ``actor``'s worker, or None where the call goes through
    the scheduler: a client made with ``direct_to_workers=False`` or asynchronous, an actor
    handle without its client, or a client that could not reach a worker when first asked
    (a worker's ``identity``, at most :data:`PROBE_SECONDS`; asked once per client)."""
    client = getattr(actor, "_client", None)
    address = getattr(actor, "_address", None)
    if client is None or address is None or client.direct_to_workers is False \
            or client.asynchronous:
        return None
    reaches = _REACHES.get(client)
    if reaches is None:
        reaches = _REACHES[client] = _reaches(client, address)
    return client.rpc(address) if reaches else None


def _reaches(client, address) -> bool:
    """Whether ``client`` can open a connection of its own to the worker at ``address``."""

    async def identity():
        await client.rpc(address).identity()

    try:
        client.sync(identity, callback_timeout=PROBE_SECONDS)
    except Exception:  # noqa: BLE001  any failure to connect: the scheduler relays the calls
        return False
    return True


class LostPartitions(Exception):
    """Actor calls failed because their workers are gone (partition indices)."""

    def __init__(self, lost):
        super().__init__(f"partitions {lost} lost with their workers")
        self.lost = lost


def method_error(error, actor, client) -> bool:
    """Whether an actor call failed by an error of its method (the caller raises it as it
    is) rather than by its worker's loss (the caller starts the actor again elsewhere): the
    errors of bad input at once; any other error but a closed connection, a cancelled call
    or memory running out, while the actor's worker is still listed by the scheduler. An
    IndexError of a bug was taken for a lost worker: the partitions were started again four
    times, then the fit was refused with "the workers died ... most likely out of memory"."""
    import asyncio
    import concurrent.futures

    from muflow.dask.scheduler_workers import scheduler_workers
    from muflow.exceptions import MuflowInputError

    if isinstance(error, (ValueError, TypeError, MuflowInputError)):
        return True
    lost = (OSError, MemoryError, asyncio.CancelledError, concurrent.futures.CancelledError)
    if not isinstance(error, Exception) or isinstance(error, lost):
        return False
    address = getattr(actor, "_address", None)
    try:
        return address is not None and address in scheduler_workers(client)
    except Exception:  # noqa: BLE001  (the scheduler does not answer: taken for lost)
        return False


async def answers(calls) -> list:
    """Every call's answer, or the exception it raised; then their arrays released."""
    import asyncio

    try:
        return list(await asyncio.gather(*(call._result() for call in calls), return_exceptions=True))
    finally:
        for call in calls:
            release = getattr(call, "release", None)
            if release is not None:
                release()


__all__ = ["ActorCall", "DirectCall", "Lent", "LostPartitions", "answers", "direct_rpc",
           "in_this_process", "lend", "method_error"]
