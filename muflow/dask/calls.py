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
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


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


def lend(arg):
    """``arg`` in a :class:`Lent` when it is an array (NumPy or SciPy sparse), else itself."""
    return Lent(arg) if isinstance(arg, np.ndarray) or sp.issparse(arg) else arg


class ActorCall:
    """``actor.method(*args)`` with its arrays lent (:class:`Lent`); awaited by
    :func:`answers` (or :meth:`result`), which release them."""

    __slots__ = ("future", "lent")

    def __init__(self, actor, method: str, *args):
        sent = [lend(a) for a in args]
        self.lent = [a for a in sent if isinstance(a, Lent)]
        self.future = getattr(actor, method)(*sent)

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


__all__ = ["ActorCall", "Lent", "answers", "lend"]
