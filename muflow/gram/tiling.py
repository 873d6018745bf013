"""Tiles of a symmetric n x n Gram matrix.

The store is chunked in square tiles of side ``tile``; tile (I, J) covers rows
``I*tile : (I+1)*tile`` and columns ``J*tile : (J+1)*tile``. K is symmetric, so only the
upper triangle I <= J is computed; the task that computes (I, J) also writes (J, I), which
keeps one writer per chunk. The distributed operator serves K in row shards of whole tiles
(:func:`split_rows`).
"""

from __future__ import annotations

import math

#: Tile sides are multiples of this (BLAS-friendly, and chunk-aligned row panels).
TILE_QUANTUM = 128
MIN_TILE, MAX_TILE = 128, 4096
#: A tile-row panel of K (``tile`` rows, n columns) takes at most this share of a worker's
#: memory, where the build knows it: a worker that streams the panel from the store holds
#: several times its bytes meanwhile (:data:`muflow.dask.store_operator.STREAM_COPIES`), beside
#: what it holds already
PANEL_MEMORY_SHARE = 0.075


def n_tiles(n: int, tile: int) -> int:
    return max(1, math.ceil(n / tile))


def tile_bounds(index: int, n: int, tile: int) -> tuple[int, int]:
    """Row (or column) range ``[start, stop)`` of tile ``index``."""
    start = index * tile
    return start, min(n, start + tile)


def tile_pairs(n: int, tile: int) -> list[tuple[int, int]]:
    """The upper-triangle tiles (I, J), I <= J, row by row."""
    t = n_tiles(n, tile)
    return [(i, j) for i in range(t) for j in range(i, t)]


def split_rows(n: int, tile: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous tile-aligned row ranges, as equal in rows as tiles allow."""
    bounds = [tile_bounds(i, n, tile) for i in range(-(-n // tile))]
    parts = max(1, min(parts, len(bounds)))
    shards, start_tile = [], 0
    for p in range(parts):
        target = n * (p + 1) / parts
        stop_tile = start_tile + 1
        while stop_tile < len(bounds) - (parts - p - 1) and bounds[stop_tile][1] <= target + tile / 2:
            stop_tile += 1
        if p == parts - 1:
            stop_tile = len(bounds)
        shards.append((bounds[start_tile][0], bounds[stop_tile - 1][1]))
        start_tile = stop_tile
    return shards


def pair_index(i: int, j: int, n: int, tile: int) -> int:
    """Position of tile (i, j) (i <= j) in :func:`tile_pairs` order."""
    t = n_tiles(n, tile)
    return i * t - i * (i - 1) // 2 + (j - i)


def choose_tile(n: int, itemsize: int = 4, memory_bytes: float | None = None,
                n_workers: int = 1) -> int:
    """A tile side for an n x n Gram matrix.

    Aims at a few tiles per worker so that the build balances and row panels (``tile``
    rows of K) split evenly between workers, with each tile's working set (the tile in
    float64 plus its temporaries, about ``4 * 8 * tile**2`` bytes) at most a tenth of a
    worker's memory, and a tile-row panel at most :data:`PANEL_MEMORY_SHARE` of it.

    Parameters
    ----------
    n : int
    itemsize : int, default=4
        Bytes per stored entry (4 for float32).
    memory_bytes : float, optional
        Memory of one worker; no cap when omitted.
    n_workers : int, default=1
    """
    if n <= MIN_TILE:
        return max(1, n)
    # about 4 row panels per worker, i.e. (4 n_workers)^2 / 2 tiles
    target = n / max(4 * n_workers, 4)
    tile = int(round(target / TILE_QUANTUM)) * TILE_QUANTUM
    tile = max(MIN_TILE, min(MAX_TILE, tile))
    if memory_bytes:
        cap = int(math.sqrt(memory_bytes / 10 / 32)) // TILE_QUANTUM * TILE_QUANTUM
        # a tile-row panel streamed by a worker takes several times its bytes there
        panel_cap = int(PANEL_MEMORY_SHARE * memory_bytes / (n * itemsize))
        tile = max(MIN_TILE, min(tile, cap, panel_cap // TILE_QUANTUM * TILE_QUANTUM))
    return min(tile, n)
