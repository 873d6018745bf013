"""Dask clusters for muflow: a LocalCluster sized to the machine, or an existing scheduler.

Scripts that start a LocalCluster of worker processes must guard their entry point with
``if __name__ == "__main__":`` (the workers import the main module).
"""

from __future__ import annotations

import contextlib
import os

from muflow.exceptions import MuflowInputError


class SchedulerUnreachableError(MuflowInputError):
    """No Dask scheduler answered at the given address within the timeout."""


def machine_resources() -> tuple[int, int]:
    """(usable cores, total memory in bytes) of this machine: the cores this process may
    run on (affinity and cgroup quota, :func:`muflow.threads.usable_cores`)."""
    from muflow.threads import usable_cores

    cores = usable_cores()
    try:
        import psutil

        memory = psutil.virtual_memory().total
    except Exception:  # pragma: no cover
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, cores), int(memory)


#: distributed's periodic chores that muflow's own LocalCluster runs less often, as
#: ``key: (distributed's default, muflow's)``: the workers' profiler sampling their task
#: threads, every server's event-loop health tick and its system monitor of CPU, memory and
#: network. A fit's workers, one per core, share their cores with them (docs/dask.md,
#: "distributed's housekeeping"; their cost in docs/benchmarks.md).
HOUSEKEEPING = {
    "distributed.worker.profile.interval": ("10ms", "100ms"),
    "distributed.admin.tick.interval": ("20ms", "500ms"),
    "distributed.admin.system-monitor.interval": ("500ms", "2s"),
}


def housekeeping() -> dict:
    """The Dask settings of :data:`HOUSEKEEPING` that muflow's LocalCluster takes: those
    still at distributed's default (a value the user set, in a Dask configuration file, a
    ``DASK_*`` variable or ``dask.config.set``, is kept); and the allocator's thresholds of
    :data:`muflow.dask.worker_memory.MALLOC_THRESHOLDS` in the environment the nannies give
    their workers, where it holds distributed's trim threshold and no mmap threshold, so that
    every task on the workers (not only a fit's partitions) reuses the memory it frees."""
    import dask
    import distributed  # noqa: F401  (its defaults join dask's configuration on import)

    from muflow.dask.worker_memory import MALLOC_THRESHOLDS, thresholds_to_replace

    settings = {key: ours for key, (default, ours) in HOUSEKEEPING.items()
                if str(dask.config.get(key, default)) == default}
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    # the nannies take a variable of this process's environment over their configuration
    environ.update({name: os.environ[name] for name in MALLOC_THRESHOLDS if name in os.environ})
    for name, value in thresholds_to_replace(environ).items():
        settings[f"distributed.nanny.pre-spawn-environ.{name}"] = value
    return settings


def local_cluster(n_workers: int | None = None, *, threads_per_worker: int | None = None,
                  memory_limit="auto", memory_fraction: float = 0.8, **kwargs):
    """A ``LocalCluster`` of worker processes sized to the machine's cores.

    The cores are this process's thread budget (:func:`muflow.threads.thread_budget`: the
    cores it may use, within ``MUFLOW_NUM_THREADS`` and the caller's limits). Without
    ``n_workers``, one single-threaded worker per core; with ``n_workers``, the cores split
    among them (``threads_per_worker`` = cores // n_workers, at least 1), so that a
    ``python -m muflow run`` of 2 workers on 16 cores runs 2 workers of 8 threads, each
    task's solve on its worker's threads. BLAS inside a worker keeps one thread (the
    nanny's ``OMP_NUM_THREADS=1``), so workers do not oversubscribe the cores;
    ``memory_fraction`` of the machine's memory is split evenly between them, unless
    ``memory_limit`` says otherwise. distributed's periodic chores run less often
    (:func:`housekeeping`). Where this process's log records go to a file (a command's
    run.log), so do the workers' (:mod:`muflow.dask.worker_logs`).
    """
    import logging

    import dask
    from distributed import LocalCluster

    # a task that fails (a full disk, say) reaches the caller as one exception, which the
    # commands print in one line; the workers' own WARNING with its traceback would come first
    kwargs.setdefault("silence_logs", logging.ERROR)
    from muflow.threads import thread_budget

    _, memory = machine_resources()
    cores = thread_budget()
    if n_workers is None:
        n_workers = cores
    if threads_per_worker is None:
        threads_per_worker = max(1, cores // n_workers)
    if memory_limit == "auto":
        memory_limit = int(memory * memory_fraction / n_workers)
    from muflow.signals import sigint_ignored

    # the workers ignore Ctrl-C: one to the terminal's process group reaches this process,
    # which closes the cluster in order (each worker's own KeyboardInterrupt printed a
    # traceback, and the run waited on workers that were gone)
    # the scheduler and the nannies read the settings as they start, and each nanny hands
    # them to its worker process (and to a worker it restarts)
    with sigint_ignored(), dask.config.set(housekeeping()):
        cluster = LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                               processes=True, memory_limit=memory_limit,
                               dashboard_address=kwargs.pop("dashboard_address", ":0"), **kwargs)
    # where a command moved this process's log records into a file, the workers' go there
    # too: they inherit its stderr (muflow.dask.worker_logs)
    from muflow.dask.worker_logs import workers_follow_log_file

    try:
        workers_follow_log_file(cluster)
    except BaseException:
        cluster.close()
        raise
    return cluster


def stop_workers_now(cluster) -> None:
    """SIGKILL the worker processes of a LocalCluster of this process, for a command that a
    signal stopped (:mod:`muflow.signals`): their work is abandoned anyway, and a graceful
    close waited on their running tasks, and printed their failed heartbeats. The cluster's
    own close then finds them gone."""
    import signal

    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def connect(address: str, *, timeout: float = 10.0):
    """A ``distributed.Client`` connected to the scheduler at ``address``.

    Raises
    ------
    SchedulerUnreachableError
        When nothing answers within ``timeout`` seconds; the message says how to start one.
    """
    from distributed import Client

    if not isinstance(address, str) or not address:
        raise MuflowInputError(f"a scheduler address looks like tcp://host:8786, got {address!r}")
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise SchedulerUnreachableError(
            f"no Dask scheduler answered at {address} within {timeout:g} s ({type(exc).__name__}); "
            "start one with `dask scheduler` and workers with `dask worker " + address + "`, "
            "or leave out --scheduler to use a local cluster"
        ) from None
    except ValueError as exc:
        raise MuflowInputError(f"bad scheduler address {address!r}: {exc}") from None


@contextlib.contextmanager
def client_for(scheduler: str | None = None, *, timeout: float = 10.0, **cluster_kwargs):
    """Context manager yielding a client: to ``scheduler`` if given, else a local cluster,
    whose workers a stop signal in the block kills at once (:func:`stop_workers_now`: their
    heartbeats to the closing scheduler printed tracebacks)."""
    from distributed import Client

    if scheduler:
        client = connect(scheduler, timeout=timeout)
        try:
            print_dashboard(client)
            yield client
        finally:
            client.close()
        return
    with local_cluster(**cluster_kwargs) as cluster, Client(cluster, set_as_default=False) as client:
        print_dashboard(client)
        try:
            yield client
        except KeyboardInterrupt:  # SIGINT or SIGTERM (muflow.signals): the work is abandoned
            stop_workers_now(cluster)
            raise


def print_dashboard(client) -> None:
    """Say on stderr where the cluster's Dask dashboard is (bokeh serves it), if it has one
    (:func:`serves_dashboard`: distributed gives a link either way)."""
    import sys

    try:
        link = client.dashboard_link
    except Exception:  # noqa: BLE001 (no dashboard: nothing to say)
        return
    if link and serves_dashboard(client):
        print(f"Dask dashboard: {link}", file=sys.stderr, flush=True)


def serves_dashboard(client) -> bool:
    """Whether the scheduler of ``client`` serves the dashboard's pages.

    A scheduler always runs its HTTP server (metrics, health), which
    ``scheduler_info()["services"]`` lists as ``"dashboard"`` and ``client.dashboard_link``
    links to, dashboard or not; the pages are there only where bokeh's application is
    mounted on that server, which the scheduler is asked. True where it cannot be asked (a
    scheduler that refuses to run functions, a distributed that mounts them otherwise): the
    link is then given as distributed gives it.
    """
    def mounted(dask_scheduler):  # a closure: pickled by value, the scheduler needs no muflow
        apps = getattr(getattr(dask_scheduler, "http_application", None), "applications", None)
        return None if apps is None else bool(apps)

    try:
        answer = client.run_on_scheduler(mounted)
    except Exception:  # noqa: BLE001 (cannot tell: keep distributed's link)
        return True
    return answer is not False
