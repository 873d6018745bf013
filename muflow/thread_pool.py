"""The process's persistent threads: one pool that muflow's parallel passes share, and how
work is dealt out over it.

:func:`run_on_threads` runs parts side by side on the calling thread and the pool's;
:func:`deal` hands pieces to threads as they come free. :func:`begin_dealing` starts the
pool's threads on the pieces and leaves the calling thread free until it joins them
(:meth:`Dealing.join`): the working set's missing rows begin on the other threads while
this one solves the subproblem, and it takes the pieces left once it has solved, so that
no more threads are busy than the budget (:mod:`muflow.threads`) allows.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor


class _Pool:
    """One thread pool per process, made on first use and grown when a caller asks for
    more threads; a forked child makes its own (the parent's threads do not exist there).

    A call from one of the pool's own threads runs its parts in that thread: a part that
    waited on parts queued behind it in the same pool could wait for ever."""

    def __init__(self):
        self._local = threading.local()
        self.forget()

    def forget(self):
        """No pool (a forked child: the parent's threads do not exist here, and its lock
        may have been held by one of them at the fork)."""
        self._lock = threading.Lock()
        self._executor = None
        self._size = 0

    def _mark(self):
        self._local.in_pool = True

    def in_pool(self) -> bool:
        return getattr(self._local, "in_pool", False)

    def executor(self, size: int) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._size < size:
                # the smaller pool is dropped, not shut down: a caller may be submitting to
                # it now; its threads end once it is collected and its queue is empty
                self._executor = ThreadPoolExecutor(size, thread_name_prefix="muflow",
                                                    initializer=self._mark)
                self._size = size
            return self._executor


_POOL = _Pool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.forget)

class Begun:
    """Parts begun on the pool's threads (:func:`begin_on_threads`); part 0 is the caller's,
    run by :meth:`join`, which then waits for the others."""

    def __init__(self, part, futures, after=None):
        self._part = part
        self._futures = futures
        self._after = after
        self._then = []

    def running(self) -> bool:
        """Whether a part begun on another thread has not ended yet (part 0, the caller's,
        runs only at the join)."""
        return any(not future.done() for future in self._futures)

    def then(self, fn) -> "Begun":
        """Call ``fn()`` once the join has ended every part without an error."""
        self._then.append(fn)
        return self

    def join(self) -> None:
        """Run part 0 here, wait for the others, run ``after`` (given to
        :func:`begin_on_threads`) whatever happened, then the :meth:`then` callbacks, or
        raise the first part's exception."""
        error = None
        try:
            if self._part is not None:
                self._part(0)
        except BaseException as exc:  # noqa: BLE001 (re-raised once the others are done)
            error = exc
        for future in self._futures:
            try:
                future.result()
            except BaseException as exc:  # noqa: BLE001
                error = error or exc
        self._part, self._futures = None, []
        if self._after is not None:
            after, self._after = self._after, None
            after()
        if error is not None:
            raise error
        then, self._then = self._then, []
        for fn in then:
            fn()


def begin_on_threads(part, n_parts: int, after=None) -> Begun:
    """``part(1), ..., part(n_parts - 1)`` begun on the process's persistent pool, and
    ``part(0)`` left for the caller's :meth:`Begun.join`. Called from a thread of the pool
    itself, every part runs at the join, one after the other (a part that waited on parts
    queued behind it in the same pool could wait for ever)."""
    n_parts = int(n_parts)
    if n_parts <= 1 or _POOL.in_pool():
        def serial(_):
            for k in range(n_parts):
                part(k)

        return Begun(serial, [], after)
    pool = _POOL.executor(n_parts - 1)
    return Begun(part, [pool.submit(part, k) for k in range(1, n_parts)], after)


def run_on_threads(part, n_parts: int) -> None:
    """``part(0), ..., part(n_parts - 1)`` side by side, on the calling thread and
    ``n_parts - 1`` threads of the process's persistent pool; returns when all have
    finished and raises the first part's exception, if any.

    Called from a thread of the pool itself, the parts run one after the other in it.
    """
    begin_on_threads(part, n_parts).join()


def begin_dealing(piece, n_pieces: int, n_workers: int, after=None) -> Begun:
    """``piece(k, worker)`` for ``k = 0, ..., n_pieces - 1``, each thread taking the next
    piece when it is free: ``n_workers - 1`` threads of the pool begin now, and the caller
    is worker 0 from its :meth:`Begun.join` on, taking the pieces left. A thread that
    shares its core with other work (another process; the caller until it joins) takes
    fewer pieces, where a fixed share would hold up the others until it ends. ``worker``
    (0 to ``n_workers - 1``) names the thread, for its scratch buffers."""
    taken = itertools.count()  # next() on it is atomic under the GIL

    def work(worker):
        for k in iter(taken.__next__, None):
            if k >= n_pieces:
                return
            piece(k, worker)

    return begin_on_threads(work, max(1, min(int(n_workers), int(n_pieces))), after)


def deal(piece, n_pieces: int, n_workers: int) -> None:
    """:func:`begin_dealing` joined at once: every worker takes pieces from the start."""
    begin_dealing(piece, n_pieces, n_workers).join()


__all__ = ["Begun", "begin_dealing", "begin_on_threads", "deal", "run_on_threads"]
