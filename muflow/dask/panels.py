"""Multiplicative updates across Dask workers, on the working-set solver's row partitions
(issue 17, item 4).

The multiplicative rules (:mod:`muflow.solvers.multiplicative`: M3, MUNK, MUSIK, semi-NMF)
ask one thing of K per pass: the product ``K @ V``, V of shape (n, m) with one or two
columns per problem (the class split of alpha, m3-multiplicative-updates-large-margin.txt
eq. (5)), and every alpha of a multiplicative iterate is non-zero. On
:class:`~muflow.dask.partitions.DaskRowPartitions` such a product sends the support's rows
of X, all of X, every pass. Here each partition keeps its *kernel panel* ``K(X_p, X)`` (its
rows of K against every column) resident in its worker's memory:

- built once, where the partition lives: its actor (:class:`PanelPartition`) is started
  with the blocks of every partition as dependencies, which the scheduler gathers worker
  to worker (never through the client), and computes its rows of K as the in-process Gram
  does (:func:`muflow.inmemory.gram_rows_into`: the same values; float64 up to 4096
  samples and float32 above, or the ``gram_dtype`` asked for);
- a product is one call per actor, all awaited in one round trip: V is sent once in the
  panel's dtype, every column of the batch at once (one-vs-one pairs, a sweep's C x folds),
  and each actor answers its rows of ``K @ V``.

A worker lost mid-fit takes its partitions' panels with it: they are started again from
their source (:meth:`~muflow.dask.partitions.DaskRowPartitions.recover`: NumPy rows
scattered again, a dask block recomputed by the scheduler from its graph), which rebuilds
their panels, and the product is asked again (a product is a pure function of V, so the
fit goes on from the same iterate).

Choosing the path (the rule's :func:`muflow.routing.panels_fit`): the panels are used when an
even share of K, ``ceil(n / workers)`` rows of n values in the panel's dtype, fits in
:data:`muflow.routing.PANEL_FRACTION` of the smallest worker's memory limit (the share
:class:`muflow.dask.store_operator.DaskGram` lets its resident panels take). Otherwise the multiplicative solvers run on the Gram store
(:class:`~muflow.dask.store_operator.DaskGram`, panels read from zarr or streamed), which needs X in
the client's memory.

Notes
-----
Memory per worker: its panels, ``n_p n itemsize`` bytes (float32 above 4096 samples: 10^5
samples on 8 workers take 4.7 GiB each), all of X while a panel is built (gathered, then
dropped), its rows of X, and per product a copy of V and its answer. On the client: V and
``K @ V`` (O(n m)).

Cost of a pass: one round trip; ``n m itemsize`` bytes sent to every worker and ``n m
itemsize`` received in all; ``2 n_p n m`` flops on each worker.
"""

from __future__ import annotations

import time
import uuid

import numpy as np

from muflow.dask.partitions import DaskRowPartitions, RowPartition
from muflow.dask.candidates import stack_rows
from muflow.inmemory import gram_dtype, gram_rows_into
from muflow.threads import blas_single_threaded
from muflow.operators import SPLIT_ROWS, split_product
from muflow.solvers.rowcache import DEFAULT_CACHE_MB

#: What :meth:`PanelPartition.product` answers: ``K_p @ V`` in the panel's dtype, summed in
#: float64, or split into ``(K_p+ @ V, K_p- @ V)`` (M3 eq. (5)).
MODES = ("native", "precise", "parts")


#: Panels of at most this many bytes are multiplied on the worker's event loop (a product
#: of a few columns over them is short next to a thread hand-off), larger ones in a thread.
INLINE_BYTES = 16 << 20


class PanelPartition(RowPartition):
    """Actor on one worker: a :class:`~muflow.dask.partitions.RowPartition` that also
    holds its kernel panel ``K(X_p, X)``.

    Parameters
    ----------
    X : ndarray or CSR matrix
        The partition's rows.
    lo : int
        Global index of its first row.
    kernel : dict
        :meth:`muflow.kernels.Kernel.to_dict`.
    n_total : int
    cache_mb : float
    blocks : list of ndarray or CSR matrix
        The rows of every partition, in order (gathered by the scheduler from their
        workers): the panel's columns.
    dtype : str
        The panel's dtype.
    """

    def __init__(self, X, lo, kernel, n_total, cache_mb, blocks, dtype):
        super().__init__(X, lo, kernel, n_total, cache_mb)
        X_all = stack_rows(blocks)
        self.panel = np.empty((self.n, X_all.shape[0]), dtype=np.dtype(dtype))
        t = time.perf_counter()
        gram_rows_into(X_all, self.kernel, self.panel, start=self.lo, n_threads=1)
        self.seconds["panel"] = time.perf_counter() - t
        self.widths = {}  # columns of V -> calls: what each round trip carried

    def panel_nonnegative(self) -> bool:
        return bool(self.panel.min() >= 0) if self.panel.size else True

    async def product(self, V, mode="native"):
        """``K(X_p, X) @ V`` (``mode``, see :data:`MODES`). A product over at most
        :data:`INLINE_BYTES` of panel runs on the worker's event loop (the hand-over to a
        thread and back cost more than the product), a larger one in a thread."""
        self.widths[V.shape[1]] = self.widths.get(V.shape[1], 0) + 1
        if self.panel.nbytes <= INLINE_BYTES:
            return self._product(V, mode)
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(None, self._product, V, mode)

    def _product(self, V, mode):
        with blas_single_threaded():
            if mode == "parts":
                return split_product(self.panel, V)
            if mode == "precise":
                out = np.empty((self.n, V.shape[1]))
                for s in range(0, self.n, SPLIT_ROWS):
                    np.matmul(self.panel[s:s + SPLIT_ROWS].astype(np.float64), V,
                              out=out[s:s + SPLIT_ROWS])
                return out
            return self.panel @ V

    def info(self):
        return dict(super().info(), widths=dict(self.widths), panel_bytes=self.panel.nbytes)


class DaskRowPanels(DaskRowPartitions):
    """:class:`~muflow.dask.partitions.DaskRowPartitions` whose partitions hold their kernel
    panels: ``K @ V`` is one round trip that sends V once (module notes).

    Parameters
    ----------
    X : ndarray, CSR matrix, dask.array or dask.dataframe
        As :class:`~muflow.dask.partitions.DaskRowPartitions`.
    kernel : Kernel
    client : distributed.Client
    gram_dtype : {"auto", "float64", "float32"}, default="auto"
        The panels' dtype (:func:`muflow.inmemory.gram_dtype`, as an in-process K).
    owns_client : bool, default=False
    cache_mb : float, default=256
        The row cache of the working-set solver, should it run on these partitions.

    Attributes
    ----------
    dtype : numpy dtype
        The panels'.
    nonnegative : bool
        No entry of K is negative (read from the panels).
    products, seconds
        Products answered and the client's seconds in them.
    """

    product_dtype = None  # the panels' dtype: products are computed in it

    def __init__(self, X, kernel, client, *, gram_dtype="auto", owns_client=False,
                 cache_mb=DEFAULT_CACHE_MB):
        self.requested_dtype = gram_dtype
        self.products, self.seconds = 0, 0.0
        super().__init__(X, kernel, client, owns_client=owns_client, cache_mb=cache_mb)
        self.dtype = self._panel_dtype()
        self.nonnegative = all(self.retrying(lambda: self.call("panel_nonnegative")))

    def _panel_dtype(self):
        return gram_dtype(self.n, self.requested_dtype)

    def _start(self, i):
        """Start partition i's actor next to its rows, every partition's rows gathered
        there by the scheduler for its panel."""
        from distributed import wait

        lo, hi = self.bounds[i]
        blocks = [self._block(j) for j in range(len(self.bounds))]
        with self.client.as_current():  # distributed's wait asks for the current client
            wait([blocks[i]])  # placed (or recomputed) first: the actor goes where it is
        holders = self.client.who_has([blocks[i]]).get(blocks[i].key) or None
        return self.client.submit(
            PanelPartition, blocks[i], lo, self.kernel.to_dict(), self.n, self.cache_mb, blocks,
            self._panel_dtype().str, actor=True, pure=False, workers=holders,
            allow_other_workers=holders is not None,
            key=f"muflow-panels-{uuid.uuid4().hex[:8]}-{lo}-{hi}")

    def _product(self, V, mode, dtype):
        """The actors' answers to ``product(V, mode)``, V cast to ``dtype``; lost
        partitions are restarted (their panels rebuilt) and the product asked again."""
        from muflow.exceptions import MuflowInputError

        t = time.perf_counter()
        V = np.asarray(V)
        if V.ndim != 2 or V.shape[0] != self.n:
            raise MuflowInputError(f"V must have shape ({self.n}, m), got {V.shape}")
        V = np.ascontiguousarray(V, dtype=dtype)
        answers = self.retrying(lambda: self.call("product", V, mode))
        self.seconds += time.perf_counter() - t
        self.products += 1
        return answers

    def _columns(self, V, mode, dtype) -> np.ndarray:
        """The product of ``mode`` for V of shape (n,) or (n, m), in the same shape."""
        out = np.concatenate(self._product(np.reshape(V, (self.n, -1)), mode, dtype), axis=0)
        return out[:, 0] if np.ndim(V) == 1 else out

    def matmul(self, V):
        return self._columns(V, "native", self.dtype).astype(np.float64, copy=False)

    def matmul_native(self, V, out=None):
        """``K @ V`` in the panels' dtype (V is sent in it, as
        :meth:`muflow.operators.DenseGram.matmul_native` casts it); into ``out`` when given."""
        return np.concatenate(self._product(V, "native", self.dtype), axis=0, out=out)

    def matmul_precise(self, V):
        """``K @ V`` summed in float64 on the workers (a float32 panel widened there)."""
        return self._columns(V, "precise", np.float64)

    def matmul_parts(self, V):
        if self.nonnegative:
            pos = self.matmul(V)
            return pos, np.zeros_like(pos)
        answers = self._product(V, "parts", self.dtype)
        return tuple(np.concatenate([a[k] for a in answers], axis=0).astype(np.float64, copy=False)
                     for k in (0, 1))

    def __repr__(self):
        return (f"DaskRowPanels(n={self.n}, dtype={self.dtype}, partitions={len(self.bounds)}, "
                f"nonnegative={self.nonnegative})")

