"""The row cache: rows read in place from an in-memory K, fetched and evicted otherwise."""

import numpy as np
import pytest

from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.problem import DualProblem
from muflow.solvers.rowcache import RowCache
from muflow.solvers.smo import solve_smo
from tests.solvers._operators import RowsOnlyGram


@pytest.fixture
def gram(sonar_split):
    Xtr, _, ytr, _ = sonar_split
    return Kernel("rbf", gamma=1.0).block(Xtr, Xtr), ytr.astype(float)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_memory_K_is_read_in_place(gram, dtype):
    K = np.ascontiguousarray(gram[0], dtype=dtype)
    cache = RowCache(DenseGram(K), cache_mb=0.001)
    assert cache.in_place and cache.data is K
    assert np.all(cache.slot_of == np.arange(K.shape[0]))


def test_fortran_ordered_or_hidden_K_is_cached(gram):
    K = gram[0]
    assert not RowCache(DenseGram(np.asfortranarray(K)), 1.0).in_place
    cache = RowCache(RowsOnlyGram(K), cache_mb=0.001)
    assert not cache.in_place and cache.slots == 2
    cache.fetch([3])
    np.testing.assert_array_equal(cache.data[cache.slot_of[3]], K[3])


def test_smo_same_solution_in_place_and_through_a_tiny_cache(gram):
    K, y = gram
    in_place = solve_smo(DualProblem(DenseGram(K), y, upper=2.0, equality=True), tol=1e-6)
    fetched = solve_smo(DualProblem(RowsOnlyGram(K), y, upper=2.0, equality=True), tol=1e-6,
                        cache_mb=0.001)
    assert in_place.timings["row_fetches"] == 0 and fetched.timings["row_fetches"] > 100
    # the same solution; not the same step count: the in-place operator certifies with its
    # own float64 product, the rows-only one with a product summed in another order
    np.testing.assert_allclose(in_place.alpha, fetched.alpha, atol=1e-12)
    np.testing.assert_allclose(in_place.objective, fetched.objective, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_precise_product_sums_in_float64_over_nonzero_rows(gram, dtype):
    K = np.ascontiguousarray(gram[0], dtype=dtype)
    rng = np.random.default_rng(0)
    V = rng.normal(size=(K.shape[0], 3)) * 100.0
    V[rng.random(K.shape[0]) < 0.6] = 0.0
    exact = K.astype(np.float64) @ V
    np.testing.assert_allclose(DenseGram(K).matmul_precise(V), exact, rtol=1e-13, atol=1e-10)
    np.testing.assert_allclose(DenseGram(np.asfortranarray(K)).matmul_precise(V), exact, rtol=1e-13, atol=1e-10)


def test_caches_made_in_turn_reuse_one_storage_within_the_scope(gram):
    from muflow.solvers import rowcache

    K = gram[0]
    with rowcache.reused_storage():
        first = RowCache(RowsOnlyGram(K), cache_mb=0.1)
        first.fetch(np.arange(10))
        beside = RowCache(RowsOnlyGram(K), cache_mb=0.1)  # made while the first holds it
        assert not np.shares_memory(first.data, beside.data)
        buffer = rowcache._STORAGE.buffer
        assert np.shares_memory(first.data, buffer)
        first.release()
        smaller = RowCache(RowsOnlyGram(K[:50, :50]), cache_mb=0.01)
        assert np.shares_memory(smaller.data, buffer)  # the same pages, no fresh memory
        smaller.fetch([3, 4])
        np.testing.assert_array_equal(smaller.data[smaller.slot_of[4]], K[4, :50])
        smaller.release()
    assert rowcache._STORAGE.buffer is None  # freed when the scope ends
    assert not np.shares_memory(RowCache(RowsOnlyGram(K), cache_mb=0.1).data, buffer)


def test_retired_rows_give_their_slots_before_fresh_ones_and_stay_readable_until_then(gram):
    K = gram[0]
    cache = RowCache(RowsOnlyGram(K), cache_mb=1.0)
    cache.fetch([0, 1, 2, 3])
    cache.retire([1, 2])
    cache.fetch([3])  # a hit: nothing moves
    np.testing.assert_array_equal(cache.data[cache.slot_of[2]], K[2])
    old = {int(cache.slot_of[1]), int(cache.slot_of[2])}
    cache.fetch([10, 11, 12])  # two retired slots taken, then one never written
    assert {int(cache.slot_of[10]), int(cache.slot_of[11])} == old and cache.used == 5
    assert cache.slot_of[1] == -1 and cache.slot_of[2] == -1
    for i in (0, 3, 10, 11, 12):
        np.testing.assert_array_equal(cache.data[cache.slot_of[i]], K[i])


def test_unretire_puts_retired_rows_back_in_the_ordinary_order(gram):
    K = gram[0]
    cache = RowCache(RowsOnlyGram(K), cache_mb=1.0)
    cache.fetch([0, 1])
    cache.retire([0])
    cache.unretire()
    cache.fetch([5])
    assert cache.slot_of[0] >= 0 and cache.used == 3


def test_max_rows_holds_a_one_solve_cache_and_a_kept_cache_takes_all_of_cache_mb(gram):
    from muflow.solvers.rowcache import keep_row_cache, row_cache

    K = gram[0]
    assert row_cache(RowsOnlyGram(K), 1.0, max_rows=8).slots == 8
    assert RowCache(RowsOnlyGram(K), 1.0).slots == K.shape[0]
    kept = keep_row_cache(RowsOnlyGram(K))
    assert row_cache(kept, 1.0, max_rows=8).slots == K.shape[0]


def _ask(cache, K, batches):
    """Ask the cache for each batch of rows in turn (the working-set loop's reserve and
    write), checking every row it then holds against K and that no slot at or past its
    limit was ever used (those pages are never written)."""
    limits = []
    for batch in batches:
        cache.slots_for(np.asarray(batch))
        held = np.flatnonzero(cache.slot_of >= 0)
        np.testing.assert_array_equal(cache.data[cache.slot_of[held]], K[held])
        assert cache.slot_of.max() < cache.limit and np.all(cache.row_of[cache.limit:] == -1)
        limits.append(cache.limit)
    return limits


def test_a_bounded_cache_grows_while_evicted_rows_come_back_soon(gram):
    """Working sets of 2 rows that cycle through a cache of 4 rows first, 8 at most: over
    6 rows, each batch asks for rows evicted a batch before, which 2 more slots would have
    kept, and the cache grows to 6; then over 8 rows, to 8; then every row is a hit. (8
    rows cycled through 4 slots would not grow it: 2 more slots would keep none of them.)"""
    from muflow.solvers.rowcache import row_cache

    K = gram[0]
    cache = row_cache(RowsOnlyGram(K), 1.0, max_rows=8, first_rows=4)
    assert (cache.slots, cache.limit) == (8, 4)
    six, eight = [[0, 1], [2, 3], [4, 5]] * 4, [[0, 1], [2, 3], [4, 5], [6, 7]] * 4
    limits = _ask(cache, K, six)
    assert limits[0] == 4 and limits[-1] == 6 and limits == sorted(limits)
    assert _ask(cache, K, eight)[-1] == 8
    fetched = cache.rows_fetched
    _ask(cache, K, eight)
    assert cache.rows_fetched == fetched  # eight rows in eight slots: no more misses


def test_a_bounded_cache_stays_small_where_rows_come_back_only_late(gram):
    """Working sets drawn from many more rows than the cache holds: an evicted row comes
    back only after many other misses (more than one more working set of slots would
    keep), and the cache stays at its first size, however many rows it is asked."""
    from muflow.solvers.rowcache import row_cache

    K = gram[0]
    n = K.shape[0]
    cache = row_cache(RowsOnlyGram(K), 1.0, max_rows=8, first_rows=4)
    batches = [[(2 * b) % n, (2 * b + 1) % n] for b in range(3 * n)]
    assert set(_ask(cache, K, batches)) == {4}
    assert cache.rows_fetched == 2 * len(batches)  # every row computed anew
    assert cache.stats()["cache_slots"] == 4
    # 8 rows cycled through 4 slots: 2 more slots would keep none of them
    cycled = row_cache(RowsOnlyGram(K), 1.0, max_rows=8, first_rows=4)
    assert set(_ask(cycled, K, [[0, 1], [2, 3], [4, 5], [6, 7]] * 4)) == {4}


def test_first_rows_above_the_bound_or_without_one_changes_nothing(gram):
    from muflow.solvers.rowcache import reused_storage, row_cache

    K = gram[0]
    assert row_cache(RowsOnlyGram(K), 1.0, max_rows=8, first_rows=16).limit == 8
    assert row_cache(RowsOnlyGram(K), 1.0, first_rows=4).limit == K.shape[0]
    with reused_storage():  # storage that serves several solves: no bound, all slots
        assert row_cache(RowsOnlyGram(K), 1.0, max_rows=8, first_rows=4).limit == K.shape[0]


def test_a_kept_cache_retires_nothing(gram):
    from muflow.solvers.rowcache import keep_row_cache, row_cache

    K = gram[0]
    cache = row_cache(keep_row_cache(RowsOnlyGram(K)), 1.0)
    cache.fetch([0, 1])
    cache.retire([0])
    cache.fetch([5])
    assert cache.slot_of[0] >= 0 and not cache.retiring


def test_storage_that_serves_several_solves_in_turn_is_not_bounded(gram):
    from muflow.solvers.rowcache import reused_storage, row_cache

    K = gram[0]
    with reused_storage():
        assert row_cache(RowsOnlyGram(K), 1.0, max_rows=8).slots == K.shape[0]
    assert row_cache(RowsOnlyGram(K), 1.0, max_rows=8).slots == 8


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_begun_that_fail_leave_the_cache_when_joined(threads, monkeypatch):
    """RowCache.begin_write: rows computed on the other threads are in the cache once
    joined; rows whose computation failed there leave it, and the join raises."""
    from muflow.kernel_rows import KernelRows

    X = np.random.default_rng(3).normal(size=(600, 8))
    op = KernelRows(X, Kernel("rbf", gamma=0.2), n_threads=threads)
    cache = RowCache(op, cache_mb=1.0, dtype=np.float32)
    idx = np.arange(0, 40, 2)
    rows, slots = cache.reserve_missing(idx)
    cache.begin_write(rows, slots).join()
    np.testing.assert_array_equal(cache.data[cache.slot_of[idx]], op.rows_native(idx))

    def fail(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(op, "_chunks_into", fail)  # rows for scattered slots
    monkeypatch.setattr(op, "_panel", fail)  # rows for consecutive slots
    more = np.arange(100, 120)
    rows, slots = cache.reserve_missing(more)
    writing = cache.begin_write(rows, slots)
    with pytest.raises(MemoryError, match="no room"):
        writing.join()
    assert np.all(cache.slot_of[more] < 0)
    assert np.all(cache.slot_of[idx] >= 0)
