"""SIGINT and SIGTERM to a muflow command: stop soon, say so in one line, leave nothing running.

A batch scheduler or a container stop sends SIGTERM, whose default action ends the process
at once: no ``finally`` runs, and the forked children, the Dask cluster and the temporary
Prefect server were left behind. :func:`stop_on_signals` turns SIGTERM, as Python turns
SIGINT, into an exception (:class:`Stopped`, a ``KeyboardInterrupt``) raised in the main
thread, so that every ``finally`` and context manager on the way out runs: the fork pool
kills its children (:func:`muflow.forking.forked_map`), the cluster closes, the server
stops. Once the first signal arrived, further ones are ignored, so that a second Ctrl-C
does not cut that cleanup short. What finished is kept, since every output is written
atomically as it finishes.

Processes that must not outlive the command whatever happens to it (a SIGKILL included)
are tied to it by the kernel as well (``PR_SET_PDEATHSIG``: :func:`muflow.forking.die_with_parent`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

#: The signals a command stops on.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """Raised in the main thread when the command got SIGINT or SIGTERM (``signum``)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def signal_name(exc: BaseException) -> str:
    """The signal a ``KeyboardInterrupt`` stands for: a :class:`Stopped`'s, else SIGINT."""
    return exc.name if isinstance(exc, Stopped) else "SIGINT"


def exit_code(exc: BaseException) -> int:
    """The shell's code for a process ended by the signal: 128 + its number."""
    return 128 + (exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT))


#: The signal that stopped this process (:func:`stop_on_signals`), or None.
received: int | None = None


def _raise_stopped(signum, frame):
    global received
    received = int(signum)
    for s in STOP_SIGNALS:  # the cleanup the exception starts runs to its end
        signal.signal(s, _raise_dropped)
    raise Stopped(signum)


#: A :class:`Stopped` was dropped where Python drops exceptions (:func:`_unraisable`).
_dropped = False


def _raise_dropped(signum, frame):
    """The handler after the first signal: further signals are ignored, except the one
    :func:`_unraisable` sends again for a :class:`Stopped` that was dropped."""
    global _dropped
    if _dropped:
        _dropped = False
        raise Stopped(received or signum)


def _unraisable(unraisable) -> None:
    """``sys.unraisablehook`` within :func:`stop_on_signals`. A signal's :class:`Stopped`
    can land where Python prints an exception and drops it: an at-fork callback (logging's
    lock release around the fork of a sweep's chains), a finalizer. The stop would be
    lost and the command run on, deaf to further signals. Instead, the signal is sent
    again a moment later from another thread (sent from here, it would be raised in here),
    to be raised at the main thread's next step; dropped again, it is sent again."""
    global _dropped, _again
    if isinstance(unraisable.exc_value, Stopped):
        _dropped = True
        _again = threading.Timer(0.01, os.kill, (os.getpid(), unraisable.exc_value.signum))
        _again.daemon = True
        _again.start()
        return
    _previous_unraisable(unraisable)


_previous_unraisable = sys.unraisablehook
_again = None


@contextlib.contextmanager
def stop_on_signals():
    """Within the context, SIGINT and SIGTERM raise :class:`Stopped` in the main thread
    (elsewhere, a thread that cannot install handlers, nothing changes); the previous
    handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _previous_unraisable, _dropped
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, _raise_stopped)
    _previous_unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        yield
    finally:
        if _again is not None:  # a signal sent again reaches the handler above, not after
            _again.cancel()
            _again.join()
        sys.unraisablehook = _previous_unraisable
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    if _dropped:  # the block ended before the signal sent again came: the stop is raised here
        _dropped = False
        raise Stopped(received)


@contextlib.contextmanager
def sigint_ignored():
    """SIGINT ignored while processes are started in the context: they inherit the
    disposition (across ``exec`` as well, and Python then keeps it), so a Ctrl-C to the
    terminal's process group reaches this process alone, which stops them in order. The
    Dask workers of a LocalCluster printed a KeyboardInterrupt traceback each."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        # a Ctrl-C that came meanwhile was dropped; the caller's work goes on


def exit_now(code: int) -> None:
    """End a process that a signal stopped, once its cleanup ran and its line is printed:
    log handlers and standard streams flushed, then ``os._exit``. The interpreter's own
    exit (atexit hooks of Prefect and Dask whose servers are gone, thread pools, module
    teardown) would wait on what the run has already stopped."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


__all__ = ["STOP_SIGNALS", "Stopped", "exit_code", "exit_now", "received", "signal_name",
           "sigint_ignored", "stop_on_signals"]
