"""The Dask cluster a run's stages use: a scheduler named in the configuration or a
LocalCluster started for the run (:func:`dask_scheduler`), and a client of it for one stage
(:func:`client_of`). The Prefect flows open the cluster once and hand its address to every
task; each task connects its own client.
"""

from __future__ import annotations

import contextlib

from muflow.config import RunConfig


@contextlib.contextmanager
def dask_scheduler(cfg: RunConfig):
    """The scheduler address the stages connect to: ``cluster.scheduler`` (checked to answer
    within ``cluster.timeout``) or a LocalCluster of ``cluster.workers`` processes started
    here and closed on exit. Yields ``(address, dashboard_link or None)``."""
    from muflow.dask.cluster import connect, local_cluster

    if cfg.cluster.scheduler:
        client = connect(cfg.cluster.scheduler, timeout=cfg.cluster.timeout)
        try:
            yield cfg.cluster.scheduler, _dashboard(client)
        finally:
            client.close()
        return
    kwargs = {"n_workers": cfg.cluster.workers} if cfg.cluster.workers else {}
    if _has_bokeh():
        kwargs["dashboard_address"] = ":0"  # a free port; printed by the flow
    with local_cluster(**kwargs) as cluster:
        try:
            yield cluster.scheduler_address, _dashboard(cluster)
        except BaseException as exc:
            if isinstance(exc, Exception):
                raise
            # SIGINT or SIGTERM (muflow.signals; Prefect's flow engine raises its own
            # TerminationSignal for SIGTERM): the work is abandoned, no graceful wait
            from muflow.dask.cluster import stop_workers_now

            stop_workers_now(cluster)
            raise


def _has_bokeh() -> bool:
    try:
        import bokeh  # noqa: F401  (distributed serves a dashboard only with bokeh)
    except ImportError:
        return False
    return True


def _dashboard(obj):
    if not _has_bokeh():
        return None
    try:
        return obj.dashboard_link
    except Exception:
        return None


@contextlib.contextmanager
def client_of(address: str | None, timeout: float = 10.0):
    """A client connected to ``address`` (None: no client, the stages compute in process)."""
    if not address:
        yield None
        return
    from muflow.dask.cluster import connect

    client = connect(address, timeout=timeout)
    try:
        # Current in this thread: the actors of muflow.dask.store_operator.DaskGram find their
        # client through distributed.get_client(), and connect() does not make the client
        # the process-wide default (a Prefect task runs in a worker thread).
        with client.as_current():
            yield client
    finally:
        client.close()
