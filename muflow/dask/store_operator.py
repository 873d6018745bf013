"""The distributed Gram operator: K @ V served by Dask workers that hold K's row panels.

:class:`DaskGram` subclasses :class:`muflow.operators.GramOperator`, so every solver runs
against it unchanged. The design avoids per-iteration graph scheduling (a ``dask.array``
matvec over a persisted K builds and schedules a graph for every product):

- K's rows are split into contiguous *shards* aligned with the store's tiles, about one per
  worker. Each shard is owned by a :class:`PanelServer`, a ``distributed`` actor (a
  long-lived object on one worker) that reads its rows from the zarr store itself: the
  blocks of K never pass through the client.
- A product is one direct call per actor (client -> worker, no scheduler, no task): V is
  sent (cast to the store's dtype, like :class:`muflow.operators.DenseGram` does), each
  actor answers ``K[rows] @ V`` for its shards, the client stacks the answers. Batches of
  m problems share that one round trip (V is n x m).
- When a worker's shard does not fit in ``resident_fraction`` of its memory limit, its
  actor keeps nothing resident and streams its rows from the store on every product, one
  tile-row panel at a time (out of core); one panel must fit, or :class:`DaskGram` refuses.
- A call that fails because its worker died is retried: the lost shards get new actors on
  the surviving workers (or on a restarted one), which reload their rows from the store.
  Products are pure functions of V, so the retried product is the same one.

Notes
-----
Memory: ``n**2 * itemsize / n_workers`` bytes per worker when resident; per product the
client holds V and the n x m result, every worker a copy of V.
"""

from __future__ import annotations

import time
import uuid

import numpy as np

from muflow.dask.calls import ActorCall
from muflow.dask.channels import ChannelCall, open_channels, serve
from muflow.dask.scheduler_workers import no_workers_error
from muflow.dask.worker_memory import (WORKER_FRACTION, completed_while_memory_allows,
                                      lost_workers_message, reuse_freed_memory, tightest_worker,
                                      too_little_memory_error)
from muflow.exceptions import MuflowError, MuflowInputError
from muflow.gram.store import GramStore, StoreCorruptError
from muflow.gram.tiling import choose_tile, split_rows
from muflow.memory import worker_memory_limits
from muflow.operators import GramOperator, split_product

#: Share of a worker's memory limit that resident panels may take.
RESIDENT_FRACTION = 0.5

#: A tile-row panel of the Gram store streamed by a panel server (:class:`DaskGram`) takes
#: this many times its bytes on its worker while it is read and multiplied: the panel, the
#: chunks zarr decodes in flight, the finiteness check, and the freed memory the allocator
#: keeps (:data:`muflow.dask.worker_memory.MALLOC_THRESHOLDS`)
STREAM_COPIES = 6


def check_store_fits(client, n: int, itemsize: int = 4) -> None:
    """Refuse, before the Gram store of n samples is built, a cluster whose workers cannot
    stream one of its tile-row panels (:class:`DaskGram`, its shards kept resident only
    where they fit): a panel of the tile the build would choose
    (:func:`muflow.gram.tiling.choose_tile`) takes :data:`STREAM_COPIES` times its bytes, and
    must fit in what the tightest worker has to spare (:func:`too_little_memory_error`);
    otherwise the build pauses the workers, or the panel servers push them past their limit
    and the nanny restarts them again and again. Nothing is checked without limits."""
    tightest = tightest_worker(client)
    if tightest is None:
        return
    limit, used = tightest
    n_workers = max(1, len(worker_memory_limits(client)))
    tile = choose_tile(int(n), itemsize, limit, n_workers)
    needed = STREAM_COPIES * tile * int(n) * itemsize
    if needed > WORKER_FRACTION * limit - used:
        raise too_little_memory_error(
            f"the Gram store of {int(n):,} samples, served from the store by the workers, needs "
            f"{needed / 2**20:.0f} MB on each (a streamed panel of {tile} rows of K and its reading)",
            limit, used)


class PanelServer:
    """Actor on one worker: owns row shards of K, loaded from the store by the worker.

    Parameters
    ----------
    url : str
        Path or fsspec URL of the Gram store.
    shards : list of (int, int)
        Row ranges ``[start, stop)`` this actor serves.
    resident : bool
        Keep the rows in memory (otherwise read them from the store on every call).
    storage_options : dict, optional
        Of the file system of an fsspec ``url`` (:attr:`GramStore.storage_options`).
    """

    def __init__(self, url, shards, resident, tile, storage_options=None):
        reuse_freed_memory()  # the products' temporaries reuse freed memory (worker_memory)
        self.url = url
        self.store = GramStore.open(url, mode="r", storage_options=storage_options)
        self.array = self.store.array
        self.shards = [tuple(map(int, s)) for s in shards]
        self.resident = bool(resident)
        self.tile = int(tile)
        self.panels = {}
        if self.resident:  # every chunk's checksum verified as it loads
            for r0, r1 in self.shards:
                self.panels[(r0, r1)] = np.ascontiguousarray(self.store.read_block(r0, r1))
        self.calls = 0

    def _blocks(self, shard):
        """(row offset, rows of K) for one shard: the resident panel or streamed panels."""
        r0, r1 = shard
        if self.resident:
            yield r0, self.panels[shard]
            return
        for start in range(r0, r1, self.tile):
            yield start, self.store.read_block(start, min(r1, start + self.tile))

    def info(self):
        import os

        nbytes = sum(p.nbytes for p in self.panels.values())
        return {"pid": os.getpid(), "shards": self.shards, "resident": self.resident,
                "nbytes": nbytes}

    def matmul(self, V, parts=False):
        """``[(start, K[start:stop] @ V)]`` (or ``(K+ @ V, K- @ V)`` with ``parts``)."""
        self.calls += 1
        out = []
        for shard in self.shards:
            for start, block in self._blocks(shard):
                out.append((start, split_product(block, V) if parts else block @ V))
        return out

    def columns(self, idx):
        """``[(start, K[start:stop, idx])]``: K is symmetric, so these are rows idx of K."""
        idx = np.asarray(idx)
        out = []
        for shard in self.shards:
            r0, r1 = shard
            if self.resident:
                out.append((r0, self.panels[shard][:, idx]))
            else:
                out.append((r0, self._verified(lambda: self.array.get_orthogonal_selection(
                    (slice(r0, r1), idx)), r0, r1)))
        return out

    def _verified(self, read, r0, r1):
        """A streamed read whose chunks fail their checksum (or are missing) names them."""
        try:
            values = np.asarray(read())
        except Exception:
            raise self.store.damaged_error(r0, r1, 0, self.store.n) from None
        if not np.all(np.isfinite(values)):
            raise self.store.damaged_error(r0, r1, 0, self.store.n)
        return values

    def diagonal(self):
        out = []
        for shard in self.shards:
            r0, r1 = shard
            rows = np.arange(r0, r1)
            if self.resident:
                out.append((r0, self.panels[shard][rows - r0, rows]))
            else:
                out.append((r0, self._verified(
                    lambda: self.array.get_coordinate_selection((rows, rows)), r0, r1)))
        return out

    def release(self):
        self.panels.clear()
        return True

    def open_channel(self):
        """A direct channel from the client to this server (:mod:`muflow.dask.channels`):
        ``(host, port, key)``."""
        return serve(self)


class DaskGram(GramOperator):
    """K @ V on a Dask cluster, K's row panels resident on (or streamed by) the workers.

    Parameters
    ----------
    store : GramStore or str
        A complete Gram store; a path or URL opens it bare: for a URL whose file system needs
        options, ``GramStore.open(url, storage_options=...)`` (the store carries them).
    client : distributed.Client
    nonnegative : bool, optional
        Whether K has no negative entry; read from the kernel (rbf, laplacian, even poly)
        or, failing that, computed on the workers.
    resident_fraction : float, default=0.5
        Share of each worker's memory limit that its resident rows may take; a shard above
        it is streamed from the store on every product instead.
    n_shards : int, optional
        Row shards (default: one per worker).
    max_retries : int, default=3
        Times a product is retried after losing workers.
    owns_client : bool, default=False
        Close ``client`` with the operator (:meth:`close`): true when the operator's
        creator opened the client for it (:func:`muflow.backends.gram_operator` given a
        scheduler address).

    Attributes
    ----------
    n : int
    nonnegative : bool
    dtype : numpy dtype of the stored K
    resident : bool
        True when every shard is held in worker memory.
    seconds : float
        Time spent in products (client side, communication included).
    products, recoveries : int
    """

    def __init__(self, store, client, *, nonnegative=None, resident_fraction=RESIDENT_FRACTION,
                 n_shards=None, max_retries=3, wait_seconds=0.2, owns_client=False):
        if isinstance(store, str):
            store = GramStore.open(store, mode="r")
        missing = store.missing_tiles()
        if missing:
            raise MuflowInputError(
                f"Gram store {store.url} is incomplete ({len(missing)} tiles missing); build "
                "it first (python -m muflow gram, or muflow.gram.ensure_gram)")
        self.store = store
        self.client = client
        self.owns_client = bool(owns_client)
        self.n = store.n
        self.dtype = np.dtype(store.dtype)
        self.resident_fraction = float(resident_fraction)
        self.max_retries = int(max_retries)
        self.wait_seconds = float(wait_seconds)
        self.seconds = 0.0
        self.products = 0
        self.recoveries = 0
        self._actors = {}  # shard -> (future, actor, address)
        self._channels = {}  # shard -> its actor's channel (muflow.dask.channels), where open
        self._resident_of = {}
        limits = worker_memory_limits(client)
        if not limits:
            raise no_workers_error()
        shards = split_rows(self.n, store.tile, n_shards or len(limits))
        self._check_panel_fits(limits)
        for shard, address in zip(shards, self._placement(shards, limits)):
            self._start(shard, address, limits)
        self._wait_started(list(self._actors))
        self.resident = all(self._resident_of.get(s, False) for s in self._actors)
        if nonnegative is None:
            k = store.kernel
            always = k.name in ("rbf", "laplacian") or (k.name == "poly" and int(k.degree) % 2 == 0)
            if always and k.offset >= 0:
                nonnegative = True
            else:  # one pass over K on the workers: any negative entry?
                _, neg = self.matmul_parts_raw(np.ones((self.n, 1)))
                nonnegative = not bool((neg > 0).any())
        self.nonnegative = bool(nonnegative)

    # -- placement ------------------------------------------------------------------------
    def _check_panel_fits(self, limits):
        panel = self.store.tile * self.n * self.dtype.itemsize
        usable = [m * self.resident_fraction for m in limits.values() if m]
        if usable and max(usable) < panel:
            raise MuflowInputError(
                f"worker memory is too small for one panel of K: a panel of {self.store.tile} "
                f"rows takes {panel / 2**20:.1f} MiB, workers allow {max(usable) / 2**20:.1f} "
                f"MiB ({self.resident_fraction:g} of their memory limit); give workers more "
                "memory (--memory-limit) or rebuild the store with a smaller --tile")

    def _placement(self, shards, limits):
        addrs = sorted(limits)
        return [addrs[k % len(addrs)] for k in range(len(shards))]

    def _start(self, shard, address, limits):
        rows = shard[1] - shard[0]
        limit = limits.get(address) or 0
        held = sum(s[1] - s[0] for s, (_, _, a) in self._actors.items()
                   if a == address and self._resident_of.get(s))
        resident = (not limit) or (rows + held) * self.n * self.dtype.itemsize <= limit * self.resident_fraction
        future = self.client.submit(
            PanelServer, self.store.url, [shard], resident, self.store.tile,
            self.store.storage_options, actor=True,
            workers=[address], allow_other_workers=True, pure=False,
            key=f"muflow-panels-{uuid.uuid4().hex[:8]}-{shard[0]}-{shard[1]}")
        self._actors[shard] = (future, None, address)
        self._resident_of[shard] = resident

    def _wait_started(self, shards, attempts=3):
        """Wait for the new actors (their panels loaded); restart those whose worker died."""
        lost = set()
        for shard in shards:
            future, _, address = self._actors[shard]
            try:
                # workers paused for memory never start it: refused in words, not waited on forever
                for _ in completed_while_memory_allows(self.client, [future], "the panel servers"):
                    pass
                with self.client.as_current():  # its calls go through this client
                    actor = future.result()
            except (StoreCorruptError, MuflowError):
                raise
            except Exception:
                if attempts <= 0:
                    raise MuflowError(lost_workers_message(
                        self.client, 4, "the Gram store's panel servers")) from None
                lost.add(shard)
                continue
            # the scheduler may have placed it elsewhere when the chosen worker went away
            address = getattr(actor, "_address", address)
            self._actors[shard] = (future, actor, address)
            self._open_channel(shard, actor)
        if lost:
            self._recover(lost, attempts=attempts - 1)

    def _open_channel(self, shard, actor):
        """The shard's channel (:mod:`muflow.dask.channels`), where the cluster allows one;
        its calls go there instead of through ``distributed``'s event loops."""
        old = self._channels.pop(shard, None)
        if old is not None:
            old.close()
        channel, = open_channels(self.client, [actor])
        if channel is not None:
            self._channels[shard] = channel

    # -- calls with recovery ----------------------------------------------------------------
    def _gather(self, method, *args):
        """Call ``method`` on every actor, one round trip; recover lost shards and retry."""
        for attempt in range(self.max_retries + 1):
            calls, on_channels, lost = {}, {}, set()
            for shard, (_, actor, _) in self._actors.items():
                channel = self._channels.get(shard)
                try:
                    if channel is not None:
                        on_channels[shard] = ChannelCall(channel, method, *args)
                    else:
                        calls[shard] = ActorCall(actor, method, *args)
                except Exception:  # "Worker holding Actor was lost"
                    lost.add(shard)
            failed, results = self._collect(calls) if calls else (set(), [])
            for shard, call in on_channels.items():
                answer = call.receive()
                if isinstance(answer, StoreCorruptError):
                    raise answer
                if isinstance(answer, BaseException):
                    failed.add(shard)
                else:
                    results.extend(answer)
            failed |= lost
            if not failed:
                return results
            if attempt == self.max_retries:
                break
            self._recover(failed)
        raise MuflowError(lost_workers_message(self.client, self.max_retries + 1,
                                               "the Gram store's panel servers"))

    def _collect(self, calls):
        """Wait for every call in one event-loop wait; a shard whose actor's future is no
        longer "finished" (its worker was lost) or whose call raised counts as failed; the
        arrays the calls sent are let go then (:class:`muflow.dask.calls.ActorCall`)."""
        try:
            return self.client.sync(self._collect_async, calls)
        finally:
            for call in calls.values():
                call.release()

    async def _collect_async(self, calls):
        import asyncio

        results, failed = [], set()
        tasks = {asyncio.ensure_future(call._result()): shard for shard, call in calls.items()}
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, timeout=self.wait_seconds)
            for task in done:
                try:
                    results.extend(task.result())
                except StoreCorruptError:
                    for other in pending:
                        other.cancel()
                    raise
                except Exception:
                    failed.add(tasks[task])
            for task in list(pending):
                if self._actors[tasks[task]][0].status != "finished":
                    failed.add(tasks[task])
                    pending.discard(task)
                    task.cancel()
        return failed, results

    def _recover(self, failed, attempts=3):
        self.recoveries += 1
        for shard in failed:
            future, _, _ = self._actors.pop(shard)
            future.release()
            channel = self._channels.pop(shard, None)
            if channel is not None:
                channel.close()
        deadline = time.monotonic() + 60
        while True:
            limits = worker_memory_limits(self.client)
            alive = {a: m for a, m in limits.items()}
            if alive:
                break
            if time.monotonic() > deadline:
                raise MuflowError("all Dask workers were lost and none came back within 60 s")
            time.sleep(0.2)
        load = {a: 0 for a in alive}
        for s, (_, _, a) in self._actors.items():
            if a in load:
                load[a] += s[1] - s[0]
            else:  # its worker is gone too: move it as well
                failed = set(failed) | {s}
        for s in failed:
            if s in self._actors:
                self._actors.pop(s)[0].release()
        for shard in sorted(failed):
            address = min(load, key=load.get)
            load[address] += shard[1] - shard[0]
            self._start(shard, address, limits)
        self._wait_started(sorted(failed), attempts=attempts)

    # -- GramOperator -----------------------------------------------------------------
    def _assemble(self, pieces, m):
        out = np.empty((self.n, m), dtype=np.float64)
        for start, block in pieces:
            out[start:start + len(block)] = block
        return out

    def _operand(self, V, dtype=None):
        V = np.asarray(V)
        if V.ndim != 2 or V.shape[0] != self.n:
            raise MuflowInputError(f"V must have shape ({self.n}, m), got {V.shape}")
        return np.ascontiguousarray(V, dtype=self.dtype if dtype is None else dtype)

    def matmul(self, V, *, _dtype=None):
        t = time.perf_counter()
        V = self._operand(V, _dtype)
        out = self._assemble(self._gather("matmul", V), V.shape[1])
        self.seconds += time.perf_counter() - t
        self.products += 1
        return out

    def matmul_precise(self, V):
        """``K @ V`` summed in float64 on the workers (V is sent in float64, so a float32
        block is widened there): the subset solvers' exact gradient, as
        :meth:`muflow.operators.DenseGram.matmul_precise`."""
        return self.matmul(V, _dtype=np.float64)

    def matmul_parts(self, V):
        t = time.perf_counter()
        V = self._operand(V)
        if self.nonnegative:
            pos = self._assemble(self._gather("matmul", V), V.shape[1])
            neg = np.zeros_like(pos)
        else:
            pieces = self._gather("matmul", V, True)
            pos = self._assemble([(s, p) for s, (p, _) in pieces], V.shape[1])
            neg = self._assemble([(s, q) for s, (_, q) in pieces], V.shape[1])
        self.seconds += time.perf_counter() - t
        self.products += 1
        return pos, neg

    def rows(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        cols = self._assemble(self._gather("columns", idx), len(idx))
        return np.ascontiguousarray(cols.T)

    def diagonal(self):
        pieces = self._gather("diagonal")
        out = np.empty(self.n)
        for start, d in pieces:
            out[start:start + len(d)] = d
        return out

    def matmul_parts_raw(self, V):
        pieces = self._gather("matmul", self._operand(V), True)
        m = V.shape[1]
        return (self._assemble([(s, p) for s, (p, _) in pieces], m),
                self._assemble([(s, q) for s, (_, q) in pieces], m))

    # -- lifetime ---------------------------------------------------------------------
    def info(self):
        """Where each shard lives: [(shard, address, resident)]."""
        return [(s, a, self._resident_of.get(s)) for s, (_, _, a) in sorted(self._actors.items())]

    def close(self):
        """Release the panel servers, and the client when the operator owns it."""
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for future, _, _ in self._actors.values():
            try:
                future.release()
            except Exception:
                pass
        self._actors.clear()
        if self.owns_client:
            self.owns_client = False
            self.client.close()

    def __repr__(self):
        return (f"DaskGram(n={self.n}, dtype={self.dtype}, shards={len(self._actors)}, "
                f"resident={self.resident}, store={self.store.url!r})")
