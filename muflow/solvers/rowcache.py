"""A least-recently-used cache of Gram rows, sized in megabytes, for the subset solvers.

Subset solvers touch K one or two rows at a time. The rows come from the operator
(``operator.rows(idx)``: a slice of an in-memory K today, a fetch from Dask workers for
the distributed store), so each fetch is worth keeping. The storage is plain arrays that
the compiled loops read directly (:mod:`muflow.solvers._subset_compiled`); a loop that
misses returns to Python, which calls :meth:`RowCache.fetch` and resumes the loop.

Rows are of K, not of Q = diag(y) K diag(y), so the m columns of a batch (one-vs-rest
classes, folds) share one cache.

Rows computed from X on demand (:class:`muflow.kernel_rows.KernelRows`) are written by the
operator straight into the cache's storage, in the cache's dtype.

When the operator already holds K in this process's memory (:class:`~muflow.operators.DenseGram`
over a C-ordered float array) the "cache" is K itself: every row is a hit, nothing is
copied and ``cache_mb`` is not spent.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.memory import cache_allocation_error, cache_rows_that_fit

#: Default cache size, as libsvm's ``cache_size``.
DEFAULT_CACHE_MB = 256.0

#: The most rows a one-solve cache of the working-set loop holds, in working sets (q rows each):
#: rows beyond the last few working sets' are seldom asked again, and a slot never written
#: costs its first write a page fault per page, which costs more than computing the row
#: again (docs/benchmarks.md, "Threads and workers"), so the cache stays at what the loop reuses
#: however large ``cache_mb``. A cache kept over several solves (a sweep's C path), or whose
#: storage serves several solves in turn (one-vs-one pairs, :func:`reused_storage`), is not
#: held to it: its memory is first written once for them all.
ROWS_PER_WORKING_SET = 4

#: The rows such a cache holds at first, in working sets: it grows by one working set at a
#: time, up to :data:`ROWS_PER_WORKING_SET`, while rows come back soon after they were
#: evicted (:data:`GROW_AT_RETURNS`). Where the working sets draw from a large active set,
#: an evicted row comes back only after many others, which a few more working sets of
#: slots would not have kept either, and the cache stays at this size.
FIRST_ROWS_PER_WORKING_SET = 2

#: A bounded cache grows when, over a window of ``limit`` misses, at least this share were
#: rows evicted within the last working set's worth of misses: rows that one more working
#: set of slots would have kept (a "ghost" hit, as adaptive caches count them).
GROW_AT_RETURNS = 0.05


def working_set_rows(q: int | None) -> int | None:
    """The most rows the working-set loop's cache holds for working sets of ``q``
    (:data:`ROWS_PER_WORKING_SET`); None: no bound."""
    return None if q is None else ROWS_PER_WORKING_SET * int(q)


def working_set_first_rows(q: int | None) -> int | None:
    """The rows the working-set loop's cache holds at first for working sets of ``q``
    (:data:`FIRST_ROWS_PER_WORKING_SET`, grown by ``q`` at a time); None: all from the start."""
    return None if q is None else FIRST_ROWS_PER_WORKING_SET * int(q)


class RowCache:
    """LRU cache of rows of K.

    Parameters
    ----------
    operator : GramOperator
    cache_mb : float, default=256
        Memory for cached rows, in MB (2**20 bytes). At least two rows are always kept
        (a working pair), at most n.
    dtype : numpy dtype, optional
        Storage type; default float32 when the operator holds K in float32, else float64.
    n_keys : int, optional
        How many distinct rows may be asked (default: ``operator.n``, rows of a square K).
        A Dask worker caches rows K(x_b, X_p) of any sample b over its own columns p: its
        rows are ``operator.n`` long and keyed by the global index b
        (:class:`muflow.dask.partitions.RowPartition`).
    reuse_storage : bool, default=True
        Take the storage :func:`reused_storage` lends, when it lends one; False for a cache
        that outlives its solve (:func:`row_cache` over :func:`keep_row_cache`).
    max_rows : int, optional
        At most this many rows whatever ``cache_mb`` allows (see :func:`row_cache`);
        not within :func:`reused_storage`, whose storage serves several solves in turn.
    first_rows : int, optional
        With ``max_rows``: hold this many rows at first, and grow by half of it at a time,
        up to ``max_rows``, while evicted rows come back soon (:data:`GROW_AT_RETURNS`);
        a slot never used is never written, so its memory is never touched.

    Attributes
    ----------
    data : ndarray of shape (slots, n), float32 or float64
    limit : int
        The slots in use now (the first ``limit`` rows of ``data``): ``slots`` unless
        ``first_rows`` was given.
    slot_of : ndarray of shape (n,), int64
        Slot of each row, -1 when not cached.
    stamp : ndarray of shape (slots,), int64
        Last use of each slot (the compiled loops refresh it on every hit).
    clock : ndarray of shape (1,), int64
    fetches, rows_fetched : int
    seconds : float
        Time spent fetching.

    Notes
    -----
    Memory use is ``slots * n * itemsize`` bytes, ``slots = clip(cache_mb * 2**20 / (itemsize n), 2, n)``.
    """

    _growth = None  # a bounded cache's growth (_Growth), where it starts below its bound

    def __init__(self, operator, cache_mb: float = DEFAULT_CACHE_MB, dtype=None, *,
                 n_keys: int | None = None, reuse_storage: bool = True,
                 max_rows: int | None = None, first_rows: int | None = None):
        if not np.isfinite(cache_mb) or cache_mb <= 0:
            raise MuflowInputError(f"cache_mb must be a positive number of megabytes, got {cache_mb!r}")
        n = operator.n
        keys = n if n_keys is None else int(n_keys)
        self.operator = operator
        self.n = n
        self.fetches = 0
        self.rows_fetched = 0
        self.seconds = 0.0
        held = getattr(operator, "dense", None)
        if n_keys is None and _readable_in_place(held, n, dtype):
            # K is already in this process's memory: the loops read its rows where they
            # are (every row "cached", nothing copied, nothing evicted)
            self.dtype = held.dtype
            self.slots = n
            self.data = held
            self.slot_of = np.arange(n, dtype=np.int64)
            self.row_of = self.slot_of.copy()
            self.stamp = np.zeros(n, dtype=np.int64)
            self.clock = np.zeros(1, dtype=np.int64)
            self.used = self.limit = n
            self.in_place = True
            self.retiring = self.kept = False
            return
        self.in_place = False
        if dtype is None:
            # rows of a float32 K lose nothing in a float32 cache, which holds twice as many
            dtype = np.float32 if operator.dtype == np.float32 else np.float64
        self.dtype = np.dtype(dtype)
        slots = int(cache_mb * 2**20 // (self.dtype.itemsize * max(n, 1)))
        row_bytes = self.dtype.itemsize * max(n, 1)
        # no more than the process may hold (cgroup, ulimit -v, free memory): capped, with
        # a warning naming cache_size
        if _STORAGE.depth > 0:
            # within reused_storage the caches of several solves take one storage in turn,
            # first written once for them all: no bound (a device's cache, whose storage is
            # its own, follows the same rule, so that it takes the in-process steps)
            max_rows = None
        self.slots = max(2, min(keys, slots, keys if max_rows is None else int(max_rows)))
        self.slots = max(2, min(self.slots, cache_rows_that_fit(self.slots, row_bytes, cache_mb)))
        self.limit = self.slots
        if max_rows is not None and first_rows is not None and int(first_rows) < self.slots:
            self.limit = max(2, int(first_rows))
            self._growth = _Growth(keys, step=max(1, self.limit // 2))
        # a cache that outlives its solve (keep_row_cache) keeps its own memory: storage
        # lent by reused_storage goes back to the next cache when a solve ends
        try:
            self.data, self._lent = (_allocate((self.slots, n), self.dtype) if reuse_storage
                                     else (np.empty((self.slots, n), dtype=self.dtype), False))
        except MemoryError as exc:
            raise cache_allocation_error(self.slots * row_bytes, cache_mb, exc) from None
        self.slot_of = np.full(keys, -1, dtype=np.int64)
        self.row_of = np.full(self.slots, -1, dtype=np.int64)
        self.stamp = np.zeros(self.slots, dtype=np.int64)
        self.clock = np.zeros(1, dtype=np.int64)
        self.used = 0
        self.retiring = False  # some slot holds a retired row (:meth:`retire`)
        self.kept = False  # serves later solves (:func:`row_cache`): nothing is retired

    @property
    def arrays(self):
        """The storage as the compiled loops take it: (data, slot_of, stamp, clock)."""
        return self.data, self.slot_of, self.stamp, self.clock

    def slots_for(self, idx) -> tuple[np.ndarray, int]:
        """The slots of rows ``idx`` (distinct, at most ``slots`` of them) and how many were
        cached: the missing rows are fetched in one batch, after the cached ones are
        touched, so that the batch evicts none of them."""
        idx = np.asarray(idx, dtype=np.int64)
        cached = self.slot_of[idx] >= 0
        if not self.in_place and not cached.all():
            self.clock[0] += 1
            self.stamp[self.slot_of[idx[cached]]] = self.clock[0]
            self.fetch(idx[~cached])
        return np.ascontiguousarray(self.slot_of[idx]), int(cached.sum())

    def fetch(self, idx) -> None:
        """Bring rows ``idx`` (those not yet cached; at most ``slots``) into the cache."""
        t = time.perf_counter()
        if len(idx) == 1:
            self._fetch_one(int(idx[0]))
            self.seconds += time.perf_counter() - t
            return
        idx, slots = self.reserve(idx)
        self.seconds += time.perf_counter() - t
        if idx.size:
            self.write(idx, slots)  # counts its own seconds

    def forget(self, idx) -> None:
        """Rows ``idx`` leave the cache (their slots free for the next fetch): reserved rows
        whose computation failed are not taken for computed ones."""
        idx = np.asarray(idx, dtype=np.int64)
        slots = self.slot_of[idx]
        slots = slots[slots >= 0]
        self.row_of[slots] = -1
        self.stamp[slots] = 0
        self.slot_of[idx] = -1

    def reserve_missing(self, idx) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`reserve` for those of rows ``idx`` not cached, after the cached ones are
        touched, so that the batch evicts none of them: ``(rows, slots)``, which the caller
        writes (:meth:`write`, on another thread if it likes) before anything reads them."""
        idx = np.asarray(idx, dtype=np.int64)
        cached = self.slot_of[idx] >= 0
        if self.in_place or cached.all():
            return idx[:0], idx[:0]
        self.clock[0] += 1
        self.stamp[self.slot_of[idx[cached]]] = self.clock[0]
        return self.reserve(idx[~cached])

    def reserve(self, idx) -> tuple[np.ndarray, np.ndarray]:
        """Slots for the rows of ``idx`` not yet cached (distinct, at most ``slots`` of
        them), the least recently used evicted, as if fetched: ``(rows, slots)``, rows
        ascending. The caller writes them (:meth:`write`) before anything reads them."""
        idx = np.unique(np.asarray(idx, dtype=np.int64))
        idx = idx[self.slot_of[idx] < 0][: self.limit]
        k = idx.size
        if k == 0:
            return idx, idx
        if self._growth is not None:
            self.limit = self._growth.grown(idx, self.limit, self.slots)
        free = self.limit - self.used
        retired = np.flatnonzero(self.stamp[: self.used] < 0)[:k] if self.retiring else idx[:0]
        if free >= k - retired.size:
            # retired rows' slots first (pages already written), then never used ones
            fresh = k - retired.size
            slots = np.concatenate([retired, np.arange(self.used, self.used + fresh)])
            self.used += fresh
        else:
            # retired (stamp -1) and free slots (stamp 0) go first, then the least recently used
            limit = self.limit
            slots = np.argpartition(self.stamp[:limit], k - 1)[:k] if k < limit else np.arange(limit)
            self.used = limit
        # ascending slots: a batch written over slots that an earlier batch filled together
        # lands in runs that an operator computing rows can fill in place
        slots = np.sort(slots)
        evicted = self.row_of[slots]
        evicted = evicted[evicted >= 0]
        self.slot_of[evicted] = -1
        if self._growth is not None:
            self._growth.evicted(evicted)
        self.row_of[slots] = idx
        self.slot_of[idx] = slots
        self.clock[0] += 1
        self.stamp[slots] = self.clock[0]
        self.fetches += 1
        self.rows_fetched += k
        return idx, slots

    def retire(self, idx) -> None:
        """Rows ``idx`` will not be asked for a while (their variables left the active set,
        :meth:`muflow.solvers.active_set.HostActiveSet.shrink`): they stay cached, a hit
        refreshes them, but their slots are the first a fetch takes, before slots never
        written. A slot never written costs its first write a page fault per page, and on a
        virtual machine that hands freed memory back to its host (free page reporting) a
        fault the host serves too, which costs more than computing the row again; retired
        slots keep the memory a solve touches near what its active set needs. A cache kept
        for later solves (:func:`keep_row_cache`) retires nothing: they ask for those rows."""
        if self.kept or self.in_place:  # the next solve asks for them again; K held whole
            return
        idx = np.asarray(idx, dtype=np.int64)
        slots = self.slot_of[idx]
        self.stamp[slots[slots >= 0]] = -1
        self.retiring = True

    def unretire(self) -> None:
        """Every retired row back in the ordinary order, as just used (the active set is
        whole again: :meth:`muflow.solvers.active_set.HostActiveSet.reactivate`)."""
        if self.retiring:
            self.clock[0] += 1
            self.stamp[self.stamp < 0] = self.clock[0]
            self.retiring = False

    def write(self, idx, slots) -> None:
        """Compute the reserved rows ``idx`` into their ``slots`` (:meth:`reserve`); rows
        that fail leave the cache (:meth:`forget`)."""
        self.begin_write(idx, slots).join()

    def begin_write(self, idx, slots) -> "_Writing":
        """:meth:`write` begun on the other threads of an operator that computes rows in the
        cache's dtype (``begin_rows_into``: :class:`muflow.kernel_rows.KernelRows`), the
        caller's share left for the :meth:`_Writing.join` that ends it; at once otherwise."""
        t = time.perf_counter()
        begin = getattr(self.operator, "begin_rows_into", None)
        try:
            if begin is not None and self.operator.dtype == self.dtype:
                return _Writing(self, idx, begin(idx, self.data, slots), t)
            self._write(idx, slots)
        except BaseException:
            self.forget(idx)  # reserved rows whose computation failed are not taken for computed ones
            self.seconds += time.perf_counter() - t
            raise
        return _Writing(self, idx, None, t)

    def _fetch_one(self, i: int) -> None:
        if self.slot_of[i] >= 0:
            return
        if self._growth is not None:
            self.limit = self._growth.grown(np.array([i]), self.limit, self.slots)
        if self.used < self.limit and not (self.retiring and self.stamp[: self.used].min() < 0):
            slot = self.used
            self.used += 1
        else:
            slot = int(np.argmin(self.stamp[: self.limit]))
            evicted = self.row_of[slot]
            if evicted >= 0:
                self.slot_of[evicted] = -1
                if self._growth is not None:
                    self._growth.evicted(np.array([evicted]))
        self._write(np.array([i]), np.array([slot]))
        self.row_of[slot] = i
        self.slot_of[i] = slot
        self.clock[0] += 1
        self.stamp[slot] = self.clock[0]
        self.fetches += 1
        self.rows_fetched += 1

    def _write(self, idx, slots) -> None:
        """Rows ``idx`` into ``data[slots]``: computed in place by an operator that computes
        rows in the cache's dtype (``rows_into``, as :class:`muflow.kernel_rows.KernelRows`:
        no float64 copy), else copied from ``operator.rows``."""
        rows_into = getattr(self.operator, "rows_into", None)
        if rows_into is not None and self.operator.dtype == self.dtype:
            rows_into(idx, self.data, slots)
        else:
            self.data[slots] = self.operator.rows(idx)

    def release(self) -> None:
        """Done with: storage lent by :func:`reused_storage` goes back for the next cache."""
        if getattr(self, "_lent", False):
            self._lent = False
            self.data = np.empty((0, self.n), dtype=self.dtype)
            _STORAGE.lent = False

    def stats(self) -> dict:
        return {"cache_slots": self.limit, "row_fetches": self.fetches,
                "rows_fetched": self.rows_fetched, "fetch_seconds": self.seconds,
                "rows_in_place": self.in_place}


class _Growth:
    """When a bounded cache grows (:class:`RowCache` with ``first_rows``): over each window
    of ``limit`` misses it counts the misses on rows evicted within the last ``step`` misses,
    which ``step`` more slots would have kept (the "ghost" hits of adaptive caches), and
    grows by ``step`` slots where they reach :data:`GROW_AT_RETURNS`. The counts follow the
    rows asked, not the threads or workers that compute them."""

    def __init__(self, keys: int, step: int):
        self.step = int(step)
        self.missed = 0  # misses so far
        self.evicted_at = np.full(keys, np.iinfo(np.int64).min // 2, dtype=np.int64)
        self.window = self.returned = 0

    def grown(self, missing, limit: int, most: int) -> int:
        """Count the misses ``missing`` (rows not cached, about to be fetched); the limit
        after them: ``limit``, or ``limit + step`` (at most ``most``) where a window of
        ``limit`` misses saw enough rows come back."""
        self.returned += int(np.count_nonzero(self.evicted_at[missing] > self.missed - self.step))
        self.missed += missing.size
        self.window += missing.size
        if self.window < limit:
            return limit
        grow = self.returned >= GROW_AT_RETURNS * self.window
        self.window = self.returned = 0
        return min(most, limit + self.step) if grow else limit

    def evicted(self, rows) -> None:
        """Rows ``rows`` left the cache now."""
        self.evicted_at[rows] = self.missed


class _Writing:
    """Rows being written into a cache (:meth:`RowCache.begin_write`): :meth:`join` takes
    the caller's share, waits for the rest and counts the seconds since they began; rows
    that failed leave the cache."""

    def __init__(self, cache, idx, begun, started):
        self.cache, self.idx, self.begun, self.started = cache, idx, begun, started

    def running(self) -> bool:
        """Whether rows are still being computed on other threads (the caller's share
        waits for :meth:`join`)."""
        return self.begun is not None and self.begun.running()

    def join(self) -> None:
        begun, self.begun = self.begun, None
        try:
            if begun is not None:
                begun.join()
        except BaseException:
            self.cache.forget(self.idx)
            raise
        finally:
            if self.started is not None:
                self.cache.seconds += time.perf_counter() - self.started
                self.started = None


def keep_row_cache(operator):
    """Have the solves over ``operator`` share one row cache, until the operator is dropped
    (:func:`row_cache`): the rows one solve computed serve the next. A sweep's fold keeps
    its restricted operator for its whole C path (:mod:`muflow.selection.continuation`):
    neighbouring C values work on nearly the same support vectors, whose rows the C before
    computed. Returns ``operator``."""
    operator.kept_row_caches = {}
    return operator


def row_cache(operator, cache_mb: float = DEFAULT_CACHE_MB, max_rows: int | None = None,
              first_rows: int | None = None) -> RowCache:
    """The row cache of one solve over ``operator``: a fresh :class:`RowCache` of at most
    ``max_rows`` rows (``first_rows`` at first, grown while rows come back), or, over an
    operator that keeps one (:func:`keep_row_cache`), the one kept for ``cache_mb`` with its
    rows and its counters reset (so a solve's timings report that solve's fetches); a kept
    cache serves several solves and takes all of ``cache_mb``."""
    kept = getattr(operator, "kept_row_caches", None)
    if kept is None:
        return RowCache(operator, cache_mb, max_rows=max_rows, first_rows=first_rows)
    cache = kept.get(float(cache_mb))
    if cache is None:
        cache = kept[float(cache_mb)] = RowCache(operator, cache_mb, reuse_storage=False)
        cache.kept = True
    cache.fetches, cache.rows_fetched, cache.seconds = 0, 0, 0.0
    return cache


class _Storage(threading.local):
    """One buffer that this thread's row caches, made one after another, write into."""

    depth = 0
    buffer = None
    lent = False


_STORAGE = _Storage()


@contextmanager
def reused_storage():
    """Within it, the row caches that this thread makes one after another (the sub-problems
    of one fit, :func:`muflow.subproblems.solve_on_own_samples`) take their storage from
    one buffer, grown when a cache needs more and freed when the outermost scope ends,
    instead of fresh memory each: the first writes to fresh pages fault and zero them, in
    system time proportional to the cache, where pages already mapped cost nothing more
    (docs/benchmarks.md, "One-vs-one"). A cache made while the buffer is
    lent to another takes fresh memory."""
    _STORAGE.depth += 1
    try:
        yield
    finally:
        _STORAGE.depth -= 1
        if _STORAGE.depth == 0:
            _STORAGE.buffer, _STORAGE.lent = None, False


def hold_storage() -> None:
    """Enter :func:`reused_storage` for the rest of this thread's life (a forked child
    solving one sub-problem after another until its pool ends); once only."""
    if not getattr(_STORAGE, "held", False):
        _STORAGE.held = True
        _STORAGE.depth += 1


def _allocate(shape, dtype) -> tuple[np.ndarray, bool]:
    """Storage of ``shape`` and ``dtype``, and whether it is lent by :func:`reused_storage`."""
    storage = _STORAGE
    if storage.depth == 0 or storage.lent:
        return np.empty(shape, dtype=dtype), False
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if storage.buffer is None or storage.buffer.nbytes < nbytes:
        storage.buffer = None  # the old one goes before the larger one comes
        storage.buffer = np.empty(nbytes, dtype=np.uint8)
    storage.lent = True
    return storage.buffer[:nbytes].view(dtype).reshape(shape), True


def _readable_in_place(K, n, dtype) -> bool:
    """Whether the loops can read rows of ``K`` directly: an in-memory, C-ordered float
    array of the operator's shape (and of the requested dtype, when one is asked)."""
    return (isinstance(K, np.ndarray) and K.shape == (n, n) and K.dtype in (np.float32, np.float64)
            and K.flags.c_contiguous and (dtype is None or np.dtype(dtype) == K.dtype))
