"""The workers a Dask scheduler knows, asked of it afresh.

A leaf module (it imports nothing of muflow but its exceptions): the partitions, the channels, the worker
memory limits and the data's blocks all list the workers through it, and everything that
sends work to the cluster refuses a cluster without workers through :func:`require_workers`.
"""

from __future__ import annotations

from muflow.exceptions import MuflowInputError


def scheduler_workers(client) -> dict:
    """``{address: info}`` of every worker the scheduler knows now, asked of it afresh.
    Not ``client.scheduler_info()["workers"]``: that returns the client's cached identity,
    which distributed's periodic refresh (every few seconds, without per-worker details)
    may overwrite between the fetch and the return, so that it now and then lists no
    worker on a cluster of several. A closed client is refused in words."""
    if getattr(client, "scheduler", None) is None or getattr(client, "status", "") in ("closing", "closed"):
        raise MuflowInputError("the Dask client is closed; pass an open Client, or the "
                               "scheduler's address (client='tcp://HOST:8786')")
    return dict(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}))


#: The one line every command and call gives for a scheduler without workers.
NO_WORKERS = "the Dask cluster has no workers; start some with `dask worker`"


def no_workers_error() -> MuflowInputError:
    """The error for a cluster without workers: :data:`NO_WORKERS`."""
    return MuflowInputError(NO_WORKERS)


def require_workers(client) -> dict:
    """:func:`scheduler_workers`, refused in words (:func:`no_workers_error`) when there are
    none. Work sent to a scheduler without workers waits for one forever, silently: the
    state after a lost scheduler is restarted, its old workers having exited. Called before
    the work is sent, so that a resumed run says what to start instead of hanging."""
    workers = scheduler_workers(client)
    if not workers:
        raise no_workers_error()
    return workers


__all__ = ["NO_WORKERS", "no_workers_error", "require_workers", "scheduler_workers"]
