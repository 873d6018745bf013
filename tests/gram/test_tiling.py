"""Tiling of the symmetric Gram matrix and row shards of the distributed operator."""

import pytest

from muflow.gram.tiling import choose_tile, n_tiles, pair_index, split_rows, tile_bounds, tile_pairs


@pytest.mark.parametrize("n, tile", [(1, 1), (10, 3), (683, 128), (1000, 250)])
def test_upper_triangle_covers_every_chunk_once(n, tile):
    pairs = tile_pairs(n, tile)
    t = n_tiles(n, tile)
    assert len(pairs) == t * (t + 1) // 2
    chunks = [(i, j) for i, j in pairs] + [(j, i) for i, j in pairs if i != j]
    assert sorted(chunks) == [(i, j) for i in range(t) for j in range(t)]
    assert [pair_index(i, j, n, tile) for i, j in pairs] == list(range(len(pairs)))
    assert tile_bounds(t - 1, n, tile)[1] == n


def test_choose_tile_is_a_multiple_of_128_within_memory():
    assert choose_tile(100) == 100
    tile = choose_tile(22696, 4, memory_bytes=8e9, n_workers=2)
    assert tile % 128 == 0 and 128 <= tile <= 4096
    # a tenth of the memory must hold four float64 tiles
    assert choose_tile(100_000, 4, memory_bytes=50e6, n_workers=2) * 1 <= 512


def test_a_tile_row_panel_takes_a_small_share_of_a_worker_and_the_store_check_agrees():
    """On workers whose limit is known, a panel of ``tile`` rows of K (what a worker streams
    from the store) stays within PANEL_MEMORY_SHARE of the limit, so that the check made before
    the build (STREAM_COPIES times a panel within 60 % of the limit, less the 150 MB or so a
    worker holds) passes on workers of a GB or more."""
    from muflow.dask.store_operator import STREAM_COPIES
    from muflow.dask.worker_memory import WORKER_FRACTION
    from muflow.gram.tiling import PANEL_MEMORY_SHARE

    for n, memory in ((200_000, 12e9), (60_000, 2e9), (30_000, 1e9)):
        tile = choose_tile(n, 4, memory_bytes=memory, n_workers=2)
        assert tile % 128 == 0 and tile * n * 4 <= PANEL_MEMORY_SHARE * memory, (n, memory, tile)
        assert STREAM_COPIES * tile * n * 4 <= WORKER_FRACTION * memory - 150e6
    # without a limit (a build in process) the panel is not capped
    assert choose_tile(200_000, 4, n_workers=2) == 4096


@pytest.mark.parametrize("n, tile, parts", [(683, 128, 2), (1000, 100, 3), (50, 128, 2), (22696, 1408, 2)])
def test_split_rows_is_contiguous_tile_aligned_and_balanced(n, tile, parts):
    shards = split_rows(n, tile, parts)
    assert shards[0][0] == 0 and shards[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
    assert all(s[0] % tile == 0 for s in shards)
    sizes = [b - a for a, b in shards]
    assert max(sizes) - min(sizes) <= tile
