"""Actor calls (muflow.dask.calls) on a real 2-worker LocalCluster: straight to the actor's
worker when the client reaches it, through the scheduler otherwise, with the same answers
and the same errors."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.dask import calls
from muflow.dask.calls import ActorCall, DirectCall, answers, direct_rpc
from muflow.dask.partitions import DaskRowPartitions
from muflow.kernels import Kernel


@pytest.fixture
def parts(client):
    X = np.random.default_rng(0).standard_normal((600, 5))
    parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.2), client)
    try:
        yield parts
    finally:
        parts.close()


def _rows(parts, idx):
    """Rows ``idx`` of every partition's X, each call awaited together."""
    return parts.client.sync(answers, [ActorCall(a, "rows", idx) for a in parts.actors])


def test_a_client_that_reaches_the_workers_calls_them_directly(parts):
    actor = parts.actors[0]
    assert direct_rpc(actor) is not None
    call = ActorCall(actor, "rows", np.array([0, 2]))
    assert isinstance(call.future, DirectCall)
    lo, hi = parts.bounds[0]
    np.testing.assert_array_equal(call.result(timeout=30), parts.take(np.array([lo, lo + 2])))
    assert call.lent == [] and call.future is None  # the arrays sent are let go


def test_without_direct_connections_the_scheduler_relays_the_same_answers(parts, monkeypatch):
    direct = _rows(parts, np.array([1, 3, 5]))
    monkeypatch.setattr(parts.client, "direct_to_workers", False)
    assert direct_rpc(parts.actors[0]) is None
    assert not isinstance(ActorCall(parts.actors[0], "info").future, DirectCall)
    relayed = _rows(parts, np.array([1, 3, 5]))
    for a, b in zip(direct, relayed):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("direct_to_workers", [None, False])
def test_an_error_of_the_method_reaches_the_caller(parts, monkeypatch, direct_to_workers):
    monkeypatch.setattr(parts.client, "direct_to_workers", direct_to_workers)
    beyond = np.array([10**6])  # no such row: NumPy's IndexError on the worker
    with pytest.raises(IndexError):
        ActorCall(parts.actors[0], "rows", beyond).result(timeout=30)
    got = parts.client.sync(answers, [ActorCall(parts.actors[0], "rows", beyond)])
    assert isinstance(got[0], IndexError)


def test_a_worker_the_client_cannot_reach_is_called_through_the_scheduler(client, monkeypatch):
    """The probe of a client's own connection fails within PROBE_SECONDS: no direct calls."""
    import socket

    monkeypatch.setattr(calls, "PROBE_SECONDS", 0.5)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
    assert calls._reaches(client, address) is False


def test_a_cluster_of_threads_in_this_process_fits_as_one_of_processes():
    """``Client(processes=False)`` (workers in this process, ``inproc://``): nothing pickles
    a call there, so its arrays go as copies of their own, not as :class:`Lent` shells
    (``begin`` raised "float() argument must be ... not 'Lent'"), and the actor never writes
    into the caller's arrays. The fit and the products agree with the in-process fit."""
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification

    import muflow

    X, y = make_classification(n_samples=1500, n_features=8, random_state=0)
    # m3 a few passes only (its products on the workers' panels): it converges slowly here
    options = {"working_set": {}, "m3": {"max_iter": 30}}
    reference = {solver: muflow.SVC(gamma=0.1, solver=solver, **kw).fit(X, y)
                 for solver, kw in options.items()}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.1), client)
        try:
            assert all(calls.in_this_process(a) for a in parts.actors)
            sent = np.array([0, 3, 7])
            call = ActorCall(parts.actors[0], "rows", sent)
            assert not any(isinstance(a, calls.Lent) for a in call.lent)
            np.testing.assert_array_equal(call.result(timeout=30), X[sent])
        finally:
            parts.close()
        for solver, kw in options.items():
            model = muflow.SVC(client=client, gamma=0.1, solver=solver, **kw).fit(X, y)
            agree = np.mean(model.predict(X) == reference[solver].predict(X))
            assert agree >= 0.995, (solver, agree)


def test_lend_copies_an_array_for_an_actor_in_this_process():
    a = np.arange(4.0)
    lent, copied = calls.lend(a), calls.lend(a, in_process=True)
    assert isinstance(lent, calls.Lent) and lent.value is a
    assert isinstance(copied, np.ndarray) and not np.shares_memory(copied, a)
    np.testing.assert_array_equal(copied, a)
    assert calls.lend(3) == 3 and calls.lend("x", in_process=True) == "x"


def test_a_methods_own_error_is_raised_as_it_is_not_taken_for_a_lost_worker(parts):
    """An IndexError on a worker still there is the method's (a bug's) own: raised at once,
    by a call and through ``retrying``, with no partition started again (it was taken for a
    lost worker: four restarts, then "the workers died ... most likely out of memory")."""
    far = np.array([10**9])
    with pytest.raises(IndexError):
        parts.call("rows", far)
    with pytest.raises(IndexError):
        parts.retrying(lambda: parts.call("rows", far))
    assert parts.recoveries == 0
    np.testing.assert_array_equal(parts.call("rows", np.array([0]))[0], parts.take(np.array([0])))


def test_which_errors_say_the_worker_is_lost(parts):
    actor, client = parts.actors[0], parts.client
    assert calls.method_error(IndexError("a bug"), actor, client)
    assert calls.method_error(ValueError("bad input"), actor, client)
    for lost in (OSError("closed"), MemoryError(), KeyboardInterrupt()):
        assert not calls.method_error(lost, actor, client)

    class Gone:  # an actor whose worker the scheduler no longer lists
        _address = "tcp://127.0.0.1:1"

    assert not calls.method_error(IndexError("a bug"), Gone(), client)
