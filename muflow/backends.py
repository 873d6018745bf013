"""Where K lives: the one factory of Gram operators.

:func:`gram_operator` answers "give me K(X, X) as something solvers can ask" and picks the
backend from its arguments:

- in this process (:class:`~muflow.operators.DenseGram` over a NumPy array built on
  threads, :func:`muflow.inmemory.numpy_gram`): the default while K fits in half the
  available memory (:func:`muflow.memory.choose_gram`);
- in this process, rows computed from X on demand (:class:`~muflow.kernel_rows.KernelRows`,
  ``gram="rows"``): never an n x n array, for the subset solvers and their row cache; the
  default when K does not fit;
- in this process, read from the Gram store cache (``cache_dir``): a second fit on the
  same data and kernel reads K instead of computing it;
- on a Dask cluster (:class:`~muflow.distributed.DaskGram`, K's row panels held by the
  workers, built or reused in a zarr store by :func:`operator_for`): given ``client``;
- on a Dask cluster, X partitioned by rows over the workers (:func:`partitioned_operator`):
  the working-set solver on the rows, the multiplicative solvers on kernel panels computed
  from them when those fit in the workers' memory.

The estimator (:class:`muflow.SVC`) and the model selection call it; neither knows which
backend answered. Dask, distributed and zarr are imported only on the cluster path.
"""

from __future__ import annotations

import numpy as np

from muflow.operators import DenseGram, GramOperator


def gram_operator(X, kernel, *, client=None, gram_dtype="auto", cache_dir=None, out=None,
                  store=None, store_dtype="float32", tile=None,
                  resident_fraction=None, gram="auto") -> GramOperator:
    """An operator for ``K(X, X)``: in process, or on the cluster of ``client``.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Validated float64 samples, or the (n_samples, n_samples) Gram matrix itself when
        ``kernel.name == "precomputed"`` (always held in process).
    kernel : muflow.kernels.Kernel
    client : distributed.Client or str, optional
        A Dask client, or a scheduler address (``"tcp://host:8786"``): the operator then
        opens the client itself and closes it in :meth:`~GramOperator.close`. None (default)
        keeps K in this process.
    gram_dtype : {"auto", "float64", "float32"}, default="auto"
        Storage of an in-process K (:func:`muflow.inmemory.gram_dtype`: "auto" is float64
        up to 4096 samples, float32 above).
    cache_dir : str, optional
        In process: read K (float64) from the Gram store cache in this directory, building
        the store there first when it holds none. On a cluster: the cache the workers use
        (default :func:`muflow.gram.store.default_cache_dir`).
    out : ndarray of shape (n_samples, n_samples), optional
        In process: an array to build K into when its shape and dtype fit (a sweep reuses
        one buffer for every kernel setting); ignored otherwise.
    store, store_dtype, tile, resident_fraction
        Cluster only; see :func:`operator_for`.
    gram : {"auto", "stored", "rows"}, default="auto"
        In process: "stored" holds K (built, or read from ``cache_dir`` in float64) (refused with
        :class:`~muflow.exceptions.MuflowInputError`, before anything is allocated, when it
        cannot fit in the available memory: :func:`muflow.memory.check_gram_fits`);
        "rows" computes rows of K from X when a solver asks
        (:class:`~muflow.kernel_rows.KernelRows`: subset solvers read them through their
        row cache of ``cache_mb``; a product ``K @ V`` costs a pass over K); "auto" stores
        K when it takes at most half the available memory and computes rows otherwise.
        Ignored for a precomputed kernel (K is given) and on a cluster.

    Returns
    -------
    GramOperator
        Close it (or use it as a context manager) to release what it holds.

    Notes
    -----
    Memory: in process, ``n**2 * itemsize`` bytes for a stored K, X twice for rows on
    demand; on a cluster, K spread over the workers (:class:`muflow.distributed.DaskGram`).
    """
    from muflow.memory import GRAM_CHOICES

    if gram not in GRAM_CHOICES:
        from muflow.exceptions import MuflowInputError

        raise MuflowInputError(f"gram must be one of {', '.join(GRAM_CHOICES)}, got {gram!r}")
    if kernel.name == "precomputed":
        return DenseGram(kernel.block(X))
    if client is not None:
        return _cluster_operator(X, kernel, client, store=store, cache_dir=cache_dir,
                                 dtype=store_dtype, tile=tile, resident_fraction=resident_fraction)
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

        return KernelRows(X, kernel, dtype=dtype)
    if cache_dir is not None:
        from muflow.gram.build import ensure_gram
        from muflow.gram.store import StoreCorruptError

        store, _ = ensure_gram(X, kernel, cache_dir=cache_dir, dtype="float64")
        try:
            return DenseGram(np.asarray(store.read(), dtype=np.float64))
        except StoreCorruptError:  # a damaged tile, with X at hand: recompute it
            store, _ = ensure_gram(X, kernel, cache_dir=cache_dir, dtype="float64", deep_check=True)
            return DenseGram(np.asarray(store.read(), dtype=np.float64))
    return DenseGram(numpy_gram(X, kernel, dtype=dtype, out=out))


def rows_on_workers(X, kernel, client, *, cache_mb=256.0):
    """X partitioned over the workers of ``client`` (a Client or a scheduler address,
    connected here and owned by the operator) for the working-set solver there
    (:class:`muflow.dask_partitions.DaskRowPartitions`)."""
    from muflow.dask_partitions import DaskRowPartitions

    return _connected(client, lambda c, owns: DaskRowPartitions(X, kernel, c, owns_client=owns,
                                                                cache_mb=cache_mb))


def partitioned_operator(X, kernel, client, *, solver, gram_dtype="auto", cache_mb=256.0):
    """X partitioned over the workers of ``client`` (a Client or a scheduler address) for
    ``solver``, or None where that solver runs on the Gram store instead:

    - "auto" and "working_set": the rows only (:func:`rows_on_workers`);
    - the multiplicative solvers (products ``K @ V`` only): the rows with their kernel
      panels resident (:class:`muflow.dask_panels.DaskRowPanels`, in ``gram_dtype``) when
      the panels fit in the workers' memory (:func:`muflow.dask_panels.panels_fit`), None
      when they do not (the Gram store, :func:`operator_for`);
    - the other solvers: None.
    """
    from muflow.dask_panels import DaskRowPanels, panels_fit, runs_on_panels
    from muflow.inmemory import gram_dtype as storage

    if solver in ("auto", "working_set"):
        return rows_on_workers(X, kernel, client, cache_mb=cache_mb)
    if not runs_on_panels(solver):
        return None

    def make(c, owns):
        if not panels_fit(X.shape[0], c, storage(X.shape[0], gram_dtype)):
            return None
        return DaskRowPanels(X, kernel, c, gram_dtype=gram_dtype, owns_client=owns, cache_mb=cache_mb)

    return _connected(client, make)


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


def _cluster_operator(X, kernel, client, **kwargs):
    """:func:`operator_for` on ``client``, connecting first (and owning the client) when
    given an address; a failed start closes the client it opened."""
    return _connected(client, lambda c, owns: operator_for(X, kernel, client=c, owns_client=owns,
                                                           **kwargs))


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
