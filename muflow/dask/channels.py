"""Direct connections from the client to its partitions, for the working-set loop's calls.

A ``distributed`` actor call, even straight to the actor's worker
(:class:`muflow.dask.calls.DirectCall`), hands the call from the caller's thread to the
client's event loop, from the worker's event loop to the actor's thread and back again
each way. Every hand-off waits for its thread to be scheduled, and the loops' CPU time
takes cores from the workers: the working-set loop makes one call to every partition per
outer iteration, hundreds a fit, and on a few cores those hand-offs and that time were a
large part of the iteration that does not shrink with more workers (docs/dask.md gives
the figures).

A channel is one TCP connection from the client to one partition, served by a thread of
the partition's own (:class:`ChannelServer`): the caller's thread writes the request, the
partition's thread reads it, runs the method and writes the answer, which the caller's
thread reads. Nothing else runs in between.

- **Opened** by the partition on its worker's own interface, on a port of the system's
  choosing, when the client asks through ``distributed`` (:func:`serve`); the partition
  answers the port and a secret of :data:`KEY_BYTES` random bytes, so the channel is as
  protected as the cluster's own calls. Both ends prove they hold the secret (an HMAC of
  the other's random challenge) before anything is unpickled.
- **Used** only for workers at ``tcp://`` addresses of a client that does not require
  encryption (a TLS cluster keeps ``distributed``'s calls) and when
  ``MUFLOW_DASK_CHANNELS`` is not ``0`` (:func:`channels_wanted`). A partition whose
  channel cannot be opened within :data:`CONNECT_SECONDS` keeps ``distributed``'s calls.
- **Messages**: a request is the pickled ``(method, args)``, an answer the pickled
  ``("ok", value)`` or ``("error", exception)``, each framed by its length. The partition
  runs the requests one after the other, in the order they came, and answers each; the
  client may send a request before the last is answered (the partition then starts it the
  moment it has answered the last: no round trip between them), and takes the answers in
  the order of their requests (:class:`ChannelCall`).
- **A lost partition**: a closed connection, or a worker the scheduler no longer lists
  (asked every :data:`ALIVE_SECONDS` while an answer is awaited), answers
  :class:`LostChannel`, which the partitions' caller treats as a lost worker
  (:meth:`muflow.dask.partitions.DaskRowPartitions.wait`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import os
import pickle
import secrets
import select
import socket
import struct
import threading
import weakref

from muflow.dask.scheduler_workers import scheduler_workers
from muflow.exceptions import MuflowError

#: ``MUFLOW_DASK_CHANNELS=0`` keeps every call on ``distributed``'s actor calls.
ENV_VAR = "MUFLOW_DASK_CHANNELS"

#: Bytes of the secret a channel's two ends prove they hold.
KEY_BYTES = 32

#: Seconds the client may take to connect to a partition's channel, and the partition to
#: wait for it, before the partition keeps ``distributed``'s calls.
CONNECT_SECONDS = 5.0

#: While an answer is awaited, the scheduler is asked this often whether the partition's
#: worker is still there (a dead worker's connection closes at once; a frozen machine's
#: does not).
ALIVE_SECONDS = 5.0

_LENGTH = struct.Struct("!Q")

#: Clients whose connection to a worker's channel timed out: their later channels are not
#: tried (a firewall that lets only Dask's ports through would cost each one the wait).
_UNREACHED = weakref.WeakSet()


class LostChannel(ConnectionError):
    """A channel's partition did not answer: its connection closed or its worker is gone."""


def channels_wanted(client, addresses) -> bool:
    """Whether calls to workers at ``addresses`` go on channels: ``MUFLOW_DASK_CHANNELS``
    is not ``0``, every address is ``tcp://`` and the client does not require encryption."""
    if os.environ.get(ENV_VAR, "1").strip() == "0":
        return False
    security = getattr(client, "security", None)
    if security is not None and getattr(security, "require_encryption", False):
        return False
    return all(str(a).startswith("tcp://") for a in addresses)


# -- framing and the handshake -------------------------------------------------------------
def _send(sock, payload: bytes) -> None:
    sock.sendall(_LENGTH.pack(len(payload)))
    sock.sendall(payload)


def _receive_exactly(sock, size: int) -> memoryview:
    buffer = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = sock.recv_into(buffer[got:])
        if n == 0:
            raise EOFError("the channel's other end closed it")
        got += n
    return buffer


def _receive(sock) -> memoryview:
    (size,) = _LENGTH.unpack(_receive_exactly(sock, _LENGTH.size))
    return _receive_exactly(sock, size)


def _digest(key: bytes, challenge) -> bytes:
    return hmac.new(key, bytes(challenge), hashlib.sha256).digest()


def _prove(sock, key: bytes) -> None:
    """Answer the other end's challenge with its HMAC under ``key``."""
    _send(sock, _digest(key, _receive(sock)))


def _check(sock, key: bytes) -> None:
    """Challenge the other end; raise ``ConnectionError`` unless it holds ``key``."""
    challenge = secrets.token_bytes(KEY_BYTES)
    _send(sock, challenge)
    if not hmac.compare_digest(bytes(_receive(sock)), _digest(key, challenge)):
        raise ConnectionError("a channel's peer did not prove it holds the secret")


def _pickled(answer) -> bytes:
    """An answer pickled; one whose value or error cannot be is answered as a
    :class:`~muflow.exceptions.MuflowError` that names it."""
    try:
        return pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001  whatever the value's pickling raised
        what = answer[1]
        return pickle.dumps(("error", MuflowError(
            f"a partition's answer could not be sent back ({type(exc).__name__}: {exc}); "
            f"it was {type(what).__name__}: {what!r:.200}")))


# -- the partition's end ---------------------------------------------------------------------
class ChannelServer:
    """The partition's end of one channel: a thread that accepts the client's connection
    (for at most :data:`CONNECT_SECONDS`), checks its secret and then runs the methods it
    asks for on ``target``, one at a time, until the connection closes.

    Parameters
    ----------
    target : object
        The partition (its public methods are what a request may name).
    host : str
        The interface to listen on: the worker's own.
    threads : int
        The worker's threads: the budget the methods run under
        (:func:`muflow.threads.budget_scope`), as they would on the actor's thread.
    """

    def __init__(self, target, host: str, threads: int):
        self.target, self.threads = target, int(threads)
        self._loop = None  # runs the target's async methods (:meth:`_run`)
        self.key = secrets.token_bytes(KEY_BYTES)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listening = socket.create_server((host, 0), family=family)
        self._listening.settimeout(CONNECT_SECONDS)
        self.address = self._listening.getsockname()[:2]  # (host, port), IPv4 or IPv6
        self._thread = threading.Thread(target=self._serve, name="muflow-channel", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        from muflow.threads import budget_scope

        try:
            sock, _ = self._listening.accept()
        except OSError:  # nobody came: the client keeps distributed's calls
            return
        finally:
            self._listening.close()
        with sock, budget_scope(self.threads):
            try:
                sock.settimeout(CONNECT_SECONDS)
                _check(sock, self.key)
                _prove(sock, self.key)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                while True:
                    _send(sock, _pickled(self._run(_receive(sock))))
            except (EOFError, OSError):  # the client closed the channel, or it broke
                return
            finally:
                if self._loop is not None:
                    self._loop.close()

    def _run(self, request):
        try:
            method, args = pickle.loads(request)
            if method.startswith("_"):
                raise MuflowError(f"a channel runs public methods only, not {method!r}")
            value = getattr(self.target, method)(*args)
            if inspect.iscoroutine(value):  # an actor's async method: run here to its end
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                value = self._loop.run_until_complete(value)
            return "ok", value
        except BaseException as exc:  # noqa: BLE001  the method's error goes to the caller
            return "error", exc


def serve(target):
    """Open a channel to ``target`` (a partition on a Dask worker, called on its actor's
    thread; its methods run under the worker's threads): ``(host, port, key)`` for
    :class:`Channel`, or None where no port can be opened on the worker's address (one the
    worker does not own, behind a NAT: the calls stay ``distributed``'s). Its server
    thread waits for the client for at most :data:`CONNECT_SECONDS`."""
    from distributed import get_worker
    from distributed.comm.addressing import get_address_host

    from muflow.threads import dask_worker_threads

    try:
        server = ChannelServer(target, get_address_host(get_worker().address),
                               dask_worker_threads() or 1)
    except OSError:
        return None
    host, port = server.address[:2]
    return host, port, server.key


# -- the client's end ------------------------------------------------------------------------
class Channel:
    """The client's end of a partition's channel (module notes).

    Parameters
    ----------
    host, port, key
        What :func:`serve` answered.
    alive : callable
        ``alive()`` is False once the partition's worker is gone (asked every
        :data:`ALIVE_SECONDS` while an answer is awaited).
    """

    def __init__(self, host: str, port: int, key: bytes, alive):
        self.alive = alive
        self.sent = self.taken = 0  # requests sent and answers taken
        self._broken = False
        sock = socket.create_connection((host, port), timeout=CONNECT_SECONDS)
        try:
            _prove(sock, key)
            _check(sock, key)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            sock.close()
            raise
        self._sock = sock

    def send(self, method: str, args) -> int:
        """Send the request ``method(*args)``, answered after those sent before it; its
        number, for :meth:`receive`."""
        payload = pickle.dumps((method, tuple(args)), protocol=pickle.HIGHEST_PROTOCOL)
        self.sent += 1
        if not self._broken:
            try:
                _send(self._sock, payload)
            except OSError:
                self._broken = True  # every answer still due is LostChannel
        return self.sent

    def receive(self, number: int | None = None):
        """The answer to the oldest request not yet answered (which must be request
        ``number`` when given): the method's value, or the exception it raised (returned,
        not raised), or :class:`LostChannel`."""
        if self.taken >= self.sent:
            raise MuflowError("a channel's answer was asked for with no request out")
        if number is not None and number != self.taken + 1:
            raise MuflowError(f"a channel answers in the order of its requests: request "
                              f"{number} asked for before {self.taken + 1}")
        self.taken += 1
        if self._broken:
            return LostChannel("the channel broke while a request was sent")
        try:
            while not select.select([self._sock], [], [], ALIVE_SECONDS)[0]:
                if not self.alive():
                    self._broken = True
                    return LostChannel("the partition's worker is gone")
            status, value = pickle.loads(_receive(self._sock))
        except (EOFError, OSError) as exc:
            self._broken = True
            return LostChannel(f"the channel closed ({type(exc).__name__}: {exc})")
        if status == "error" and not isinstance(value, BaseException):
            return MuflowError(f"a partition's call failed: {value!r:.200}")
        return value

    def close(self) -> None:
        """Close the connection (the partition's server thread ends)."""
        self._sock.close()


def alive_in(client, address):
    """``alive()`` for a :class:`Channel` to the worker at ``address``: whether the
    scheduler still lists it (False when there is no scheduler to ask)."""
    def alive() -> bool:
        try:
            return address in scheduler_workers(client)
        except Exception:  # noqa: BLE001  no scheduler to ask: nothing to wait for
            return False
    return alive


def connect(client, served, address):
    """A :class:`Channel` to what :func:`serve` answered on the worker at ``address``, or
    None where the worker opened none or this process cannot reach it (the caller keeps
    ``distributed``'s calls)."""
    if served is None or client in _UNREACHED:
        return None
    host, port, key = served
    try:
        return Channel(host, port, key, alive=alive_in(client, address))
    except TimeoutError:  # filtered: the other workers' ports are not tried (5 s each)
        _UNREACHED.add(client)
        return None
    except OSError:
        return None


def open_channels(client, actors) -> list:
    """Channels to ``actors`` (each has an ``open_channel`` method that calls
    :func:`serve`), asked for together: a :class:`Channel` each, or None where the cluster
    allows none (:func:`channels_wanted`), the actor could not open one or this process
    cannot reach it; those keep ``distributed``'s calls, which find a lost worker."""
    from muflow.dask.calls import ActorCall, answers

    addresses = [actor._address for actor in actors]
    if not actors or not channels_wanted(client, addresses):
        return [None] * len(actors)
    served = client.sync(answers, [ActorCall(actor, "open_channel") for actor in actors])
    return [None if isinstance(answer, BaseException) else connect(client, answer, address)
            for answer, address in zip(served, addresses)]


class ChannelCall:
    """``method(*args)`` sent on a channel at once; :meth:`receive` its answer (the value,
    or the exception the method raised, or :class:`LostChannel`), taken after the answers
    of the calls sent on the channel before it."""

    __slots__ = ("channel", "number")

    def __init__(self, channel: Channel, method: str, *args):
        self.channel = channel
        self.number = channel.send(method, args)

    def receive(self):
        return self.channel.receive(self.number)


__all__ = ["ALIVE_SECONDS", "CONNECT_SECONDS", "ENV_VAR", "Channel", "ChannelCall",
           "ChannelServer", "LostChannel", "alive_in", "channels_wanted", "connect", "open_channels",
           "serve"]
