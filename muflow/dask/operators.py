"""The operators of the two cluster paths of a :class:`muflow.routing.KernelPlan`, each
made by one function that :func:`muflow.backends.gram_operator` calls with the plan:

- "partitioned" (:func:`partitioned_operator`): X partitioned by rows over the workers,
  the working-set solver on the rows (:class:`~muflow.dask.partitions.DaskRowPartitions`),
  a multiplicative solver on kernel panels computed there
  (:class:`~muflow.dask.panels.DaskRowPanels`, ``plan.panels``);
- "cluster-store" (:func:`cluster_store_operator`): the Gram store of K built (or reused) on the
  cluster in a zarr store, its row panels held by the workers
  (:class:`~muflow.dask.store_operator.DaskGram`); X must be in this process.
"""

from __future__ import annotations

from muflow.dask.panels import DaskRowPanels
from muflow.dask.partitions import DaskRowPartitions
from muflow.dask.store_operator import DaskGram
from muflow.gram.build import ensure_gram
from muflow.gram.store import StoreCorruptError, default_cache_dir
from muflow.solvers.rowcache import DEFAULT_CACHE_MB


def partitioned_operator(X, kernel, plan, client, owns_client=False):
    """The operator of a "partitioned" ``plan``: X partitioned over the workers of
    ``client``, with the kernel panels where the plan's solver reads products
    (``plan.panels``); each worker caches ``plan.cache_mb`` of kernel rows (default
    :data:`~muflow.solvers.rowcache.DEFAULT_CACHE_MB`). For the working-set solver the
    partition that solves its subproblems gets fewer rows (``subproblems``)."""
    cache_mb = DEFAULT_CACHE_MB if plan.cache_mb is None else float(plan.cache_mb)
    if plan.panels:
        return DaskRowPanels(X, kernel, client, gram_dtype=plan.gram_dtype, owns_client=owns_client,
                             cache_mb=cache_mb)
    return DaskRowPartitions(X, kernel, client, owns_client=owns_client, cache_mb=cache_mb,
                             subproblems=plan.solver == "working_set")


def cluster_store_operator(X, kernel, *, client, store=None, cache_dir=None, dtype="float32", tile=None,
                 resident_fraction=None, owns_client=False, storage_options=None) -> DaskGram:
    """Build or reuse the Gram store of ``K(X, X)`` on ``client`` and return its operator.

    Parameters
    ----------
    X : ndarray or scipy sparse matrix of shape (n_samples, n_features)
    kernel : muflow.kernels.Kernel
    client : distributed.Client
    store : str, optional
        Path or fsspec URL of the zarr store; by default one in ``cache_dir``.
    cache_dir : str, optional
        Cache directory mapping (fingerprint of X, kernel, dtype) to a store; default
        :func:`muflow.gram.store.default_cache_dir` when ``store`` is not given either.
    dtype : {"float32", "float64"}, default="float32"
    tile : int, optional
        Tile size; chosen from n and the workers' memory when omitted.
    resident_fraction : float, optional
        Share of each worker's memory limit that resident panels may use
        (:class:`muflow.dask.store_operator.DaskGram`); beyond it panels stream from the store.
    owns_client : bool, default=False
        Close ``client`` when the operator is closed.
    storage_options : dict, optional
        Of the file system of ``store`` or ``cache_dir`` (an fsspec URL), given to every
        open of the store here and on the workers (:func:`muflow.gram.ensure_gram`).
    """
    if store is None and cache_dir is None:
        cache_dir = default_cache_dir()
    kwargs = {} if resident_fraction is None else {"resident_fraction": resident_fraction}
    nonnegative = kernel.is_nonnegative(X)
    for deep_check in (False, True):
        gram, _ = ensure_gram(X, kernel, client=client, store=store, cache_dir=cache_dir,
                              dtype=dtype, tile=tile, deep_check=deep_check,
                              storage_options=storage_options)
        try:
            return DaskGram(gram, client=client, nonnegative=nonnegative, owns_client=owns_client,
                            **kwargs)
        except StoreCorruptError:
            # a tile failed its checksum while the workers loaded it; X is at hand: read
            # every tile, recompute the damaged ones, start again (once)
            if deep_check:
                raise
