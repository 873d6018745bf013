"""Blocked Gram matrices: tiling, the zarr store with its cache, the build on Dask.

- :mod:`muflow.gram.tiling`: tile size from n and memory, the upper-triangle tile list;
- :mod:`muflow.gram.store`: the zarr v3 store, its JSON attributes (kernel, fingerprint of
  X, dtype, tile, muflow version, complete tiles), validation and the cache directory;
- :mod:`muflow.gram.build`: K(X, X) tile by tile as Dask tasks, each off-diagonal tile
  computed once and written with its transpose by the same task (one writer per chunk).

The operator that serves a store to the solvers is a floor above
(:class:`muflow.dask.store_operator.DaskGram`, created by :func:`muflow.backends.gram_operator`).
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

__all__ = [
    "BuildReport", "GramStore", "StoreMismatchError", "build_gram", "cache_path",
    "choose_tile", "default_cache_dir", "ensure_gram", "fingerprint", "numpy_gram", "open_store",
    "tile_pairs",
]
