"""The facts a kernel setting's store-or-stream plan weighs, gathered for
:func:`muflow.routing.plan_kernel`.

The rule itself is plain (names, counts, bytes) and lives in :mod:`muflow.routing`; this
module looks up what it needs to know about this machine and this run: the free disk where
the Gram store would go and whether that store is built already (a store that is there
needs no disk, so the sweep reading it and the stage that built it plan alike). The sweep
(:func:`muflow.selection.run_sweep`) and the pipeline's Gram stage
(:func:`muflow.pipeline.build_gram_stores`) both call :func:`plan_setting`, so they cannot
disagree on which settings read a store.
"""

from __future__ import annotations

import os
import shutil

from muflow.routing import KernelPlan, plan_kernel


def sweep_solves(folds: int, n_C: int) -> int:
    """Solves that read one kernel setting's K in a sweep: every (fold, C), and the refit
    on all samples."""
    return int(folds) * int(n_C) + 1


def free_disk_bytes(path) -> int | None:
    """Free bytes on the file system that holds ``path`` (or would: its nearest existing
    parent); None for a URL (object stores are not measured)."""
    if path is None or "://" in str(path):
        return None
    path = os.path.abspath(str(path))
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return shutil.disk_usage(path).free


def store_dtype(on_cluster: bool) -> str:
    """The dtype of the store a setting's solves read: float32 for the Dask operator
    (:func:`muflow.backends.operator_for`), float64 read into this process."""
    return "float32" if on_cluster else "float64"


def store_built(X, kernel, cache_dir, dtype: str, storage_options=None) -> bool:
    """Whether ``cache_dir`` (an fsspec URL opened with ``storage_options``) holds the Gram
    store of K(X, X) in ``dtype`` already (never for a dask X: a store is built from X in
    this process, which a dask X never enters)."""
    from muflow.gram.store import fingerprint, lookup_cache, store_exists

    if hasattr(X, "dask"):
        return False

    return store_exists(lookup_cache(str(cache_dir), fingerprint(X), kernel, dtype), storage_options)


def plan_setting(X, kernel, *, solver: str = "auto", intercept: str = "exact", solves: int = 1,
                 client=None, cache_dir=None, cache_mb=None, device: bool = False,
                 storage_options=None) -> KernelPlan:
    """The plan of one kernel setting over X: :func:`muflow.routing.plan_kernel` given the
    memory available now, the free disk at the store directory and whether the store is
    there (an fsspec URL ``cache_dir`` looked at with ``storage_options``). With a client
    the store directory is ``cache_dir`` or the default cache
    (:func:`muflow.gram.store.default_cache_dir`), where the Dask operator puts it."""
    if client is not None and cache_dir is None:
        from muflow.gram.store import default_cache_dir

        cache_dir = default_cache_dir()
    built = cache_dir is not None and kernel.name != "precomputed" and store_built(
        X, kernel, cache_dir, store_dtype(client is not None), storage_options)
    return plan_kernel(X.shape[0], solver=solver, intercept=intercept, kernel_name=kernel.name,
                       solves=solves, client=client, store_dir=cache_dir, store_built=built,
                       free_disk=free_disk_bytes(cache_dir), cache_mb=cache_mb, device=device)
