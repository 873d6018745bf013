"""The workers a Dask scheduler knows, asked of it afresh.

A leaf module (it imports nothing of muflow but its exceptions): the partitions, the channels, the worker
memory limits and the data's blocks all list the workers through it.
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


__all__ = ["scheduler_workers"]
