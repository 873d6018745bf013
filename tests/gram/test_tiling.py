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


@pytest.mark.parametrize("n, tile, parts", [(683, 128, 2), (1000, 100, 3), (50, 128, 2), (22696, 1408, 2)])
def test_split_rows_is_contiguous_tile_aligned_and_balanced(n, tile, parts):
    shards = split_rows(n, tile, parts)
    assert shards[0][0] == 0 and shards[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(shards, shards[1:]))
    assert all(s[0] % tile == 0 for s in shards)
    sizes = [b - a for a, b in shards]
    assert max(sizes) - min(sizes) <= tile
