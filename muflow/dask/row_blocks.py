"""How X lies on the Dask workers for :class:`muflow.dask.partitions.DaskRowPartitions`: its
row blocks, one a partition, and, where it is small enough, a copy of all of X on every
worker.

Each partition computes the kernel rows of a working set B over its own columns,
K(X_B, X_p), and so needs X_B, the rows of B, on every iteration. Without a copy of X the
client sends them with every iteration's call, to every partition: q d values to each of W
workers, hundreds of times a fit (400 KB a worker an iteration at q = 1,024 and 50
features). With a copy of X on each worker, sent once when the partitions start, the call
carries B's indices alone and each partition takes X_B from its copy: the same values, so
the same rows and the same solution. The copy is made where X takes at most
:data:`COPY_FRACTION` of the smallest worker's memory limit (:data:`COPY_MAX_BYTES` where
the workers have none), and only on two workers or more (one partition holds all of X
already). ``MUFLOW_DASK_COPY_X=0`` makes no copy.

For the working-set solver one partition, the first, also solves every iteration's
subproblem (:attr:`muflow.dask.partitions.DaskRowPartitions.solver`): it computes K_BB and
solves the q-variable problem before its own rows of B, while the others compute theirs and
then wait for its step. Its block is made smaller (:func:`solver_share`), so that all finish
an iteration together.
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from muflow.dask.candidates import stack_rows
from muflow.dask.scheduler_workers import require_workers, scheduler_workers
from muflow.exceptions import MuflowInputError

#: A copy of X goes to every worker where it takes at most this share of the smallest
#: worker's memory limit.
COPY_FRACTION = 0.1

#: The largest copy of X made on workers without a memory limit (bytes).
COPY_MAX_BYTES = 1 << 30

#: ``MUFLOW_DASK_COPY_X=0`` makes no copy of X on the workers, whatever its size.
ENV_VAR = "MUFLOW_DASK_COPY_X"

#: The rows of the partition that solves the subproblems, as a share of each other
#: partition's, on workers of one thread (module notes; the share that made 2 workers
#: fastest at 60,000 rows, docs/benchmarks.md "Session 44").
SOLVER_SHARE = 0.8


def row_blocks(client, X, subproblems=False):
    """``(blocks, bounds, from_dask, nbytes)``: the futures of X's row blocks on the workers
    of ``client``, their global row ranges, whether they are a dask collection's own
    blocks, and the bytes of X as the partitions hold it (:func:`held_bytes`; a dask
    collection's counted dense). NumPy and SciPy data are split into one contiguous block per worker and
    scattered once, each to its worker, the first smaller where its partition will solve the
    working set's ``subproblems`` (:func:`block_edges`); a dask collection's row blocks (a
    dataframe's partitions) stay where they already are."""
    from muflow.dask.predict import is_dask_array

    if hasattr(X, "to_dask_array"):  # a dask.dataframe
        X = X.to_dask_array(lengths=True)
    if is_dask_array(X):
        if X.ndim != 2:
            raise MuflowInputError(f"X must be 2-d, got a dask array of shape {X.shape}")
        from distributed import futures_of

        # one block per row range, kept on the workers that computed it
        X = client.persist(without_empty_rows(X).rechunk({1: -1}))
        by_key = {f.key: f for f in futures_of(X)}
        blocks = [by_key[row[0]] for row in X.__dask_keys__()]
        sizes, from_dask = X.chunks[0], True
        nbytes = 8 * int(X.shape[0]) * int(X.shape[1])
    else:
        info = require_workers(client)
        workers = sorted(info)
        n = X.shape[0]
        parts = max(1, min(len(workers), n))
        threads = min(int(w.get("nthreads") or 1) for w in info.values())
        edges = block_edges(n, parts, solver_share(threads) if subproblems else 1.0)
        sizes = np.diff(edges)
        blocks = [client.scatter(X[a:b], workers=[w], hash=False)
                  for a, b, w in zip(edges[:-1], edges[1:], workers)]
        from_dask, nbytes = False, held_bytes(X)
    bounds, lo = [], 0
    for s in sizes:
        bounds.append((lo, lo + int(s)))
        lo += int(s)
    return blocks, bounds, from_dask, nbytes


def solver_share(threads: int) -> float:
    """The first block's rows as a share of each other's where its partition solves the
    subproblems, on workers of ``threads`` threads: the subproblem holds one of them while
    the others compute rows (:meth:`muflow.dask.partition_column.PartitionColumn.prefetch`),
    so the solver's extra time, :data:`SOLVER_SHARE`'s on one thread, is a ``1 / threads``
    part of it on more."""
    return 1.0 - (1.0 - SOLVER_SHARE) / max(1, int(threads))


def block_edges(n: int, parts: int, first_share: float = 1.0) -> np.ndarray:
    """The ``parts + 1`` row edges of ``parts`` contiguous blocks of n rows, none empty
    (``parts <= n``): equal blocks, the first ``first_share`` of each other's size."""
    equal = np.linspace(0, n, parts + 1).astype(np.int64)
    if first_share == 1.0 or parts < 2:
        return equal
    weights = np.ones(parts)
    weights[0] = first_share
    edges = (np.concatenate([[0.0], np.cumsum(weights)]) / weights.sum() * n).astype(np.int64)
    edges[-1] = n
    return equal if np.any(np.diff(edges) < 1) else edges  # too few rows for the shares


def without_empty_rows(X):
    """A dask array without its row chunks of no rows (a filtered dataframe's empty
    partitions): the others are the same blocks (the rechunk only names them anew), and
    dask's reductions (``X.var()``, gamma's ``"scale"``) are then not NaN."""
    if all(X.chunks[0]):
        return X
    return X.rechunk({0: tuple(c for c in X.chunks[0] if c)})


def check_finite_blocks(X) -> None:
    """Refuse a dask array with NaN or infinite values, naming the rows of the first block
    that holds one; one pass over the blocks where they are, one boolean each back."""
    ok = X.map_blocks(_block_finite, chunks=(1, 1), dtype=bool,
                      meta=np.empty((0, 0), dtype=bool)).rechunk({1: -1}).compute()
    bad = np.flatnonzero(~np.all(np.asarray(ok), axis=1))
    if bad.size:
        lo = int(np.sum(X.chunks[0][: bad[0]]))
        hi = lo + int(X.chunks[0][bad[0]]) - 1
        raise ValueError(f"Input X contains NaN or infinity (in rows {lo} to {hi}); remove or "
                         "impute them before fitting")


def _block_finite(block) -> np.ndarray:
    """One task of :func:`check_finite_blocks`: whether a block's values (a sparse block's
    stored ones) are all finite, as a 1 x 1 array."""
    values = block.data if sp.issparse(block) else block
    return np.array([[bool(np.all(np.isfinite(values)))]])


def held_bytes(X) -> int:
    """Bytes of X as a partition holds it: float64 values, and a CSR matrix's indices."""
    n = int(X.shape[0])
    d = int(X.shape[1]) if len(X.shape) > 1 else 1
    if sp.issparse(X):
        return int(X.nnz) * (8 + X.indices.dtype.itemsize) + (n + 1) * X.indptr.dtype.itemsize
    return 8 * n * d


def copy_fits(client, nbytes: int, n_blocks: int) -> bool:
    """Whether every worker gets a copy of X, of ``nbytes`` as the partitions hold it
    (module notes): two blocks or more, X within :data:`COPY_FRACTION` of the smallest
    worker memory limit (within :data:`COPY_MAX_BYTES` where the workers have no limit),
    and ``MUFLOW_DASK_COPY_X`` not ``0``."""
    if n_blocks < 2 or os.environ.get(ENV_VAR, "1").strip() == "0":
        return False
    limits = [int(w.get("memory_limit") or 0) for w in scheduler_workers(client).values()]
    limits = [limit for limit in limits if limit > 0]
    allowed = COPY_FRACTION * min(limits) if limits else COPY_MAX_BYTES
    return nbytes <= allowed


def copy_everywhere(client, X, blocks, from_dask: bool) -> list:
    """The futures a partition stacks into its copy of X, in row order: X itself sent to
    every worker once (NumPy and SciPy data), or every row block of a dask collection
    (each worker fetches the blocks it lacks, once)."""
    if from_dask:
        return list(blocks)
    return [client.scatter(X, broadcast=True, hash=False)]


def homes(client, blocks) -> list:
    """The worker each partition starts on: one holding its row block, the least used of
    them where a block is held by several (a collection persisted and spread by its user).
    Every partition's task depends on all of X where the workers get copies, so its block
    no longer decides where it runs; the homes are chosen before any partition starts (each
    then fetches every block, and would be a holder of all)."""
    from distributed import wait

    with client.as_current():  # this client, not the process's default one (maybe none)
        wait(blocks)
    who = client.who_has(blocks)
    used: dict = {}
    chosen = []
    for block in blocks:
        holders = sorted(who.get(block.key, ()), key=lambda w: (used.get(w, 0), w))
        chosen.append(holders[0] if holders else None)
        if holders:
            used[holders[0]] = used.get(holders[0], 0) + 1
    return chosen


def held_form(X):
    """Rows of X as a partition holds them: float64, dense and C-ordered, or CSR."""
    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64)
    return np.ascontiguousarray(X, dtype=np.float64)


def stacked(parts):
    """A partition's copy of X from the pieces of :func:`copy_everywhere`, in row order, as
    it holds its own rows (:func:`held_form`)."""
    parts = [held_form(p) for p in parts]
    return parts[0] if len(parts) == 1 else stack_rows(parts)


__all__ = ["COPY_FRACTION", "COPY_MAX_BYTES", "ENV_VAR", "SOLVER_SHARE", "block_edges",
           "check_finite_blocks", "copy_everywhere",
           "copy_fits", "held_bytes", "held_form", "homes", "row_blocks", "stacked",
           "solver_share", "without_empty_rows"]
