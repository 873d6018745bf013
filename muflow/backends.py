"""Where K lives: the one factory of Gram operators, :func:`gram_operator`.

It carries out a :class:`muflow.routing.KernelPlan` (the path decided by the rule of
:mod:`muflow.routing`) and never decides again: each path is one call into the home of its
operator, which makes the operator from the plan.

- on a device (``device=``, no client): rows and products computed there
  (:func:`muflow.device.rows.device_operator`);
- "partitioned": X partitioned by rows over the workers, the working-set solver on the rows,
  a multiplicative solver on kernel panels computed there; each worker caches
  ``plan.cache_mb`` of kernel rows (:func:`muflow.dask.operators.partitioned_operator`);
- "cluster-store": the Gram store of K built (or reused) on the cluster in a zarr store, its
  row panels held by the workers (:func:`muflow.dask.operators.cluster_store_operator`,
  also :func:`operator_for`); X must be in this process;
- "stored": K held in this process (:func:`muflow.gram.held.held_operator`): a precomputed
  kernel's K as given, K read from the Gram store cache in ``cache_dir`` (float64; built
  there first when it holds none), or built on threads, into ``out`` when it fits;
- "rows": rows computed from X on demand (:class:`~muflow.kernel_rows.KernelRows`, never an
  n x n array); the row cache is the solver's (``plan.cache_mb`` handed to the solve call,
  :meth:`muflow.solvers.registry.SolverInfo.options`).

The estimator (:class:`muflow.SVC`) and the model selection call it with their plan, and
neither knows which backend answered. Dask, distributed and zarr are imported only on the
cluster paths.
"""

from __future__ import annotations

from muflow.operators import GramOperator


def gram_operator(X, kernel, plan=None, *, client=None, owns_client=False, cache_dir=None, out=None,
                  store=None, tile=None, resident_fraction=None, device=None,
                  n_threads: int | None = None, storage_options=None, **facts) -> GramOperator:
    """The operator for ``K(X, X)`` on the path of ``plan``.

    Parameters
    ----------
    X : ndarray, sparse matrix, dask.array or dask.dataframe of shape (n_samples, n_features)
        Validated float64 samples, or the (n_samples, n_samples) Gram matrix itself when
        ``kernel.name == "precomputed"`` (always held in process). A dask collection needs
        the "partitioned" path.
    kernel : muflow.kernels.Kernel
    plan : muflow.routing.KernelPlan, optional
        The path to carry out. None: the plan of one solve over X asked here of
        :func:`muflow.routing.plan_kernel` with ``client``, ``kernel.name`` and ``facts``
        (``solver``, ``gram``, ``gram_dtype``, ``cache_mb``, ...), for a caller that holds
        no plan of its own.
    client : distributed.Client or str, optional
        The client of a cluster path, or a scheduler address (``"tcp://host:8786"``): the
        operator then opens the client itself and closes it in :meth:`~GramOperator.close`.
    owns_client : bool, default=False
        The operator closes ``client`` (a Client) when it is closed, or when it fails to start.
    cache_dir : str, optional
        "stored": read K (float64) from the Gram store cache in this directory, building the
        store there first when it holds none. "cluster-store": the cache the workers use for
        the Gram store (default :func:`muflow.gram.store.default_cache_dir`).
    storage_options : dict, optional
        Of the file system of ``cache_dir`` or ``store`` when it is an fsspec URL (an S3
        ``endpoint_url``, ...): given to every open and create of the Gram store, in this
        process and on the workers (:func:`muflow.gram.ensure_gram`).
    out : ndarray of shape (n_samples, n_samples), optional
        "stored": an array to build K into when its shape and dtype fit (a sweep reuses one
        buffer for every kernel setting); ignored otherwise.
    store, tile, resident_fraction
        The Gram store on a cluster; see :func:`operator_for`.
    device : module, optional
        An array module (:func:`muflow.device.arrays.array_module`): without a client, K is
        then computed on its device (:class:`muflow.device.rows.DeviceRows`, rows in
        ``gram_dtype``, K resident there when the solver reads only products and K fits,
        :func:`muflow.device.rows.device_operator`); ``gram`` and ``cache_dir`` are ignored.
    n_threads : int, optional
        In process: the threads that build K or compute its rows (the caller's thread
        budget, :func:`muflow.threads.thread_budget`); default the process's budget.

    Returns
    -------
    GramOperator
        Close it (or use it as a context manager) to release what it holds.

    Raises
    ------
    MuflowInputError
        "stored" K that cannot fit in the available memory, refused before anything is
        allocated (:func:`muflow.memory.check_gram_fits`), unless ``out`` holds it already.

    Notes
    -----
    Memory: in process, ``n**2 * itemsize`` bytes for a stored K, X twice for rows on
    demand; on a cluster, X or K spread over the workers.
    """
    if plan is None:
        from muflow.routing import plan_kernel

        plan = plan_kernel(X.shape[0], kernel_name=kernel.name, client=client, **facts)
    elif facts:
        raise TypeError(f"gram_operator takes a plan or the facts to plan by, not both: {sorted(facts)}")
    if device is not None and client is None and kernel.name != "precomputed":
        from muflow.device.rows import device_operator

        return device_operator(X, kernel, device, plan)
    if plan.path == "partitioned":
        from muflow.dask.operators import partitioned_operator

        return _connected(client, owns_client, lambda c, owns: partitioned_operator(X, kernel, plan, c, owns))
    if plan.path == "cluster-store":
        from muflow.dask.operators import cluster_store_operator

        return _connected(client, owns_client, lambda c, owns: cluster_store_operator(
            X, kernel, client=c, owns_client=owns, store=store, cache_dir=cache_dir,
            tile=tile, resident_fraction=resident_fraction, storage_options=storage_options))
    if plan.path == "stored":
        from muflow.gram.held import held_operator

        return held_operator(X, kernel, plan.gram_dtype, cache_dir=cache_dir, out=out,
                             n_threads=n_threads, storage_options=storage_options)
    if plan.path == "rows":
        from muflow.kernel_rows import KernelRows

        return KernelRows(X, kernel, dtype=plan.gram_dtype, n_threads=n_threads)
    raise ValueError(f"a {plan.path!r} plan is not carried out by an operator "
                     "(the one-task path is muflow.dask.fitting's)")


def _connected(client, owns_client, make):
    """``make(client, owns_client)``, connecting first when ``client`` is a scheduler
    address: the operator then owns the client it opened; a failed start closes a client
    the operator would have owned."""
    if isinstance(client, str):
        from muflow.dask.cluster import connect

        client, owns_client = connect(client), True
    try:
        return make(client, owns_client)
    except BaseException:
        if owns_client:
            client.close()
        raise


def operator_for(X, kernel, **options):
    """The Gram store of ``K(X, X)`` built (or reused) on a cluster and its operator:
    :func:`muflow.dask.operators.cluster_store_operator`, which takes the same ``options``
    (``client``, ``store``, ``cache_dir``, ``dtype``, ``tile``, ``resident_fraction``,
    ``owns_client``, ``storage_options``)."""
    from muflow.dask.operators import cluster_store_operator

    return cluster_store_operator(X, kernel, **options)
