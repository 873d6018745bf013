"""Blocked Gram matrices: tiling, the zarr store with its cache, the build on Dask.

- :mod:`muflow.gram.tiling`: tile size from n and memory, the upper-triangle tile list;
- :mod:`muflow.gram.store`: the zarr v3 store, its JSON attributes (kernel, fingerprint of
  X, dtype, tile, muflow version, complete tiles), validation and the cache directory;
- :mod:`muflow.gram.build`: K(X, X) tile by tile as Dask tasks, each off-diagonal tile
  computed once and written with its transpose by the same task (one writer per chunk).

:func:`operator_for` joins them with :class:`muflow.distributed.DaskGram`: build or reuse a
store on the cluster and return the operator that solvers use.
"""

from muflow.gram.build import BuildReport, build_gram, ensure_gram, numpy_gram
from muflow.gram.store import (
    GramStore,
    StoreMismatchError,
    cache_path,
    default_cache_dir,
    fingerprint,
    open_store,
)
from muflow.gram.tiling import choose_tile, tile_pairs


def operator_for(X, kernel, *, client, store=None, cache_dir=None, dtype="float32", tile=None,
                 resident_fraction=None):
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
        (:class:`muflow.distributed.DaskGram`); beyond it panels stream from the store.

    Returns
    -------
    muflow.distributed.DaskGram
    """
    from muflow.distributed import DaskGram

    if store is None and cache_dir is None:
        cache_dir = default_cache_dir()
    gram, _ = ensure_gram(X, kernel, client=client, store=store, cache_dir=cache_dir,
                          dtype=dtype, tile=tile)
    kwargs = {} if resident_fraction is None else {"resident_fraction": resident_fraction}
    return DaskGram(gram, client=client, nonnegative=kernel.is_nonnegative(X), **kwargs)


__all__ = [
    "BuildReport", "GramStore", "StoreMismatchError", "build_gram", "cache_path",
    "choose_tile", "default_cache_dir", "ensure_gram", "fingerprint", "numpy_gram", "open_store", "operator_for",
    "tile_pairs",
]
