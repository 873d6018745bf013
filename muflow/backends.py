"""Where K lives: the one factory of Gram operators, :func:`gram_operator`.

Given X, the kernel, a client or none, the solver and the row cache's size, it returns the
operator by one rule, in this order:

1. a precomputed kernel (K given, or a callable kernel's K): K held in this process
   (:class:`~muflow.operators.DenseGram`), client or not;
2. with a client, when the solver runs on the workers (:func:`muflow.routing.runs_on_workers`):
   X partitioned by rows over the workers, the working-set solver on the rows
   (:class:`~muflow.dask_partitions.DaskRowPartitions`), a multiplicative solver on kernel
   panels computed there (:class:`~muflow.dask_panels.DaskRowPanels`) when they fit in the
   workers' memory (:func:`muflow.dask_panels.panels_fit`); each worker caches ``cache_mb``
   of kernel rows;
3. with a client otherwise: the Gram store of K built (or reused) on the cluster in a zarr
   store, its row panels held by the workers (:class:`~muflow.distributed.DaskGram`,
   :func:`operator_for`); X must be in this process;
4. in this process, by ``gram``: K stored (:class:`~muflow.operators.DenseGram` over a
   NumPy array built on threads, :func:`muflow.inmemory.numpy_gram`, or read from the Gram
   store cache in ``cache_dir``), or rows computed from X on demand
   (:class:`~muflow.kernel_rows.KernelRows`, never an n x n array), "auto" storing K while
   it fits in half the available memory (:func:`muflow.memory.choose_gram`). The row cache
   of an in-process operator is the solver's (``cache_mb`` handed to the solve call,
   :meth:`muflow.solvers.registry.SolverInfo.options`).

The estimator (:class:`muflow.SVC`) and the model selection call it, and nothing else: which
path a fit takes is decided by the rules of :mod:`muflow.routing` and this function, and
neither caller knows which backend answered. Dask, distributed and zarr are imported only on
the cluster paths.
"""

from __future__ import annotations

import numpy as np

from muflow.exceptions import MuflowInputError
from muflow.operators import DenseGram, GramOperator


def gram_operator(X, kernel, *, client=None, solver="auto", cache_mb=None, gram="auto",
                  gram_dtype="auto", cache_dir=None, out=None, store=None,
                  store_dtype="float32", tile=None, resident_fraction=None,
                  device=None, n_threads: int | None = None) -> GramOperator:
    """The operator for ``K(X, X)`` that ``solver`` runs on, by the module's rule.

    Parameters
    ----------
    X : ndarray, sparse matrix, dask.array or dask.dataframe of shape (n_samples, n_features)
        Validated float64 samples, or the (n_samples, n_samples) Gram matrix itself when
        ``kernel.name == "precomputed"`` (always held in process). A dask collection needs a
        client and a solver that runs on the workers.
    kernel : muflow.kernels.Kernel
    client : distributed.Client or str, optional
        A Dask client, or a scheduler address (``"tcp://host:8786"``): the operator then
        opens the client itself and closes it in :meth:`~GramOperator.close`. None (default)
        keeps K in this process.
    solver : str, default="auto"
        The solver asked for (a registered name or "auto"): with a client it decides
        between X on the workers and the Gram store (:func:`muflow.routing.runs_on_workers`).
    cache_mb : float, optional
        With X on the workers: megabytes of kernel rows each worker caches (libsvm's
        ``cache_size``; default :data:`muflow.solvers.rowcache.DEFAULT_CACHE_MB`). In
        process the row cache is the solver's: give it the same ``cache_mb``.
    gram : {"auto", "stored", "rows"}, default="auto"
        In process: "stored" holds K (built, or read from ``cache_dir`` in float64) (refused
        with :class:`~muflow.exceptions.MuflowInputError`, before anything is allocated, when
        it cannot fit in the available memory: :func:`muflow.memory.check_gram_fits`);
        "rows" computes rows of K from X when a solver asks
        (:class:`~muflow.kernel_rows.KernelRows`; a product ``K @ V`` costs a pass over K);
        "auto" stores K when it takes at most half the available memory and computes rows
        otherwise (:func:`muflow.routing.gram_mode` says when a single fit asks for rows
        sooner). Ignored for a precomputed kernel (K is given) and on a cluster.
    gram_dtype : {"auto", "float64", "float32"}, default="auto"
        Storage of K in process, and of the workers' kernel panels
        (:func:`muflow.inmemory.gram_dtype`: "auto" is float64 up to 4096 samples, float32
        above).
    cache_dir : str, optional
        In process: read K (float64) from the Gram store cache in this directory, building
        the store there first when it holds none. On a cluster: the cache the workers use
        for the Gram store (default :func:`muflow.gram.store.default_cache_dir`).
    out : ndarray of shape (n_samples, n_samples), optional
        In process: an array to build K into when its shape and dtype fit (a sweep reuses
        one buffer for every kernel setting); ignored otherwise.
    store, store_dtype, tile, resident_fraction
        The Gram store on a cluster; see :func:`operator_for`.
    device : module, optional
        An array module (:func:`muflow.device.arrays.array_module`): without a client, K is
        then computed on its device (:class:`muflow.device.rows.DeviceRows`, rows in
        ``gram_dtype``, K resident there when the solver reads only products and K fits,
        :func:`muflow.device.rows.resident_bytes`); ``gram`` and ``cache_dir`` are ignored.
    n_threads : int, optional
        In process: the threads that build K or compute its rows (the caller's thread
        budget, :func:`muflow.threads.thread_budget`); default the process's budget.

    Returns
    -------
    GramOperator
        Close it (or use it as a context manager) to release what it holds.

    Notes
    -----
    Memory: in process, ``n**2 * itemsize`` bytes for a stored K, X twice for rows on
    demand; on a cluster, X or K spread over the workers.
    """
    from muflow.memory import GRAM_CHOICES
    from muflow.routing import runs_on_workers

    if gram not in GRAM_CHOICES:
        raise MuflowInputError(f"gram must be one of {', '.join(GRAM_CHOICES)}, got {gram!r}")
    if kernel.name == "precomputed":
        return DenseGram(kernel.block(X))
    if device is not None and client is None:
        from muflow.device.rows import DeviceRows, resident_bytes
        from muflow.inmemory import gram_dtype as storage

        return DeviceRows(X, kernel, device, dtype=storage(X.shape[0], gram_dtype),
                          resident_bytes=resident_bytes(device, solver))
    if client is not None and runs_on_workers(client, kernel.name, solver):
        operator = _partitioned_operator(X, kernel, client, solver=solver, gram_dtype=gram_dtype,
                                         cache_mb=cache_mb)
        if operator is not None:
            return operator
        _require_in_process(X, solver)
    if client is not None:
        return _connected(client, lambda c, owns: operator_for(
            X, kernel, client=c, owns_client=owns, store=store, cache_dir=cache_dir,
            dtype=store_dtype, tile=tile, resident_fraction=resident_fraction))
    return _in_process_operator(X, kernel, gram=gram, gram_dtype=gram_dtype, cache_dir=cache_dir,
                                out=out, n_threads=n_threads)


def _in_process_operator(X, kernel, *, gram, gram_dtype, cache_dir, out,
                         n_threads=None) -> GramOperator:
    """Step 4 of the rule: K stored (built, into ``out`` when it fits, or read from the store
    cache in ``cache_dir``) or rows on demand, by ``gram``."""
    from muflow.inmemory import gram_dtype as storage, numpy_gram
    from muflow.memory import choose_gram

    n = X.shape[0]
    dtype = storage(n, gram_dtype)
    if out is not None and (cache_dir is not None or out.shape != (n, n) or out.dtype != dtype):
        out = None
    if gram == "rows":
        choice = "rows"
    elif out is not None:
        choice = "stored"  # the buffer is there already: nothing to allocate
    else:
        choice = choose_gram(n, np.float64 if cache_dir is not None else dtype, gram)
    if choice == "rows":
        from muflow.kernel_rows import KernelRows

        return KernelRows(X, kernel, dtype=dtype, n_threads=n_threads)
    if cache_dir is not None:
        from muflow.gram.build import ensure_gram
        from muflow.gram.store import StoreCorruptError

        store, _ = ensure_gram(X, kernel, cache_dir=cache_dir, dtype="float64")
        try:
            return DenseGram(np.asarray(store.read(), dtype=np.float64))
        except StoreCorruptError:  # a damaged tile, with X at hand: recompute it
            store, _ = ensure_gram(X, kernel, cache_dir=cache_dir, dtype="float64", deep_check=True)
            return DenseGram(np.asarray(store.read(), dtype=np.float64))
    return DenseGram(numpy_gram(X, kernel, dtype=dtype, out=out, n_threads=n_threads))


def _partitioned_operator(X, kernel, client, *, solver, gram_dtype, cache_mb):
    """Step 2 of the rule: X partitioned over the workers of ``client`` (a Client or a
    scheduler address, then connected here and owned by the operator) for ``solver``: the
    rows only for "auto" and "working_set", the rows with their kernel panels for a
    multiplicative solver, or None when those panels do not fit in the workers' memory."""
    from muflow.dask_panels import DaskRowPanels, panels_fit
    from muflow.dask_partitions import DaskRowPartitions
    from muflow.inmemory import gram_dtype as storage
    from muflow.routing import runs_on_panels
    from muflow.solvers.rowcache import DEFAULT_CACHE_MB

    cache_mb = DEFAULT_CACHE_MB if cache_mb is None else float(cache_mb)

    def make(c, owns):
        if not runs_on_panels(solver):
            return DaskRowPartitions(X, kernel, c, owns_client=owns, cache_mb=cache_mb)
        if not panels_fit(X.shape[0], c, storage(X.shape[0], gram_dtype)):
            return None
        return DaskRowPanels(X, kernel, c, gram_dtype=gram_dtype, owns_client=owns, cache_mb=cache_mb)

    return _connected(client, make)


def _require_in_process(X, solver):
    """The Gram store is built from X in this process: refuse a dask collection, saying
    what runs on it instead."""
    from muflow.dask_predict import is_dask_collection

    if is_dask_collection(X):
        raise MuflowInputError(
            f"the kernel panels of {X.shape[0]} samples do not fit in the workers' memory "
            f"(muflow.dask_panels.panels_fit), and solver {solver!r} would need the Gram store "
            "built from X in this process: use solver='working_set', give the workers more "
            "memory, or pass a NumPy array")


def _connected(client, make):
    """``make(client, owns_client)``, connecting first when ``client`` is a scheduler
    address: the operator then owns the client it opened; a failed start (or no operator)
    closes it."""
    if not isinstance(client, str):
        return make(client, False)
    from muflow.cluster import connect

    opened = connect(client)
    try:
        operator = make(opened, True)
    except BaseException:
        opened.close()
        raise
    if operator is None:
        opened.close()
    return operator


def operator_for(X, kernel, *, client, store=None, cache_dir=None, dtype="float32", tile=None,
                 resident_fraction=None, owns_client=False):
    """Build or reuse the Gram store of ``K(X, X)`` on ``client`` and return its operator.

    Parameters
    ----------
    X : ndarray or scipy sparse matrix of shape (n_samples, n_features)
    kernel : muflow.kernels.Kernel
    client : distributed.Client
    store : str, optional
        Path or fsspec URL of the zarr store; by default one in ``cache_dir``.
    cache_dir : str, optional
        Cache directory mapping (fingerprint of X, kernel, dtype) to a store; default
        :func:`muflow.gram.store.default_cache_dir` when ``store`` is not given either.
    dtype : {"float32", "float64"}, default="float32"
    tile : int, optional
        Tile size; chosen from n and the workers' memory when omitted.
    resident_fraction : float, optional
        Share of each worker's memory limit that resident panels may use
        (:class:`muflow.distributed.DaskGram`); beyond it panels stream from the store.
    owns_client : bool, default=False
        Close ``client`` when the operator is closed.

    Returns
    -------
    muflow.distributed.DaskGram
    """
    from muflow.distributed import DaskGram
    from muflow.gram.build import ensure_gram
    from muflow.gram.store import StoreCorruptError, default_cache_dir

    if store is None and cache_dir is None:
        cache_dir = default_cache_dir()
    gram, _ = ensure_gram(X, kernel, client=client, store=store, cache_dir=cache_dir,
                          dtype=dtype, tile=tile)
    kwargs = {} if resident_fraction is None else {"resident_fraction": resident_fraction}
    try:
        return DaskGram(gram, client=client, nonnegative=kernel.is_nonnegative(X),
                        owns_client=owns_client, **kwargs)
    except StoreCorruptError:
        # a tile failed its checksum while the workers loaded it; X is at hand: read every
        # tile, recompute the damaged ones, start again
        gram, _ = ensure_gram(X, kernel, client=client, store=store, cache_dir=cache_dir,
                              dtype=dtype, tile=tile, deep_check=True)
        return DaskGram(gram, client=client, nonnegative=kernel.is_nonnegative(X),
                        owns_client=owns_client, **kwargs)
