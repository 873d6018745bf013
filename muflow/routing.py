"""Which path a fit takes: the one rule that :class:`muflow.SVC`, the sweep
(:func:`muflow.selection.run_sweep`), the pipeline and the Dask side all follow.

The rule returns a :class:`KernelPlan` (:func:`plan_fit` for one fit, :func:`plan_kernel`
for a kernel setting that several solves share): where K comes from and why, which solver
runs on it, the row cache. The one operator factory (:func:`muflow.backends.gram_operator`)
carries the plan out and never decides again; the callers ask once and pass the plan on.
What is decided here, each once:

- where the kernel values come from in process: the whole K stored, or rows computed on
  demand (:func:`gram_mode`, then the memory), and whether a batch's columns that hold only
  some samples (one-vs-one pairs) are solved on rows over their own samples
  (:func:`solves_on_own_samples`);
- with a Dask client, where the work runs: the whole fit on one worker as one task
  (:func:`fits_as_one_task`), or every solver iteration against X partitioned over the
  workers (:func:`runs_on_workers`), or against a Gram store built on the cluster;
- which solver runs when the caller asks for "auto" (the working set where no K is in this
  process's memory, :data:`muflow.solvers.registry.AUTO` by intercept otherwise), and for a
  sweep, which path along C (:func:`sweep_path`).

The rules weigh the solver: a product ``K @ V`` reads all of K every pass, a working set
reads only the rows it touches. Plain functions over plain facts (names, counts, flags):
importing this module imports no Dask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from muflow.exceptions import MuflowInputError, SolverCombinationError, dask_input_error
from muflow.memory import GRAM_CHOICES, gram_bytes, stored_fits, worker_memory_limits

#: gram="auto" computes kernel rows on demand (the working-set solver) above this many
#: samples: one fit computes only the rows its working sets touch (a8a: 10,293 of 22,696)
#: where a stored K costs all n^2 values; on a8a's subsets the two paths take about as long
#: at 8,000 rows and rows on demand win above (docs/benchmarks.md, "One fit").
ROWS_MIN_SAMPLES = 8192

#: A sweep (many solves, folds x C, on one kernel setting) computes kernel rows on demand above
#: this many samples, and stores K up to it (or while K fits in half the available memory,
#: :func:`muflow.memory.stored_fits`, whichever is smaller): its solves share one stored K,
#: so K is worth storing up to a larger n than for one fit (a float32 K of 32,768 samples
#: is 4 GiB). The sweeps on either side: docs/benchmarks.md, "Model selection".
SWEEP_ROWS_MIN_SAMPLES = 32768

#: With a client, fits of at most this many samples (a float64 K of 128 MiB at most) run
#: whole on one worker as one task (:mod:`muflow.dask.fitting`): a pass of a solver on
#: such a K is shorter than a round trip to the workers, so one round trip per fit beats
#: one per iteration.
ONE_TASK_MAX_SAMPLES = 4096

#: The solver that runs on X partitioned over the workers, and on rows computed on demand.
ROWS_SOLVER = "working_set"


def gram_mode(gram: str, n_samples: int, solver: str = "auto", *, sweep: bool = False) -> str:
    """The ``gram`` of a single fit by ``solver`` (a registered name or "auto"): stored K
    or rows computed on demand, weighing what the solver reads.

    - A solver that reads only products ``K @ V`` (:func:`reads_products`: the
      multiplicative family) reads all of K every pass: rows on demand would compute K
      again each pass, where a stored K is computed once. "auto" stays "auto": the
      factory stores K whenever it fits in half the available memory
      (:func:`muflow.memory.stored_fits`) and computes rows only when it does not.
    - The others (the working set, SMO, coordinate descent: rows of K, a few at a time)
      take "rows" for "auto" above :data:`ROWS_MIN_SAMPLES` samples: one fit computes
      only the rows its working sets touch where a stored K costs all n^2 values.

    "stored" and "rows" are taken as asked. A sweep (``sweep=True``) takes "rows" for
    "auto" by the same rule above :data:`SWEEP_ROWS_MIN_SAMPLES` instead: its many solves
    on one kernel setting share one stored K. :class:`muflow.SVC` and the pipeline call
    this for one fit, :func:`muflow.selection.run_sweep` with ``sweep=True``; on rows,
    "auto" is then the working-set solver for both (:func:`plan_kernel`).
    """
    threshold = SWEEP_ROWS_MIN_SAMPLES if sweep else ROWS_MIN_SAMPLES
    if gram == "auto" and n_samples > threshold and not reads_products(solver):
        return "rows"
    return gram


def reads_products(solver: str) -> bool:
    """Whether ``solver`` (a registered name) asks the operator only for products
    ``K @ V``, each a pass over all of K (the multiplicative family); False for "auto"."""
    from muflow.solvers.registry import SOLVERS

    info = SOLVERS.get(solver)
    return info is not None and info.needs == "products"


def solves_on_own_samples(operator, solver: str, member) -> bool:
    """Whether each column of a batch is solved on K restricted to the samples it holds
    (:func:`muflow.subproblems.solve_on_own_samples`) instead of as a column of the batch
    on K over all n samples.

    Yes when some column holds only some of the samples (``member``, shape (n, m): a
    one-vs-one pair), the operator computes rows on demand in this process and can
    restrict them (:meth:`muflow.kernel_rows.KernelRows.restricted`: rows 2n/k long for a
    pair of k classes, k/2 times more of them in the row cache) and the solver reads rows
    (:func:`reads_rows`). A stored K is read in place (restricting it would copy it); a
    multiplicative solver advances every column with one product, a pass over K, which k
    restricted problems would repeat k(k-1)/2 times over 2(k-1)/k of its entries.
    """
    if member is None or np.all(member):
        return False
    if operator.dense is not None or not callable(getattr(operator, "restricted", None)):
        return False
    return reads_rows(solver)


#: A fit's sub-problems solved on their own samples (one-vs-one pairs on rows) go side by
#: side to forked processes, one thread each, when the smallest holds at least this many
#: samples (:func:`subproblem_processes`): below it a pair takes well under a second and
#: forking and loading the compiled loops in each child cost more than they save.
FORK_MIN_SAMPLES = 4096


def subproblem_processes(sizes, *, cores: int, callback=None, nested: bool = False) -> int:
    """Processes that solve a fit's sub-problems of ``sizes`` samples (one-vs-one pairs on
    rows over their own samples, :func:`muflow.subproblems.solve_on_own_samples`) side by
    side: 1 (one after the other in this process) or more, each in a forked process on
    its share of the ``cores`` (:func:`muflow.threads.divide_budget`).

    A sub-problem's working-set solve keeps about one core busy of two: its row batches
    and gradient updates are split over the threads, its selection and q-variable SMO are
    not. Two pairs side by side on one thread each keep both. More than one process only
    with at least two cores and two sub-problems, each of at least
    :data:`FORK_MIN_SAMPLES` samples, no ``callback`` (it hears every iteration of the
    solve in this process: a deadline, progress, a checkpoint) and not ``nested`` (in a
    forked child already, or off the main thread: a Dask worker's task) and where the
    platform forks (not Windows); then as many as end equal sub-problems soonest on
    ``cores`` (:func:`muflow.threads.pool_size`).
    """
    import multiprocessing

    from muflow.threads import pool_size

    sizes = np.asarray(sizes)
    if (callback is not None or nested or cores < 2 or sizes.size < 2
            or sizes.min() < FORK_MIN_SAMPLES
            or "fork" not in multiprocessing.get_all_start_methods()):
        return 1
    return pool_size(int(sizes.size), int(cores))


def folds_share_rows(n_samples, cache_mb: float, itemsize: int):
    """Whether the internal folds of a problem of ``n_samples`` (``probability=True``'s five,
    :func:`muflow.probability.out_of_fold_decisions`) are solved together on rows over the
    problem's samples, sharing one row cache, rather than each on rows over its own
    training samples (:func:`solves_on_own_samples`); elementwise for an array of sizes.

    A sample trains four folds of five: a row shared by the folds is computed once where
    the folds on their own compute it four times, 4/5 as long. Sharing pays while the cache
    holds the rows a fold reads, about half of its samples' (the working set's rows of the
    support vectors): ``cache_mb`` holds ``n_samples / 2`` rows of ``n_samples`` values.
    Kernel values computed for the internal folds on rows (5 folds, RBF, C=1), shared
    against each fold on its own: make_classification 12,000 x 20, 3 classes, gamma=0.05,
    174 against 343 million at 200 MB and 755 against 447 at 50 MB; a8a (22,696, 2 classes),
    gamma=0.05, 1,341 against 1,084 million at 200 MB and 474 against 931 at 1,000 MB. The
    rule picks the smaller in all four.
    """
    n = np.asarray(n_samples, dtype=np.float64)
    return float(cache_mb) * 2**20 >= 0.5 * n * n * int(itemsize)


def fits_as_one_task(client, n_samples: int, *, dask_input: bool) -> bool:
    """With a client, a problem of at most :data:`ONE_TASK_MAX_SAMPLES` samples held in
    this process (not a dask collection) is fitted whole on one worker as one task: a round
    trip per fit instead of one per solver iteration."""
    return client is not None and not dask_input and n_samples <= ONE_TASK_MAX_SAMPLES


def runs_on_workers(client, kernel_name, solver: str) -> bool:
    """Whether the solver iterates against X partitioned by rows over the client's workers.

    With a client and a kernel computed from X (not ``"precomputed"``, not a callable,
    whose K is given): the working-set solver (``solver="auto"`` or ``"working_set"``)
    on the rows (:mod:`muflow.dask.working_set`), and the multiplicative solvers on kernel
    panels computed there (:mod:`muflow.dask.panels`) when those fit in the workers'
    memory. The other solvers, and the multiplicative ones whose panels do not fit, run on
    a Gram store built on the cluster (:class:`muflow.dask.store_operator.DaskGram`).
    """
    if client is None or not isinstance(kernel_name, str) or kernel_name == "precomputed":
        return False
    return solver in ("auto", ROWS_SOLVER) or reads_products(solver)


#: Share of a worker's memory limit that its kernel panels may take (:func:`panels_fit`).
PANEL_FRACTION = 0.5


def panel_bytes(n: int, workers: int, dtype) -> int:
    """Bytes of an even share of K's rows on one of ``workers``: ceil(n / workers) n itemsize."""
    return math.ceil(n / max(int(workers), 1)) * int(n) * np.dtype(dtype).itemsize


def panels_fit(n: int, client, dtype) -> bool:
    """Whether the kernel panels of n samples (:class:`muflow.dask.panels.DaskRowPanels`) fit
    on the workers of ``client``: an even share (:func:`panel_bytes`) within
    :data:`PANEL_FRACTION` of the smallest worker's memory limit (none: large enough)."""
    limits = worker_memory_limits(client)
    limited, share = [m for m in limits.values() if m], panel_bytes(n, len(limits), dtype)
    return bool(limits) and (not limited or share <= PANEL_FRACTION * min(limited))


def reads_rows(solver: str) -> bool:
    """Whether ``solver`` (a registered name) asks the operator for rows of K, not only for
    products: the subset solvers and the working-set solver. Their warm starts pay, so a
    sweep chains their solves along C (:func:`sweep_path`)."""
    from muflow.solvers.registry import SOLVERS

    info = SOLVERS.get(solver)
    return info is not None and info.needs == "rows"


# ------------------------------------------------------------- the plan

#: The paths a fit's or a kernel setting's solves can take (:func:`plan_kernel`,
#: :func:`plan_fit`), with the words the report uses for them.
PATH_LABELS = {
    "stored": "stored Gram",                      # K in this process (built, or read from a zarr store)
    "rows": "rows on demand",                     # KernelRows in this process, no n x n array
    "partitioned": "X partitioned on the workers",  # working set (rows) or kernel panels
    "cluster-store": "Gram store on the cluster",   # zarr store served by the Dask operator
    "one-task": "the whole fit on one worker",      # muflow.dask.fitting, one round trip
}


@dataclass(frozen=True)
class KernelPlan:
    """Where the K of a fit or of one kernel setting comes from, which solver reads it, and
    why (:func:`plan_kernel`, :func:`plan_fit`). Made once by the rule and carried out by
    :func:`muflow.backends.gram_operator`, which never decides again.

    Attributes
    ----------
    path : {"stored", "rows", "partitioned", "cluster-store", "one-task"}
        See :data:`PATH_LABELS`.
    reason : str
        One sentence for a person: the facts that decided.
    solves : int
        Solves that read this K (folds x C values, plus the refit, in a sweep; 1 for a fit).
    store : bool
        Whether the path reads a zarr Gram store (built or reused in the store directory);
        False: no n x n store is written.
    gram_bytes : int
        Bytes of K in the dtype it would be kept in.
    solver : str
        The registered solver that runs ("auto" resolved); "auto" is left to the worker on
        the "one-task" path, which plans its own fit.
    cache_mb : float or None
        Megabytes of kernel rows cached (the solver's in process, each worker's with X
        partitioned); None: :data:`muflow.solvers.rowcache.DEFAULT_CACHE_MB`.
    gram_dtype : {"auto", "float64", "float32"}
        Storage of K in process and of the workers' kernel panels
        (:func:`muflow.inmemory.gram_dtype`).
    """

    path: str
    reason: str
    solves: int
    store: bool
    gram_bytes: int
    solver: str = "auto"
    cache_mb: float | None = None
    gram_dtype: str = "auto"

    @property
    def reads_products(self) -> bool:
        """Whether the plan's solver reads only products of K (:func:`reads_products`)."""
        return reads_products(self.solver)

    @property
    def panels(self) -> bool:
        """Whether the workers hold kernel panels ``K(X_p, X)`` besides their rows of X: X
        partitioned for a solver that reads only products (:func:`reads_products`)."""
        return self.path == "partitioned" and self.reads_products

    def to_dict(self) -> dict:
        keys = ("path", "reason", "solves", "store", "gram_bytes", "solver")
        return {key: getattr(self, key) for key in keys}


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _solves(k: int) -> str:
    return f"{k} solve{'' if k == 1 else 's'}"


def _resolved(solver: str, path: str, intercept: str) -> str:
    """The solver that runs on ``path``: the one asked for, except that "auto" is the
    working-set solver (:data:`ROWS_SOLVER`, which fetches rows q at a time in one product)
    where no K is in this process's memory (rows on demand, X partitioned over the workers),
    and :data:`muflow.solvers.registry.AUTO` by intercept otherwise (SMO for the exact one)."""
    if solver != "auto":
        return solver
    if path in ("rows", "partitioned"):
        return ROWS_SOLVER
    from muflow.solvers.registry import AUTO

    return AUTO.get(intercept, solver)


def sweep_path(path: str, solver: str, halving=None) -> str:
    """The path of a sweep's solves along C for the resolved ``solver``: ``path="auto"`` is
    "continuation" (C ascending, each C warm-started from the previous) for solvers that
    read rows, "batched" (one solve of every column) for the multiplicative ones and
    wherever successive ``halving`` is asked for (it runs on the batched path's rungs,
    :mod:`muflow.selection.halving`); any other ``path`` is taken as asked."""
    if path != "auto":
        return path
    return "continuation" if reads_rows(solver) and halving is None else "batched"


def plan_fit(n_samples: int, *, client=None, dask_input: bool = False, checkpoint: bool = False,
             solver: str = "auto", **facts) -> KernelPlan:
    """The plan of one fit of :class:`muflow.SVC`: the whole fit on one worker as one task
    (:func:`fits_as_one_task`, not with a checkpoint, which this process writes), else
    :func:`plan_kernel` for one solve. ``facts`` are :func:`plan_kernel`'s."""
    if not checkpoint and fits_as_one_task(client, n_samples, dask_input=dask_input):
        return KernelPlan("one-task", f"{n_samples:,} samples <= {ONE_TASK_MAX_SAMPLES:,} held in "
                          "this process: the whole fit runs on one worker, one round trip",
                          1, False, 0, solver)
    return plan_kernel(n_samples, client=client, dask_input=dask_input, solver=solver, solves=1,
                       **facts)


def plan_kernel(n_samples: int, *, solver: str = "auto", intercept: str = "exact", kernel_name="rbf",
                solves: int = 1, client=None, gram: str = "auto", gram_dtype: str = "auto",
                cache_mb: float | None = None, dask_input: bool = False, store_dir=None,
                store_built: bool = False, available: int | None = None,
                free_disk: int | None = None, device: bool = False) -> KernelPlan:
    """The store-or-stream rule: the path the solves over one K take, the solver, and why.

    The one rule :class:`muflow.SVC` (through :func:`plan_fit`), the sweep
    (:func:`muflow.selection.run_sweep`, per kernel setting) and the pipeline's Gram stage
    (:func:`muflow.pipeline.build_gram_stores`, which builds a store only where the plan
    reads one) follow. It weighs, in this order:

    1. where the solves run: a kernel whose K is given (``"precomputed"``, a callable) is
       held in process; with a ``client`` the working-set solver runs on X partitioned over
       the workers (``"partitioned"``: each computes the rows its working sets touch), a
       multiplicative solver on kernel panels there while they fit in the workers' memory
       (:func:`panels_fit`), else on the Gram store built on the cluster (``"cluster-store"``,
       float32, products only; refused first where the workers cannot stream it);
    2. in process, the solver, the size and the reuse (:func:`gram_mode`, ``sweep`` when
       ``solves > 1``): a solver reading rows takes rows on demand above
       :data:`ROWS_MIN_SAMPLES` samples for one solve, :data:`SWEEP_ROWS_MIN_SAMPLES` when
       several solves share K; a product solver reads all of K every pass and keeps it;
    3. the memory: a stored K must fit in half the available memory
       (:func:`muflow.memory.stored_fits`), or rows are computed on demand;
    4. the disk: a store in ``store_dir`` (float64 in process, float32 on the cluster) must
       fit in ``free_disk`` unless it is built already (``store_built``). In process K is
       then built in memory without a store; on the cluster, where the workers read the
       store, it is refused.

    Then "auto" is resolved for the path: the working-set solver on rows and on X
    partitioned, :data:`muflow.solvers.registry.AUTO` by ``intercept`` on a stored K.

    Parameters
    ----------
    n_samples : int
    solver : str, default="auto"
        The solver asked for (a registered name or "auto").
    intercept : {"exact", "regularized", "none"}, default="exact"
    kernel_name : str or callable, default="rbf"
    solves : int, default=1
        Solves that read this K.
    client : distributed.Client or str, optional
        The client the solves run on (None: in process).
    gram : {"auto", "stored", "rows"}, default="auto"
        In process: "stored" and "rows" are taken as asked ("stored" still weighs the disk).
    gram_dtype : {"auto", "float64", "float32"}, default="auto"
        Storage of K in process and of the workers' kernel panels.
    cache_mb : float, optional
        Megabytes of kernel rows cached, carried in the plan.
    dask_input : bool, default=False
        X is a dask collection held by the workers: refused on a path that needs X here
        (without a client, a kernel not computed from X, a solver that does not run there).
    store_dir : str, optional
        Where the store would go; None: no store (K built in memory on the stored path).
    store_built : bool, default=False
        The store is in ``store_dir`` already: no disk is needed.
    available, free_disk : int, optional
        Bytes of memory available (default :func:`muflow.memory.available_memory_bytes`) and
        of free disk at ``store_dir`` (None: not checked).
    device : bool, default=False
        In process, on a GPU (``device="cuda"``): X is held there and K's rows are computed
        there ("rows", :class:`muflow.device.rows.DeviceRows`, which also keeps K whole on
        the device for a product solver when it fits); no store.

    Returns
    -------
    KernelPlan

    Raises
    ------
    MuflowInputError
        On a cluster, when the solver needs the Gram store and it does not fit on the disk,
        or X is a dask collection on a path that needs it here (the reason named:
        :func:`muflow.exceptions.dask_input_error`); ``SolverCombinationError`` when the
        solver reads rows of K, which the Gram store on the cluster does not serve.
    """
    if gram not in GRAM_CHOICES:
        raise MuflowInputError(f"gram must be one of {', '.join(GRAM_CHOICES)}, got {gram!r}")
    n = int(n_samples)
    if dask_input and not runs_on_workers(client, kernel_name, solver):
        raise dask_input_error(client, kernel_name, solver)
    if not isinstance(kernel_name, str) or kernel_name == "precomputed":
        path, reason, store, nbytes = ("stored", "K is given (a precomputed or callable kernel): "
                                       "held in this process", False, gram_bytes(n, np.float64))
    elif client is not None:
        path, reason, store, nbytes = _plan_on_cluster(n, solver, kernel_name, solves, client, gram_dtype,
                                                       dask_input, store_dir, store_built, free_disk)
    elif device:
        path, reason, store, nbytes = ("rows", "on the GPU: X held there, K's rows computed there "
                                       "(and K kept there whole for a product solver that fits)",
                                       False, 0)
    else:
        path, reason, store, nbytes = _plan_in_process(n, solver, solves, gram, gram_dtype, store_dir,
                                                       store_built, available, free_disk)
    return KernelPlan(path, reason, solves, store, nbytes, _resolved(solver, path, intercept),
                      None if cache_mb is None else float(cache_mb), gram_dtype)


def _plan_in_process(n, solver, solves, gram, gram_dtype, store_dir, store_built, available, free_disk):
    """Steps 2 to 4 of :func:`plan_kernel` in this process: (path, reason, store, bytes)."""
    from muflow.inmemory import gram_dtype as storage

    dtype = np.dtype(np.float64) if store_dir is not None else storage(n, gram_dtype)
    nbytes = gram_bytes(n, dtype)
    what = f"K of {n:,} samples ({_size(nbytes)} {dtype.name})"
    mode = gram_mode(gram, n, solver, sweep=solves > 1)
    if mode == "rows":
        if gram == "rows":
            return "rows", f"rows on demand as asked (gram='rows'); {what} is never stored", False, nbytes
        threshold = SWEEP_ROWS_MIN_SAMPLES if solves > 1 else ROWS_MIN_SAMPLES
        return "rows", (f"{n:,} samples > {threshold:,}: {what} would be read by {_solves(solves)}, "
                        "but rows on demand compute only the rows the working sets touch"), False, nbytes
    if mode == "auto" and not stored_fits(nbytes, available):
        cost = (f"; {solver} reads products, so each pass computes K again" if reads_products(solver)
                else "")
        return "rows", f"{what} does not fit in half the available memory: rows on demand{cost}", False, nbytes
    products = f"{solver} reads all of K every pass; " if reads_products(solver) else ""
    reason = f"{products}{what} fits in memory and is reused by {_solves(solves)}"
    if store_dir is None:
        return "stored", reason, False, nbytes
    if store_built or free_disk is None or nbytes <= free_disk:
        there = " (its store is there already)" if store_built else ""
        return "stored", reason + there, True, nbytes
    return "stored", (f"{reason}; its store would not fit in the {_size(free_disk)} free at "
                      f"{store_dir}: K is built in memory, no store written"), False, nbytes


def _plan_on_cluster(n, solver, kernel_name, solves, client, gram_dtype, dask_input, store_dir,
                     store_built, free_disk):
    """Step 1 of :func:`plan_kernel` with a client: X partitioned on the workers, or the Gram
    store on the cluster (refused where it does not fit on the disk or the workers' memory,
    where the solver reads rows, or X is on the workers already): (path, reason, store, bytes)."""
    nbytes = gram_bytes(n, np.float32)
    what = f"K of {n:,} samples ({_size(nbytes)} float32)"
    if runs_on_workers(client, kernel_name, solver):
        if not reads_products(solver):
            return "partitioned", (f"the working-set solver runs on X partitioned over the workers, "
                                   f"each computing the rows its working sets touch; {what} is never "
                                   f"stored, for {_solves(solves)}"), False, nbytes
        from muflow.inmemory import gram_dtype as storage

        if panels_fit(n, client, storage(n, gram_dtype)):
            return "partitioned", (f"{solver} reads all of K every pass; {what} fits as kernel panels "
                                   f"in the workers' memory, reused by {_solves(solves)}"), False, nbytes
        if dask_input:
            raise MuflowInputError(
                f"the kernel panels of {n} samples do not fit in the workers' memory "
                f"(muflow.routing.panels_fit), and solver {solver!r} would need the Gram store "
                "built from X in this process: use solver='working_set', give the workers more "
                "memory, or pass a NumPy array")
    elif reads_rows(solver):
        raise SolverCombinationError(
            f"solver {solver!r} reads rows of K, which the Dask operator does not serve; "
            "with a client/scheduler use solver='working_set' (X on the workers) or a "
            "multiplicative solver ('m3', 'munk') on a Gram store")
    if not store_built and free_disk is not None and nbytes > free_disk:
        raise MuflowInputError(
            f"solver {solver!r} on the cluster needs the Gram store of {what} in {store_dir}, "
            f"and {_size(free_disk)} is free there; free disk space, set gram.cache_dir "
            "(cache_dir) to a larger disk, or use solver='working_set' (X on the workers, no store)")
    if reads_products(solver):  # before the build: workers too small to stream it, in words
        from muflow.dask.store_operator import check_store_fits
        check_store_fits(client, n)
    why = (f"{solver} reads all of K every pass and its kernel panels do not fit in the workers' "
           "memory" if reads_products(solver) else f"{solver} does not run on X partitioned")
    return "cluster-store", (f"{why}: the Gram store of {what} is built on the cluster and served "
                             f"by the workers, reused by {_solves(solves)}"), True, nbytes
