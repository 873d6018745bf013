"""Direct channels from the client to the partitions (muflow.dask.channels): the wire and its
handshake in this process, then the working-set fit on a real 2-worker LocalCluster with the
channels and with distributed's actor calls, to the bit."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest
from sklearn.datasets import make_classification

from muflow.dask import channels
from muflow.dask.channels import Channel, ChannelCall, ChannelServer, LostChannel
from muflow.exceptions import MuflowError


class Target:
    """What a partition is to its channel: public methods, a private one, an async one."""

    def __init__(self):
        self.calls = []

    def add(self, a, b):
        self.calls.append(("add", a, b))
        return a + b

    def fail(self):
        raise ValueError("the method's own error")

    def unpicklable(self):
        return lambda: None

    async def later(self, x):
        return 2 * x

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def _private(self):
        return "secret"


def _open(target=None, alive=lambda: True, key=None):
    server = ChannelServer(target if target is not None else Target(), "127.0.0.1", 1)
    host, port = server.address
    return server, Channel(host, port, server.key if key is None else key, alive)


def test_a_call_answers_its_value_arrays_included():
    target = Target()
    _, channel = _open(target)
    a = np.arange(5.0)
    got = ChannelCall(channel, "add", a, np.ones(5)).receive()
    np.testing.assert_array_equal(got, a + 1)
    assert ChannelCall(channel, "add", 2, 3).receive() == 5
    assert [c[0] for c in target.calls] == ["add", "add"]
    channel.close()


def test_errors_come_back_as_exceptions_not_raised():
    _, channel = _open()
    got = ChannelCall(channel, "fail").receive()
    assert isinstance(got, ValueError) and "own error" in str(got)
    got = ChannelCall(channel, "_private").receive()
    assert isinstance(got, MuflowError) and "public methods only" in str(got)
    got = ChannelCall(channel, "unpicklable").receive()
    assert isinstance(got, MuflowError) and "could not be sent back" in str(got)
    # the channel still serves after each error
    assert ChannelCall(channel, "later", 21).receive() == 42
    channel.close()


def test_requests_sent_before_their_answers_are_answered_in_order():
    """A request may be sent before the last is answered: the partition runs it after the
    last, and the answers come in the order of the requests; taking one before an older
    one is refused, and so is an answer with no request out."""
    target = Target()
    _, channel = _open(target)
    first = ChannelCall(channel, "sleep", 0.2)
    second = ChannelCall(channel, "add", 1, 2)
    third = ChannelCall(channel, "fail")
    with pytest.raises(MuflowError, match="order of its requests"):
        second.receive()
    assert first.receive() == 0.2
    assert second.receive() == 3
    assert isinstance(third.receive(), ValueError)
    with pytest.raises(MuflowError, match="no request out"):
        channel.receive()
    assert ChannelCall(channel, "add", 3, 4).receive() == 7
    channel.close()


def test_a_round_trip_given_up_leaves_no_answer_behind():
    """A round trip given up when one of its calls failed takes the answers of the calls
    still out (muflow.dask.exchange.drain): the channel's next request reads its own answer,
    not the one left behind."""
    from muflow.dask.exchange import drain
    from muflow.dask.partitions import DaskRowPartitions

    _, channel = _open()
    parts = DaskRowPartitions.__new__(DaskRowPartitions)
    parts.client, parts.channels, parts.actors = None, [channel], [None]
    left = [parts.send(0, "sleep", 0.1), parts.send(0, "add", 1, 1)]
    drain(parts, left)
    assert channel.taken == channel.sent
    assert parts.wait([parts.send(0, "add", 2, 3)]) == [5]
    drain(parts, [parts.send(0, "fail")])  # an error answered is let go as well
    assert parts.wait([parts.send(0, "add", 1, 1)]) == [2]
    channel.close()


def test_a_client_without_the_secret_is_refused():
    target = Target()
    with pytest.raises((ConnectionError, EOFError, OSError)):
        _open(target, key=b"x" * channels.KEY_BYTES)
    assert target.calls == []


def test_a_server_nobody_connects_to_closes_its_port(monkeypatch):
    monkeypatch.setattr(channels, "CONNECT_SECONDS", 0.2)
    server = ChannelServer(Target(), "127.0.0.1", 1)
    server._thread.join(5)
    assert not server._thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(server.address, timeout=1).close()


def test_a_closed_connection_answers_lost():
    server, channel = _open()
    channel.send("sleep", (0.3,))
    time.sleep(0.05)
    channel._sock.shutdown(socket.SHUT_RDWR)
    assert isinstance(channel.receive(), LostChannel)


def test_a_worker_gone_while_the_answer_is_awaited_answers_lost(monkeypatch):
    monkeypatch.setattr(channels, "ALIVE_SECONDS", 0.05)
    asked = []

    def alive():
        asked.append(1)
        return len(asked) < 3

    _, channel = _open(alive=alive)
    channel.send("sleep", (2.0,))
    t = time.perf_counter()
    got = channel.receive()
    assert isinstance(got, LostChannel) and "worker is gone" in str(got)
    assert time.perf_counter() - t < 1.5 and len(asked) == 3


def test_channels_wanted_follows_the_variable_the_scheme_and_encryption(monkeypatch):
    from types import SimpleNamespace

    plain = SimpleNamespace(security=SimpleNamespace(require_encryption=False))
    monkeypatch.delenv(channels.ENV_VAR, raising=False)
    assert channels.channels_wanted(plain, ["tcp://127.0.0.1:1", "tcp://10.0.0.2:2"])
    assert not channels.channels_wanted(plain, ["tls://127.0.0.1:1"])
    assert not channels.channels_wanted(plain, ["inproc://127.0.0.1/1/2"])
    encrypted = SimpleNamespace(security=SimpleNamespace(require_encryption=True))
    assert not channels.channels_wanted(encrypted, ["tcp://127.0.0.1:1"])
    monkeypatch.setenv(channels.ENV_VAR, "0")
    assert not channels.channels_wanted(plain, ["tcp://127.0.0.1:1"])


# -- on a real cluster -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    from tests.dask_cluster import local_client

    with local_client(2) as c:
        yield c


def _fit(client, X, y):
    from muflow.dask.partitions import DaskRowPartitions
    from muflow.dask.working_set import solve_working_set_dask
    from muflow.kernels import Kernel
    from muflow.solvers import DualProblem

    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.05), client)
    try:
        opened = [c is not None for c in parts.channels]
        sol = solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True), q=64)
    finally:
        parts.close()
    return opened, sol


def test_the_fit_on_channels_is_the_fit_on_actor_calls_to_the_bit(client, monkeypatch):
    X, y = make_classification(n_samples=1200, n_features=10, random_state=3)
    y = np.where(y > 0, 1.0, -1.0)
    monkeypatch.delenv(channels.ENV_VAR, raising=False)
    opened, on_channels = _fit(client, X, y)
    assert opened == [True, True]
    monkeypatch.setenv(channels.ENV_VAR, "0")
    opened, on_actors = _fit(client, X, y)
    assert opened == [False, False]
    assert on_channels.converged.all() and int(on_channels.n_iter) > 5
    np.testing.assert_array_equal(on_channels.alpha, on_actors.alpha)
    np.testing.assert_array_equal(on_channels.objective, on_actors.objective)
    assert on_channels.timings["round_trips"] == on_actors.timings["round_trips"]


def test_a_method_error_on_a_channel_is_raised_as_itself(client):
    from muflow.dask.partitions import DaskRowPartitions
    from muflow.kernels import Kernel

    X = np.random.default_rng(0).standard_normal((200, 4))
    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.5), client)
    try:
        assert all(c is not None for c in parts.channels)
        with pytest.raises(TypeError):
            parts.call("diagonal", "an argument too many")
        # the channels still serve
        np.testing.assert_allclose(parts.diagonal(), np.ones(200))
    finally:
        parts.close()


def test_the_gram_stores_products_on_channels_are_those_on_actor_calls(client, monkeypatch,
                                                                      tmp_path):
    """DaskGram's panel servers answer on their channels what they answer as actors, to the
    bit; a server whose worker is killed is restarted with a channel of its own."""
    import os
    import signal

    from muflow.dask.store_operator import DaskGram
    from muflow.gram import ensure_gram
    from muflow.kernels import Kernel

    X = np.random.default_rng(5).standard_normal((600, 6))
    gram, _ = ensure_gram(X, Kernel("rbf", gamma=0.3), client=client,
                          store=str(tmp_path / "K.zarr"), tile=128)
    V = np.random.default_rng(6).standard_normal((600, 3))
    monkeypatch.setenv(channels.ENV_VAR, "0")
    with DaskGram(gram, client) as op:
        assert op._channels == {}
        on_actors = (op.matmul(V), op.rows(np.arange(0, 600, 7)), op.diagonal())
    monkeypatch.delenv(channels.ENV_VAR)
    with DaskGram(gram, client) as op:
        assert len(op._channels) == len(op._actors) == 2
        on_channels = (op.matmul(V), op.rows(np.arange(0, 600, 7)), op.diagonal())
        for got, expected in zip(on_channels, on_actors):
            np.testing.assert_array_equal(got, expected)
        first = sorted(op._actors)[0]
        os.kill(client.run(os.getpid)[op._actors[first][2]], signal.SIGKILL)
        np.testing.assert_array_equal(op.matmul(V), on_actors[0])
        assert op.recoveries >= 1 and len(op._channels) == len(op._actors)
    client.wait_for_workers(2, timeout=60)  # the nanny restarts the killed worker


def test_a_worker_address_it_cannot_listen_on_opens_no_channel(monkeypatch):
    """A worker whose contact address is not its own (behind a NAT) opens no port: serve
    answers None and the client keeps distributed's calls."""
    from types import SimpleNamespace

    import distributed

    monkeypatch.setattr(distributed, "get_worker",
                        lambda: SimpleNamespace(address="tcp://192.0.2.1:8786"))
    assert channels.serve(Target()) is None
    assert channels.connect(None, None, "tcp://192.0.2.1:8786") is None


def test_a_channel_over_ipv6_loopback():
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        server = ChannelServer(Target(), "::1", 1)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    host, port = server.address
    channel = Channel(host, port, server.key, lambda: True)
    assert ChannelCall(channel, "add", 1, 2).receive() == 3
    channel.close()


def test_a_client_whose_connection_timed_out_tries_no_more_channels(monkeypatch):
    """Behind a firewall that lets only Dask's ports through, each connection would wait
    CONNECT_SECONDS: after the first timeout the client's other partitions keep
    distributed's calls without trying."""
    tried = []

    def filtered(*args, **kwargs):
        tried.append(args)
        raise TimeoutError("timed out")

    class FakeClient:
        pass

    client = FakeClient()
    monkeypatch.setattr(channels, "Channel", filtered)
    served = ("10.0.0.2", 40000, b"k" * channels.KEY_BYTES)
    assert channels.connect(client, served, "tcp://10.0.0.2:1") is None
    assert channels.connect(client, served, "tcp://10.0.0.3:1") is None
    assert len(tried) == 1
    assert channels.connect(FakeClient(), served, "tcp://10.0.0.2:1") is None
    assert len(tried) == 2  # another client tries for itself
