"""K(X, X) built tile by tile as Dask tasks, written by the workers into the zarr store.

Graph building (here, on the client) is kept apart from per-tile work
(:func:`compute_tile`, which runs on a worker: evaluate one block with
:meth:`muflow.kernels.Kernel.block`, cast, write its chunk and, off the diagonal, the
transposed chunk). X travels to each worker once (``scatter(..., broadcast=True)``); the
blocks of K never pass through the client.

Notes
-----
Work: n^2 / 2 kernel evaluations (symmetry). Memory per task: about four float64 tiles,
``32 * tile**2`` bytes. Disk: ``n**2 * itemsize`` bytes (both triangles are stored, so a
row panel is one contiguous read).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.gram.store import (
    GramStore, StoreCorruptError, check_directory, check_dtype, check_store_target, fingerprint,
    lookup_cache, record_in_cache, store_exists, unwritable_error,
)
from muflow.gram.tiling import choose_tile, tile_bounds, tile_pairs
from muflow.inmemory import block_input, numpy_gram
from muflow.kernels import Kernel

@dataclass
class BuildReport:
    """What a build did.

    Attributes
    ----------
    store : str
    total : int
        Upper-triangle tiles of the store.
    computed : list of (int, int)
        Tiles computed by this call (empty when the store was reused as is).
    seconds : float
    """

    store: str
    total: int
    computed: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def reused(self) -> bool:
        return not self.computed


_OPEN_ARRAYS: dict = {}


def _open_for_write(url, storage_options=None):
    """The store's array, opened once per worker for its URL and file system options (an
    fsspec URL on another endpoint is another store, even at the same path)."""
    import json

    import zarr

    key = (url, json.dumps(storage_options, sort_keys=True, default=str))
    array = _OPEN_ARRAYS.get(key)
    if array is None:
        array = _OPEN_ARRAYS[key] = zarr.open_array(url, mode="r+", storage_options=storage_options)
    return array


def compute_tile(url: str, X, kernel: dict, i: int, j: int, n: int, tile: int, dtype: str,
                 storage_options=None):
    """Per-tile work on a worker: K(X_I, X_J) into chunk (I, J) and its transpose (J, I), in
    the store at ``url`` opened with ``storage_options`` (those of the file system of an
    fsspec URL: an endpoint, ...); the tile's blocks reuse the memory the worker frees
    (:func:`muflow.dask.worker_memory.reuse_freed_memory`)."""
    from muflow.dask.worker_memory import reuse_freed_memory

    reuse_freed_memory()
    r0, r1 = tile_bounds(i, n, tile)
    c0, c1 = tile_bounds(j, n, tile)
    block = Kernel.from_dict(kernel).block_into(X[r0:r1], X[c0:c1], np.empty((r1 - r0, c1 - c0), dtype))
    if i == j:
        # sgemm's A A' is symmetric only up to round-off (its blocking differs above and
        # below the diagonal); the store must be exactly symmetric, since the workers'
        # panels answer rows of K from its columns
        lower = np.tril_indices(r1 - r0, -1)
        block[lower] = block.T[lower]
    array = _open_for_write(url, storage_options)
    array[r0:r1, c0:c1] = block
    if i != j:
        array[c0:c1, r0:r1] = np.ascontiguousarray(block.T)
    return i, j


def _worker_memory(client) -> tuple[float | None, int]:
    workers = client.scheduler_info(n_workers=-1)["workers"] if client is not None else {}
    limits = [w.get("memory_limit") or 0 for w in workers.values()]
    limits = [m for m in limits if m]
    return (min(limits) if limits else None), max(1, len(workers))


def build_gram(X, store: GramStore, *, client=None, tiles=None, on_tile=None,
               flush_seconds: float = 0.5) -> BuildReport:
    """Compute the given (default: missing) tiles of ``store`` from X.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, n_features)
    store : GramStore
        Created for X (its kernel, dtype and tile are used).
    client : distributed.Client, optional
        Tiles run as tasks on its workers; without one they run here, one after another.
    tiles : list of (int, int), optional
        Upper-triangle tiles to compute; default ``store.missing_tiles()``.
    on_tile : callable, optional
        ``on_tile(i, j, n_done)`` on the client after each tile is recorded.
    flush_seconds : float, default=0.5
        Completed tiles are written to the store's attributes at most this often (and at
        the end), so that an interrupted build loses at most this much recorded work.
    """
    t0 = time.perf_counter()
    if tiles is None:
        tiles = store.missing_tiles()
    report = BuildReport(store.url, len(tile_pairs(store.n, store.tile)))
    if not tiles:
        return report
    done = store.recorded_tiles() - set(tiles)
    Xb = block_input(X)
    kernel = store.kernel.to_dict()
    args = (store.n, store.tile, store.dtype, store.storage_options)
    last_flush = time.perf_counter()

    def finished(i, j):
        nonlocal last_flush
        done.add((i, j))
        report.computed.append((i, j))
        if time.perf_counter() - last_flush >= flush_seconds:
            store.record_tiles(done)
            last_flush = time.perf_counter()
        if on_tile is not None:
            on_tile(i, j, len(report.computed))

    try:
        if client is None:
            for i, j in tiles:
                compute_tile(store.url, Xb, kernel, i, j, *args)
                finished(i, j)
        else:
            from muflow.dask.worker_memory import completed_while_memory_allows

            X_remote = client.scatter(Xb, broadcast=True, hash=False)
            token = uuid.uuid4().hex[:8]
            futures = [
                client.submit(compute_tile, store.url, X_remote, kernel, i, j, *args,
                              key=f"muflow-gram-tile-{token}-{i}-{j}", retries=2, pure=False)
                for i, j in tiles
            ]
            try:
                # workers paused for memory run no tile: refused in words, not waited on forever
                for fut in completed_while_memory_allows(client, futures, "the Gram store's tiles"):
                    i, j = fut.result()
                    finished(i, j)
            finally:
                client.cancel(futures)
                del X_remote
    finally:
        store.record_tiles(done)
    report.seconds = time.perf_counter() - t0
    return report


def ensure_gram(X, kernel: Kernel, *, client=None, store=None, cache_dir=None,
                dtype="float32", tile=None, deep_check=False, on_tile=None,
                storage_options=None) -> tuple[GramStore, BuildReport]:
    """Open the store of K(X, X) if it exists and matches, build what is missing.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, n_features)
    kernel : Kernel
    client : distributed.Client, optional
    store : str, optional
        Path or fsspec URL of the store. An existing store must match X, the kernel and
        the dtype (:class:`muflow.gram.store.StoreMismatchError` otherwise).
    cache_dir : str, optional
        Used when ``store`` is not given: the store is ``gram-<key>.zarr`` there.
    dtype : {"float32", "float64"}, default="float32"
    tile : int, optional
        Tile side of a new store; default from n and the workers' memory
        (:func:`muflow.gram.tiling.choose_tile`). Ignored for an existing store.
    deep_check : bool, default=False
        Read every recorded tile to find damaged chunks (otherwise only their presence is
        checked).
    storage_options : dict, optional
        Of the file system of ``store`` or ``cache_dir`` when it is an fsspec URL
        (``endpoint_url`` of an S3-compatible store, ...), as values, not ``"${NAME}"``
        references: every open and create of the store, here and by the workers that
        write its tiles, is given them (:attr:`GramStore.storage_options`).

    Returns
    -------
    (GramStore, BuildReport)
    """
    dtype = check_dtype(dtype)
    if kernel.name == "precomputed":
        raise MuflowInputError("a precomputed kernel needs no Gram store; pass K itself")
    if X.ndim != 2 or X.shape[0] == 0:
        raise MuflowInputError(f"X must be a non-empty 2-D array, got shape {X.shape}")
    fp = fingerprint(X)
    given = store is not None  # a path of the caller's, where other things may be
    if cache_dir is not None:
        check_directory(cache_dir, "--cache-dir")
    if given and "://" not in str(store):
        check_directory(os.path.dirname(os.path.abspath(store)), "--out", shown=str(store))
    if store is None:
        if cache_dir is None:
            raise MuflowInputError("give a store path (--out) or a cache directory (--cache-dir)")
        store = lookup_cache(cache_dir, fp, kernel, dtype)
    url = str(store)
    gram = _complete_store(url, fp, kernel, dtype, deep_check, storage_options)
    if gram is not None:
        report = BuildReport(gram.url, len(tile_pairs(gram.n, gram.tile)))
    else:
        with build_lock(url, option="--out" if given else "--cache-dir"):
            gram, report = _open_or_create_and_build(
                X, kernel, url, fp, client=client, dtype=dtype, tile=tile, deep_check=deep_check,
                on_tile=on_tile, storage_options=storage_options, given=given)
    if given and cache_dir is not None:  # only a store that matches and is built is pointed at
        record_in_cache(cache_dir, fp, kernel, dtype, url)
    return gram, report


def _complete_store(url, fp, kernel, dtype, deep_check, storage_options) -> GramStore | None:
    """The store at ``url`` opened read-only when it exists, matches and lacks no tile, else
    None. Such a store is reused without the build lock, so that a cache directory nobody
    may write in (a shared, pre-built one) still serves; a store of other data is refused
    here as under the lock (:meth:`GramStore.check_matches`)."""
    if not store_exists(url, storage_options):
        return None
    gram = GramStore.open(url, mode="r", storage_options=storage_options)
    gram.check_matches(fp, kernel, dtype)
    return None if gram.missing_tiles(deep=deep_check) else gram


@contextlib.contextmanager
def build_lock(url: str, option: str = "--out"):
    """One build of a local store at a time: an exclusive ``flock`` on ``.<name>.lock`` beside
    it. A second build of the same store waits for the first, then finds its tiles complete
    and computes nothing (two identical concurrent ``gram`` runs used to compute every tile
    twice). Stores behind fsspec URLs are not locked. A directory where the lock cannot be
    written is named in one line with the fix: ``option``, the one that chose it."""
    if "://" in url:
        yield
        return
    import fcntl

    path = os.path.abspath(url.rstrip("/"))
    lock = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")
    try:
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        fh = open(lock, "a")
    except OSError as exc:  # EACCES, EPERM (an immutable directory), a read-only file system
        if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
            raise
        raise unwritable_error(os.path.dirname(lock), exc, option, f"the Gram store {url}") from None
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _open_or_create_and_build(X, kernel, url, fp, *, client, dtype, tile, deep_check, on_tile,
                              storage_options, given):
    if client is not None:  # before a store is made: tiles sent to no worker wait forever
        from muflow.dask.scheduler_workers import require_workers

        require_workers(client)
    n = X.shape[0]
    if store_exists(url, storage_options):
        gram = GramStore.open(url, storage_options=storage_options)
        gram.check_matches(fp, kernel, dtype)
    else:
        if given:  # under the lock: another build's half-created store is not taken for other things
            check_store_target(url, storage_options)
        if tile is None:
            memory, n_workers = _worker_memory(client)
            tile = choose_tile(n, np.dtype(dtype).itemsize, memory, n_workers)
        tile = int(tile)
        if tile < 1:
            raise MuflowInputError(f"tile must be a positive integer, got {tile}")
        gram = GramStore.create(url, n=n, tile=min(tile, n), dtype=dtype, kernel=kernel, fp=fp,
                                storage_options=storage_options)
    missing = gram.missing_tiles(deep=deep_check)
    report = build_gram(X, gram, client=client, tiles=missing, on_tile=on_tile)
    return gram, report


__all__ = ["BuildReport", "build_gram", "ensure_gram", "numpy_gram", "compute_tile",
           "block_input", "StoreCorruptError"]
