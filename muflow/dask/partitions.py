"""X partitioned by rows over Dask workers: the partitions (actors) and the operator on them.

X stays where it lives (issue 17): it is split by rows into partitions, each owned by a
:class:`RowPartition`, a ``distributed`` actor (a long-lived object on one worker) that
keeps its rows of X, a :class:`~muflow.solvers.rowcache.RowCache` of kernel rows over its
columns and, for the column being solved, its slices of y, the bounds, the linear term,
alpha and the gradient G, and its active set. :class:`DaskRowPartitions` is the operator
(:class:`~muflow.operators.GramOperator`) over them: products and rows of K computed where
the rows are, and the home of the working-set loop's state
(:meth:`DaskRowPartitions.working_set_home`, :mod:`muflow.dask.working_set`).

A worker lost mid-fit is replaced (:meth:`DaskRowPartitions.recover`): its partitions are
started again from their source and given their state back by the caller, and the call is
made again (:meth:`DaskRowPartitions.retrying`).

Notes
-----
Memory per worker: its rows of X, the row cache (``cache_mb``; it must hold one working
set's rows, q n_p 4 bytes above 4096 samples), a few vectors of its rows.
docs/scaling.md gives the cost of an iteration as a function of n, d, q and the workers.
"""

from __future__ import annotations

import uuid

import numpy as np
import scipy.sparse as sp

from muflow.dask.calls import ActorCall, LostPartitions, answers, method_error
from muflow.dask.channels import ChannelCall, open_channels, serve
from muflow.dask.offered_rows import OfferedRows
from muflow.dask.row_blocks import (copy_everywhere, copy_fits, held_form, homes, row_blocks,
                                    stacked)
from muflow.dask.worker_memory import (cache_to_fit_workers, lost_workers_message,
                                      reuse_freed_memory)
from muflow.dask.candidates import stack_rows
from muflow.dask.partition_column import PartitionColumn
from muflow.dask.working_set import PartitionedHome
from muflow.exceptions import MuflowError, MuflowInputError
from muflow.inmemory import gram_dtype
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.operators import GramOperator
from muflow.solvers._working_set_compiled import Threads
from muflow.solvers.rowcache import (DEFAULT_CACHE_MB, RowCache, working_set_first_rows,
                                     working_set_rows)
from muflow.threads import dask_worker_threads

#: Largest kernel block K(X_B, X_p) an actor holds at once in a product (bytes, float64).
BLOCK_BYTES = 64 << 20

#: Rows of X a product sends to the partitions at once (bytes of float64 values): the
#: client holds one piece of the support's rows, not all of them
#: (:meth:`DaskRowPartitions.product`), twice while it comes (the partitions' answers and
#: the piece); a few round trips a megabyte of rows, and the sums do not depend on it
#: (:meth:`RowPartition.product_add`).
PRODUCT_BYTES = 1 << 18

#: Partitions lost with their workers are restarted at most this many times in a row.
MAX_RECOVERIES = 3


class RowPartition(PartitionColumn):
    """Actor on one worker: rows ``[lo, lo + len(X))`` of X, their row cache, and one
    column's working-set state on them (:class:`muflow.dask.partition_column.PartitionColumn`).

    Parameters
    ----------
    X : ndarray or CSR matrix
        The partition's rows (from a scattered array, a dask.array block or a dataframe
        partition: passed by the scheduler where it already lives).
    lo : int
        Global index of its first row.
    kernel : dict
        :meth:`muflow.kernels.Kernel.to_dict`.
    n_total : int
        Samples over all partitions.
    cache_mb : float
        The row cache's memory; ``max_rows``, its most rows, ``first_rows`` the rows it
        holds at first (:meth:`set_cache_mb`).
    whole : list, optional
        The pieces of a copy of all of X, in row order
        (:func:`muflow.dask.row_blocks.copy_everywhere`): the rows of each working set
        are then taken from it, not sent with the calls (:attr:`X_all`).
    """

    def __init__(self, X, lo, kernel, n_total, cache_mb=DEFAULT_CACHE_MB, max_rows=None,
                 first_rows=None, whole=None):
        # each iteration's temporaries reuse freed memory, on any cluster (worker_memory)
        self.malloc_thresholds = reuse_freed_memory()
        self.X = held_form(X)
        self.lo = int(lo)
        self.n = self.X.shape[0]
        #: all of X (float64, as X_p), or None: the calls then carry the rows they need
        self.X_all = None if whole is None else stacked(whole)
        values = self.X.data if sp.issparse(self.X) else self.X
        if not np.all(np.isfinite(values)):
            raise ValueError(f"Input X contains NaN or infinity (in rows {self.lo} to "
                             f"{self.lo + self.n - 1}); remove or impute them before fitting")
        self.kernel = Kernel.from_dict(kernel)
        self.QD = np.ascontiguousarray(self.kernel.diagonal(self.X), dtype=np.float64)
        self.products = 0
        # kernel rows as in process (muflow.kernel_rows): float64 to 4096 samples, float32 above
        self.n_threads = worker_threads()
        self.rows_op = KernelRows(self.X, self.kernel, dtype=gram_dtype(int(n_total)),
                                  n_threads=self.n_threads)
        self.dtype = self.rows_op.dtype
        self.n_total = int(n_total)
        self.offered = OfferedRows(self.rows_op, self.lo)
        self.cache = RowCache(self.offered, cache_mb, self.dtype, n_keys=self.n_total,
                              max_rows=max_rows, first_rows=first_rows)
        self.threads = Threads(self.n_threads)
        self._pending = None  # rows begun on the other threads (PartitionColumn.prefetch)
        self._K_BB = np.empty(0, dtype=self.dtype)  # the subproblem's block, reused
        self.seconds = dict.fromkeys(("rows", "rows_behind", "gradient", "candidates", "iterate",
                                      "subproblem"), 0.0)

    # -- the kernel on this partition's rows --------------------------------------------
    def _accumulate(self, XB, coef, out) -> None:
        """``out += K(X_B, X_p)' coef`` (coef of shape (|B|,) or (|B|, m)): the block computed
        in row chunks of :attr:`_step` rows, added one chunk after the other."""
        step = self._step
        for s in range(0, XB.shape[0], step):
            block = np.empty((min(step, XB.shape[0] - s), self.n))
            self.kernel.block_into(XB[s:s + step], self.X, block)
            out += block.T @ coef[s:s + step]

    @property
    def _step(self) -> int:
        """Rows of X_B per chunk of a product: a block of at most BLOCK_BYTES."""
        return max(1, BLOCK_BYTES // (8 * max(self.n, 1)))

    # -- a product K(X_p, X_S) coef whose rows X_S come in pieces ---------------------------
    def product_start(self, tail) -> None:
        """Begin a product whose coefficients have shape (|S|,) + ``tail``."""
        self._product = [np.zeros((self.n,) + tuple(tail)), None, None]

    def product_add(self, XS, coef) -> None:
        """The next rows of X_S and their coefficients: every whole chunk of :attr:`_step`
        rows is added, the rest waits for the next piece, so that the chunks, and the sums,
        are those of one call with all the rows (:meth:`_accumulate`)."""
        out, held_X, held_c = self._product
        coef = np.asarray(coef, dtype=np.float64)
        if held_X is not None:
            XS, coef = stack_rows([held_X, XS]), np.concatenate([held_c, coef])
        whole = XS.shape[0] // self._step * self._step
        self._accumulate(XS[:whole], coef[:whole], out)
        self._product[1:] = (XS[whole:], coef[whole:]) if whole < XS.shape[0] else (None, None)

    def product_add_at(self, idx, coef) -> None:
        """:meth:`product_add` of the rows ``idx`` of this partition's copy of X."""
        self.product_add(self.X_all[np.asarray(idx, dtype=np.int64)], coef)

    def product_end(self) -> np.ndarray:
        """The product: K(X_p, X_S) coef."""
        out, held_X, held_c = self._product
        if held_X is not None:
            self._accumulate(held_X, held_c, out)
        self._product = None
        self.products += 1
        return out

    def kernel_rows(self, XR):
        """``K(X_R, X_p)``: the columns of this partition of the rows R (float64)."""
        block = np.empty((XR.shape[0], self.n))
        return self.kernel.block_into(XR, self.X, block)

    def set_cache_mb(self, cache_mb, max_rows=None, first_rows=None) -> int:
        """Size the row cache anew (``SVC(cache_size=...)``, at most ``max_rows`` rows,
        ``first_rows`` at first: :func:`muflow.solvers.rowcache.working_set_rows` and
        :func:`~muflow.solvers.rowcache.working_set_first_rows`); its slots."""
        self.settle()
        self.cache = RowCache(self.offered, cache_mb, self.dtype, n_keys=self.n_total,
                              max_rows=max_rows, first_rows=first_rows)
        return self.cache.slots

    def info(self):
        self.settle()
        return {"lo": self.lo, "n": self.n, "products": self.products,
                "rows_computed": self.offered.rows_computed, "cache_slots": self.cache.slots,
                "cache_limit": self.cache.limit, "seconds": dict(self.seconds),
                "row_seconds": self.rows_op.row_seconds,
                "malloc_thresholds": self.malloc_thresholds}

    def diagonal(self):
        return self.QD

    def open_channel(self):
        """A direct channel from the client to this partition (:mod:`muflow.dask.channels`):
        ``(host, port, key)``; its calls run under the worker's threads."""
        return serve(self)

    def rows(self, local):
        return self.X[np.asarray(local, dtype=np.int64)]


def worker_threads() -> int:
    """The threads of the Dask worker this runs on (its ``nthreads``): a partition computes
    its rows, updates its gradient and scans its candidates on all of them, a range of its
    columns each; 1 outside a worker."""
    return max(1, dask_worker_threads() or 1)


class DaskRowPartitions(GramOperator):
    """X split by rows over the workers of ``client``, one :class:`RowPartition` each; as a
    :class:`~muflow.operators.GramOperator`, K computed where the rows are (a product
    ``K @ V`` sends the rows of X where V is non-zero, rows of K come back).

    Parameters
    ----------
    X : ndarray, CSR matrix, dask.array or dask.dataframe
        NumPy and SciPy data are split into one contiguous partition per worker and
        scattered once; a dask collection's row blocks (dataframe: partitions) become the
        partitions where they already are (:func:`muflow.dask.row_blocks.row_blocks`).
    kernel : Kernel
    client : distributed.Client
    owns_client : bool, default=False
        Close ``client`` with the operator.
    cache_mb : float, default=256
        Kernel rows each worker caches (libsvm's ``cache_size``), in MB.
    copy_x : bool, optional
        Whether every worker holds a copy of all of X, so that an iteration's calls carry
        the working set's indices instead of its rows
        (:mod:`muflow.dask.row_blocks`); default: where X is small enough
        (:func:`~muflow.dask.row_blocks.copy_fits`). Never with one partition.
    subproblems : bool, default=False
        For the working-set solver: NumPy and SciPy data give :attr:`solver` fewer rows
        (:func:`muflow.dask.row_blocks.solver_share`); False: equal blocks.
    """

    product_dtype = np.dtype(np.float64)  # float64 blocks summed (RowPartition._accumulate)

    def __init__(self, X, kernel: Kernel, client, *, owns_client=False, cache_mb=DEFAULT_CACHE_MB,
                 copy_x=None, subproblems=False):
        self.client = client
        self.owns_client = bool(owns_client)
        self.kernel = kernel
        self.cache_mb = float(cache_mb)
        self._rows_bound = (None, None)  # the working sets' (most, first) rows of the row caches
        self._source = X
        self.d = int(X.shape[1]) if len(X.shape) > 1 else 1
        self._blocks_of, bounds, self._from_dask, nbytes = row_blocks(client, X, subproblems)
        self.bounds = bounds
        self.n = bounds[-1][1] if bounds else 0
        #: whether every worker holds a copy of X (the calls then carry indices, not rows)
        self.copied = (copy_fits(client, nbytes, len(bounds)) if copy_x is None
                       else bool(copy_x) and len(bounds) >= 2)
        self._copy = copy_everywhere(client, X, self._blocks_of, self._from_dask) if self.copied else None
        self._homes = homes(client, self._blocks_of) if self.copied else [None] * len(bounds)
        # a CSR X given here, held as the partitions hold it where they get copies (rows_here)
        self._local = stacked([X]) if self.copied and sp.issparse(X) else None
        self.recoveries = 0
        self.dtype = gram_dtype(self.n)  # of the workers' kernel rows (muflow.kernel_rows)
        self.cache_mb = cache_to_fit_workers(client, X, bounds, self.dtype, self.cache_mb,
                                             copy_bytes=nbytes if self.copied else 0)
        futures = [self._start(i) for i in range(len(bounds))]
        # actor calls go through the current client (get_client()): this one, not the default
        with self.client.as_current():
            self.actors = self.client.gather(futures)
        self._futures = futures
        self.channels = [None] * len(self.actors)
        self._open_channels(range(len(self.actors)))
        self.nonnegative = kernel.name in ("rbf", "laplacian") and kernel.offset >= 0

    def _start(self, i):
        """Start the actor of partition i on its rows: a dask block where it is (the
        scheduler recomputes a lost one from its graph), NumPy rows scattered afresh."""
        lo, hi = self.bounds[i]
        home = {} if self._homes[i] is None else {"workers": [self._homes[i]], "allow_other_workers": True}
        return self.client.submit(RowPartition, self._block(i), lo, self.kernel.to_dict(), self.n,
                                  self.cache_mb, *self._rows_bound, whole=self._whole_copy(),
                                  actor=True, pure=False, **home,
                                  key=f"muflow-rows-{uuid.uuid4().hex[:8]}-{lo}-{hi}")

    def _whole_copy(self):
        """The pieces of the workers' copy of X (None without one); NumPy data sent to
        every worker again where all its copies were lost."""
        if self._copy is None:
            return None
        if not self._from_dask and self._copy[0].status != "finished":
            self._copy = copy_everywhere(self.client, self._source, None, False)
        return self._copy

    def _block(self, i):
        """The rows of partition i on the workers: a dask block (the scheduler recomputes a
        lost one from its graph), or NumPy rows, scattered again when they were lost."""
        block = self._blocks_of[i]
        if block is None or (not self._from_dask and block.status != "finished"):
            lo, hi = self.bounds[i]
            block = self._blocks_of[i] = self.client.scatter(self._source[lo:hi], hash=False)
        return block

    def recover(self, lost) -> None:
        """New actors for the partitions ``lost`` (their worker died), on the workers left
        or restarted: their rows reloaded from the source (:meth:`_start`). The caller
        gives them their column state again (:meth:`RowPartition.begin`)."""
        self.recoveries += 1
        for i in lost:
            if not self._from_dask:  # scattered rows died with their worker
                self._blocks_of[i] = None
            self._futures[i] = self._start(i)
            with self.client.as_current():
                self.actors[i] = self._futures[i].result()
        self._open_channels(lost)

    def retrying(self, call, *, restart=None, again=None):
        """``call()``; when partitions are lost with their workers, start them again from
        their source (:meth:`recover`), hand them their state back (``restart(lost)``) and
        make ``again()`` (default: the same call), at most :data:`MAX_RECOVERIES` times in
        a row."""
        lost = None
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                if attempt:
                    self.recover(lost)
                    if restart is not None:
                        restart(lost)
                return call() if attempt == 0 else (again or call)()
            except LostPartitions as exc:
                lost = exc.lost
            except (MuflowError, MuflowInputError, ValueError, TypeError):
                raise
            except Exception as exc:  # noqa: BLE001  whatever distributed raises for a lost actor
                from muflow.exceptions import lost_scheduler_error

                if getattr(exc, "raised_by_method", False):  # a method's own error (wait)
                    raise
                if getattr(self.client, "status", "running") != "running":
                    raise lost_scheduler_error(self.client) from None
                lost = list(range(len(self.bounds)))
        raise MuflowError(lost_workers_message(self.client, MAX_RECOVERIES + 1)) from None

    #: X lives on the workers: solvers keep their state there
    partitioned = True

    def working_set_home(self, cache_mb=None, q=None) -> PartitionedHome:
        """The home of the working-set loop's state on these partitions
        (:func:`muflow.solvers.working_set.solve_working_set` asks for it); ``cache_mb``,
        when given, resizes every partition's row cache, and working sets of ``q`` bound
        it (:func:`muflow.solvers.rowcache.working_set_rows`,
        :func:`~muflow.solvers.rowcache.working_set_first_rows`)."""
        cache_mb = self.cache_mb if cache_mb is None else float(cache_mb)
        bound = (working_set_rows(q), working_set_first_rows(q))
        if (cache_mb, bound) != (self.cache_mb, self._rows_bound):
            self.cache_mb, self._rows_bound = cache_mb, bound
            self.call("set_cache_mb", self.cache_mb, *bound)
        return PartitionedHome(self)

    def _open_channels(self, which) -> None:
        """Direct channels to the partitions ``which`` (:mod:`muflow.dask.channels`), where
        the cluster allows them; a partition whose channel does not open keeps
        ``distributed``'s calls."""
        which = list(which)
        for i in which:
            if self.channels[i] is not None:
                self.channels[i].close()
        opened = open_channels(self.client, [self.actors[i] for i in which])
        for i, channel in zip(which, opened):
            self.channels[i] = channel

    def send(self, i, method, *args):
        """Call ``method(*args)`` on partition i, on its channel where it has one, else as
        an actor call; :meth:`wait` takes the answers."""
        channel = self.channels[i]
        if channel is not None:
            return ChannelCall(channel, method, *args)
        return ActorCall(self.actors[i], method, *args)

    def call(self, method, *args):
        """``method(*args)`` on every partition in one round trip; answers in partition
        order."""
        return self.wait([self.send(i, method, *args) for i in range(len(self.actors))])

    def wait(self, calls) -> list:
        """The answers of calls made by :meth:`send`: actor calls
        (:class:`muflow.dask.calls.ActorCall`) awaited together in the client's event loop
        (each call's own ``result()`` keeps the client's thread busy, taking a core from
        the workers; the arrays they sent are let go then), and channel calls read on this
        thread.

        Raises
        ------
        LostPartitions
            When calls failed because their worker is gone (the others' answers are lost);
            a closed scheduler raises :class:`muflow.exceptions.SchedulerLostError`.
        """
        from muflow.exceptions import lost_scheduler_error

        by_actor = [c for c in calls if not isinstance(c, ChannelCall)]
        from_actors = iter(self.client.sync(answers, by_actor) if by_actor else ())
        got = [c.receive() if isinstance(c, ChannelCall) else next(from_actors) for c in calls]
        lost = [i for i, a in enumerate(got) if isinstance(a, BaseException)]
        if lost:
            if getattr(self.client, "status", "running") != "running":
                raise lost_scheduler_error(self.client)
            own = [got[i] for i in lost if method_error(got[i], self.actors[i], self.client)]
            if own:  # the call's own error, not a lost worker (retrying raises it too)
                own[0].raised_by_method = True
                raise own[0]
            raise LostPartitions(lost)
        return got

    @property
    def solver(self) -> int:
        """The partition that solves each working set's subproblem for all
        (:meth:`muflow.dask.partition_column.PartitionColumn.solve`): the first of fewest rows."""
        return int(np.argmin([hi - lo for lo, hi in self.bounds]))

    def pipelined(self, i) -> bool:
        """Whether partition i takes a call before its last is answered (its channel)."""
        return self.channels[i] is not None

    @property
    def _dense_here(self) -> bool:
        """Whether X was given here as a dense NumPy array."""
        return not self._from_dask and isinstance(self._source, np.ndarray)

    @property
    def rows_here(self) -> bool:
        """Whether this process holds X: given as a dense NumPy array, or as CSR where the
        workers hold copies (:attr:`copied`): its rows need not travel from the workers
        (:meth:`take`, the working set's candidates, X_B sent to each worker less its own
        rows)."""
        return self._dense_here or self._local is not None

    def take(self, idx) -> np.ndarray:
        """Rows ``idx`` of X (dense or CSR) as the partitions hold them (float64): from this
        process's X where it is here (:attr:`rows_here`), else fetched from their
        partitions."""
        idx = np.asarray(idx, dtype=np.int64)
        if self._local is not None:
            return self._local[idx]
        if self._dense_here:
            return held_form(self._source[idx])
        futures = []
        for i, (lo, hi) in enumerate(self.bounds):
            where = np.flatnonzero((idx >= lo) & (idx < hi))
            if where.size or not futures:
                futures.append((where, self.send(i, "rows", idx[where] - lo)))
        answers = self.wait([f for _, f in futures])
        if any(sp.issparse(r) for r in answers):
            got = stack_rows(answers)  # row k is idx[positions[k]]
            positions = np.concatenate([w for w, _ in futures])
            return got[np.argsort(positions)] if idx.size else got
        out = np.empty((idx.size,) + answers[0].shape[1:], dtype=answers[0].dtype)
        for k, (where, _) in enumerate(futures):  # one copy, each row in its place
            out[where] = answers[k]
            answers[k] = None  # and its message let go
        return out

    def product(self, idx, coef, *, which=None) -> None:
        """Begin ``K(X_p, X[idx]) coef`` on the partitions ``which`` (default all): the rows
        of X ``idx`` are fetched and sent in pieces of about :data:`PRODUCT_BYTES`
        (:meth:`RowPartition.product_add`), so that this process never holds them all;
        each partition's ``product_end`` gives its part."""
        which = range(len(self.actors)) if which is None else which
        coef = np.asarray(coef, dtype=np.float64)
        self.wait([self.send(i, "product_start", coef.shape[1:]) for i in which])
        piece = max(1, PRODUCT_BYTES // (8 * max(self.d, 1)))
        # where the workers hold copies of X, the rows' indices go instead of the rows
        method, rows = ("product_add_at", None) if self.copied else ("product_add", self.take)
        for s in range(0, len(idx), piece):
            XS = idx[s:s + piece] if rows is None else rows(idx[s:s + piece])
            self.wait([self.send(i, method, XS, coef[s:s + piece]) for i in which])
            del XS  # one piece held at a time, not the last while the next comes

    def matmul(self, V):
        V = np.asarray(V, dtype=np.float64)
        flat = V.ndim == 1
        V2 = V[:, None] if flat else V
        support = np.flatnonzero(np.any(V2 != 0, axis=1))
        self.product(support, V2[support])
        out = np.concatenate([np.asarray(r) for r in self.call("product_end")], axis=0)
        return out[:, 0] if flat else out

    def rows(self, idx):
        XR = self.take(idx)
        return np.concatenate([np.asarray(r) for r in self.call("kernel_rows", XR)], axis=1)

    def diagonal(self) -> np.ndarray:
        return np.concatenate([np.asarray(d) for d in self.call("diagonal")])

    def close(self):
        for channel in self.channels:
            if channel is not None:
                channel.close()
        self.channels = [None] * len(self.channels)
        for f in self._futures:
            f.release()
        self._futures, self.actors, self._copy, self._local = [], [], None, None
        if self.owns_client:
            self.owns_client = False
            self.client.close()
