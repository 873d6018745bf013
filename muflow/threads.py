"""One thread budget per process: how many threads muflow's work may use, and the control
of BLAS and of the threads that carry it out.

A process knows how many cores it may use and divides them once: among the threads of one
solve (row panels, gradient updates), or among forked children (one-vs-one pairs, sweep
chains, probability folds), never more busy threads than cores. :func:`thread_budget` is
the rule, :func:`divide_budget` the division among children, :func:`cap_threads` the cap a
child takes, :func:`run_on_threads` the one persistent pool, and
:func:`blas_single_threaded` keeps BLAS's own threads off the cores our threads use.

The budget respects what the caller allows, so that nested use does not oversubscribe the
cores: joblib's loky workers (``GridSearchCV(muflow.SVC(), n_jobs=2)``) start with
``OMP_NUM_THREADS`` set to their share, ``threadpoolctl.threadpool_limits`` lowers the
BLAS and OpenMP pools in force, a Dask worker runs ``nthreads`` tasks at once, and a forked
child takes its share of its parent's budget. scikit-learn-intelex (oneDAL on TBB) takes
every core the process may use by default, and so does muflow.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import sys
import threading
from dataclasses import dataclass

from muflow.exceptions import MuflowInputError

#: The environment variable that caps muflow's threads in a process (a positive integer).
ENV_VAR = "MUFLOW_NUM_THREADS"

#: Threading layers whose BLAS runs on one thread whatever it is asked: its thread count is
#: no caller's limit.
_SERIAL_LAYERS = ("disabled", "sequential")


# -- cores --------------------------------------------------------------------------------
def _cgroup_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """The CPUs a cgroup's quota grants (ceil(quota / period)), or None without a quota:
    a container limited to 2 CPUs on a 64-core host sees 64 in its affinity mask."""
    candidates = ((os.path.join(root, "cpu.max"), None),  # cgroup v2: "quota period" or "max period"
                  (os.path.join(root, "cpu", "cpu.cfs_quota_us"), os.path.join(root, "cpu", "cpu.cfs_period_us")),
                  (os.path.join(root, "cpu,cpuacct", "cpu.cfs_quota_us"),
                   os.path.join(root, "cpu,cpuacct", "cpu.cfs_period_us")))
    for quota_file, period_file in candidates:
        try:
            with open(quota_file) as f:
                fields = f.read().split()
            if period_file is not None:
                with open(period_file) as f:
                    fields = fields[:1] + f.read().split()[:1]
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = int(fields[0]), int(fields[1])
        except ValueError:
            return None
        return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
    return None


_QUOTA = {}  # pid -> the cgroup's quota (read once per process)


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask (``taskset``, a batch
    scheduler's cpuset), at most its cgroup's CPU quota (a container's ``--cpus``)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    pid = os.getpid()
    if pid not in _QUOTA:
        _QUOTA.clear()
        _QUOTA[pid] = _cgroup_quota()
    quota = _QUOTA[pid]
    return max(1, cores if quota is None else min(cores, quota))


# -- what the caller allows --------------------------------------------------------------------
def _positive_env(name: str, *, strict: bool) -> int | None:
    """A positive thread count from the environment variable ``name``; its first entry for
    OpenMP's nested list form ("4,2"). A bad value is an error for muflow's own variable
    (``strict``) and ignored for another library's."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw.split(",")[0])
    except ValueError:
        value = 0
    if value >= 1:
        return value
    if strict:
        raise MuflowInputError(
            f"{name}={raw!r}: it caps the threads muflow uses and must be a positive integer "
            f"(for example {name}=4); unset it to use every core")
    return None


def _nanny_variables() -> dict:
    """The variables of this process's environment that a Dask Nanny started in this
    process (a ``LocalCluster`` of worker processes: ``python -m muflow run``, a user's
    notebook) wrote there for its workers (its ``distributed.nanny.pre-spawn-environ``,
    ``OMP_NUM_THREADS=1`` and the BLAS variables among them), ``{name: value}``: it writes
    them into this process's environment before it spawns them, and leaves them there. Such
    values say nothing of this process's threads. In a Dask worker's own process they are
    the worker's settings, and count: none is returned there."""
    if "distributed.nanny" not in sys.modules:
        return {}
    worker = sys.modules.get("distributed.worker")
    if worker is not None and getattr(getattr(worker, "Worker", None), "_instances", None):
        return {}
    try:
        import dask

        spawned = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    except Exception:  # noqa: BLE001  a config that cannot be read changes nothing
        return {}
    return {name: os.environ[name].strip() for name, value in spawned.items()
            if value is not None and name in os.environ
            and str(value).strip() == os.environ[name].strip()}


def _caller_omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as the caller set it; not a Nanny's (:func:`_nanny_variables`)."""
    value = _positive_env("OMP_NUM_THREADS", strict=False)
    if value is None or "OMP_NUM_THREADS" in _nanny_variables():
        return None
    return value


#: The variables a library's pool takes its threads from when it is loaded, by
#: threadpoolctl's ``internal_api``.
_POOL_VARIABLES = {"openmp": ("OMP_NUM_THREADS",),
                   "openblas": ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"),
                   "mkl": ("MKL_NUM_THREADS", "OMP_NUM_THREADS"),
                   "blis": ("BLIS_NUM_THREADS", "OMP_NUM_THREADS")}


def _count_from_nanny(lib, nanny: dict) -> bool:
    """Whether ``lib``'s thread count is what a Nanny's variables ``nanny``
    (:func:`_nanny_variables`) gave it: a library loaded after a LocalCluster started in
    this process (scikit-learn's OpenMP, SciPy's BLAS, first imported then) starts its pool
    at the workers' count. A limit of the caller's own at that same count is not told apart,
    and not taken as a cap."""
    count = str(getattr(lib, "num_threads", None))
    return any(nanny.get(name) == count
               for name in _POOL_VARIABLES.get(getattr(lib, "internal_api", None), ()))


_CONTROLLER = {}  # (pid, modules loaded) -> threadpoolctl controller


def _controller():
    """threadpoolctl's controller of the libraries loaded in this process, made again only
    when modules were imported since (it scans the loaded libraries, milliseconds)."""
    key = (os.getpid(), len(sys.modules))
    controller = _CONTROLLER.get(key)
    if controller is None:
        from threadpoolctl import ThreadpoolController

        controller = ThreadpoolController()
        _CONTROLLER.clear()
        _CONTROLLER[key] = controller
    return controller


def _pool_limit(cores: int) -> int | None:
    """The fewest threads a BLAS or OpenMP pool in force allows (``threadpool_limits``,
    ``OPENBLAS_NUM_THREADS`` and the like) when fewer than ``cores``, or None. A pool's
    own default is every core, which limits nothing; serial builds do not count, and
    neither does muflow's own hold of BLAS to one thread (:func:`blas_single_threaded`):
    the count found when it was taken stands for the BLAS libraries meanwhile."""
    counts = []
    nanny = _nanny_variables()
    with _ONE_BLAS_THREAD.steady() as held:
        for lib in _controller().lib_controllers:
            if getattr(lib, "threading_layer", None) in _SERIAL_LAYERS:
                continue
            if lib.user_api == "blas" and held is not None:
                counts.append(held)
                continue
            if _count_from_nanny(lib, nanny):
                continue
            with contextlib.suppress(Exception):  # a library that cannot say sets no limit
                if lib.num_threads:
                    counts.append(int(lib.num_threads))
    return min(counts) if counts and min(counts) < cores else None


def dask_worker_threads() -> int | None:
    """``nthreads`` of the Dask worker running the calling task, or None outside a worker's
    task (distributed is not imported for this)."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None
    nthreads = getattr(worker, "nthreads", None) or getattr(getattr(worker, "state", None), "nthreads", None)
    return int(nthreads) if nthreads else None


#: The share of a forked child (:func:`cap_threads`); inherited by a process forked from it.
_CAP = None


def cap_threads(n: int | None) -> None:
    """Hold this process's budget (:func:`thread_budget`) to at most ``n`` threads (None
    lifts the cap): a process forked to solve beside others (:func:`muflow.forking.forked_map`)
    takes its share of the cores (:func:`divide_budget`), not all of them."""
    global _CAP
    _CAP = None if n is None else max(1, int(n))


def thread_cap() -> int | None:
    """This process's cap (:func:`cap_threads`), or None."""
    return _CAP


def threads_for(n_threads: int | None) -> int:
    """The threads a call may use when its object carries ``n_threads`` (None: the
    budget, :func:`thread_budget`): the count held to this process's cap. An operator or a
    solver made in a parent and inherited by a forked child carries the parent's count,
    while the child may use only its share (:func:`cap_threads`)."""
    if not n_threads:
        return thread_budget()
    return max(1, min(int(n_threads), _CAP or int(n_threads)))


#: The budget of the call in progress in this thread (:func:`budget_scope`).
_SCOPE: contextvars.ContextVar = contextvars.ContextVar("muflow_thread_budget", default=None)


@contextlib.contextmanager
def budget_scope(n: int):
    """Within the block, :func:`thread_budget` in this thread (and in processes forked
    from it) is at most ``n``: a fit or a sweep decides its budget once, and every solver
    and row computation it reaches without an explicit count takes it."""
    token = _SCOPE.set(max(1, int(n)))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def scoped_budget() -> int | None:
    """The budget of the fit or sweep in progress in this thread (:func:`budget_scope`),
    or None: what a part of it that divides the budget asks :func:`thread_budget` for."""
    return _SCOPE.get()


# -- the rule -------------------------------------------------------------------------------
def check_n_jobs(n_jobs, name: str = "n_jobs"):
    """``n_jobs`` validated: None, -1 (every core allowed), a positive integer, or joblib's
    -k (all allowed but k - 1); anything else raises :class:`MuflowInputError`."""
    import numbers

    if n_jobs is None:
        return None
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or int(n_jobs) == 0:
        raise MuflowInputError(
            f"{name} must be a positive integer (that many threads), -1 or None (every core "
            f"this process may use) or -k (every core but k - 1); got {n_jobs!r}")
    return int(n_jobs)


def thread_budget(n_jobs=None) -> int:
    """The threads this process's work may use: ``n_jobs`` capped by what the caller allows.

    Parameters
    ----------
    n_jobs : int or None, default=None
        scikit-learn's convention: None or -1 every core this process may use
        (:func:`usable_cores`: its affinity mask and cgroup quota); a positive integer that
        many threads, at most the cores (more would only time-share them); -k every core
        but k - 1, at least one.

    Returns
    -------
    int
        At least 1. The smallest of ``n_jobs`` and what the caller allows:

        - in a forked child of muflow's, its share (:func:`cap_threads`), which its
          parent computed from its own budget, every limit below included;
        - in a Dask worker's task, the worker's ``nthreads`` (the nanny sets
          ``OMP_NUM_THREADS=1`` and the BLAS variables in every worker, so those say
          nothing of the threads a task may use there);
        - elsewhere ``OMP_NUM_THREADS`` (joblib's loky workers start with their share in
          it) and the BLAS and OpenMP pools' thread counts in force (threadpoolctl's
          ``threadpool_limits``), where they are below the cores;
        - always ``MUFLOW_NUM_THREADS`` and the budget of the fit or sweep in progress
          in this thread (:func:`budget_scope`).

    Raises
    ------
    MuflowInputError
        A bad ``n_jobs`` or ``MUFLOW_NUM_THREADS``.
    """
    n_jobs = check_n_jobs(n_jobs)
    cores = usable_cores()
    caps = [_positive_env(ENV_VAR, strict=True), _SCOPE.get()]
    allowed = thread_cap()
    if allowed is None:
        allowed = dask_worker_threads()
        if allowed is None:
            caps += [_caller_omp_threads(), _pool_limit(cores)]
    every = cores if allowed is None else min(cores, allowed)
    if n_jobs is None or n_jobs == -1:
        want = every
    elif n_jobs < 0:
        want = max(1, every + 1 + n_jobs)
    else:  # never more busy threads than cores: more would only time-share them
        want = min(n_jobs, every)
    return max(1, min([want] + [c for c in caps if c is not None]))


def makespan(tasks: int, processes: int, cores: int) -> float:
    """Wall time of ``tasks`` equal tasks (1 each) on ``processes`` processes sharing
    ``cores`` cores evenly: rounds of up to ``processes`` tasks, each round as long as its
    tasks' total work over the cores it can use."""
    full, last = divmod(tasks, processes)
    rounds = [processes] * full + ([last] if last else [])
    return sum(max(1.0, k / cores) for k in rounds)


def pool_size(tasks: int, n_jobs: int) -> int:
    """Processes for ``tasks`` equal tasks on ``n_jobs`` cores.

    With 5 folds on 2 cores, 2 processes take 3 rounds while the work is 2.5 rounds: the
    last fold runs alone and a core idles. A few more processes than cores (the kernel
    time-shares them) end together instead: the smallest count, at most 2 * n_jobs,
    whose makespan for equal tasks is the least.
    """
    if tasks <= n_jobs:
        return max(1, tasks)
    candidates = range(n_jobs, min(tasks, 2 * n_jobs) + 1)
    return min(candidates, key=lambda p: (makespan(tasks, p, n_jobs), p))


@dataclass(frozen=True)
class Share:
    """A budget divided among forked children: ``processes`` of ``threads`` each."""

    processes: int
    threads: int


def divide_budget(tasks: int, budget: int) -> Share:
    """``budget`` threads divided among forked children for ``tasks`` equal tasks:
    P = min(tasks, budget) processes of budget // P threads, never more threads than the
    budget in all.

    Where there are more tasks than threads, the processes are as many as end equal tasks
    soonest when the kernel time-shares the cores (:func:`pool_size`: 5
    folds on 2 cores take 3 processes, not 2 and a last round alone), each on one thread:
    the extra processes then share cores, never threads of their own.
    """
    tasks, budget = max(1, int(tasks)), max(1, int(budget))
    processes = min(tasks, budget) if tasks <= budget else pool_size(tasks, budget)
    return Share(processes, max(1, budget // processes))


# -- BLAS ----------------------------------------------------------------------------------
class _OneBlasThread:
    """Context that keeps BLAS on one thread while any caller is inside it.

    threadpoolctl's limit restores, on exit, the count it found on entry: two sections
    overlapping in two threads (a threaded server, a Dask worker, prediction blocks) would
    leave BLAS on one thread for good when the first in is not the last out. Here the first
    caller in takes the limit and the last one out restores it. A forked child starts
    afresh (the parent's count is not its own); one forked under the hold
    (:func:`muflow.forking.forked_map`) inherits BLAS on one thread, and the count the
    parent's hold found stands for its libraries (:meth:`steady`).
    """

    def __init__(self):
        self._reset()

    def _reset(self):
        inherited = getattr(self, "_held_from", None) if getattr(self, "_inside", 0) else None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._inside = 0
        self._limiter = None
        self._blas = None
        self._held_from = None
        self._inherited = inherited

    def __enter__(self):
        if self._pid != os.getpid():
            self._reset()
        with self._lock:
            if self._inside == 0:
                if self._blas is None:
                    # made once: threadpoolctl scans the loaded libraries on every
                    # controller, which a row fetched alone would pay each time
                    from threadpoolctl import ThreadpoolController

                    self._blas = ThreadpoolController().select(user_api="blas")
                nanny = _nanny_variables()
                libs = [(lib.num_threads, getattr(lib, "threading_layer", None),
                         _count_from_nanny(lib, nanny))
                        for lib in self._blas.lib_controllers]  # each count read once
                self._held_from = min((c for c, layer, from_nanny in libs
                                       if c and layer not in _SERIAL_LAYERS and not from_nanny),
                                      default=None)
                # already one thread each (a child forked under the hold, forked_map): no
                # call, for OpenBLAS in a forked child starts its threads to be told the
                # count, and they spin a while on the cores the child's siblings use
                if any(c != 1 for c, _, _ in libs):
                    self._limiter = self._blas.limit(limits=1)
                elif self._inherited is not None:
                    self._held_from = self._inherited
            self._inside += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                if self._limiter is not None:
                    self._limiter.restore_original_limits()
                self._limiter = None
                self._held_from = None

    @contextlib.contextmanager
    def steady(self):
        """The fewest threads BLAS had before the hold (None when not held; in a child
        forked under the hold, the count the parent's hold found), and no thread entering
        the hold while the caller reads the libraries' counts (it would read 1)."""
        if self._pid != os.getpid():
            self._reset()
        with self._lock:
            yield self._held_from if self._inside else self._inherited


_ONE_BLAS_THREAD = _OneBlasThread()


def blas_single_threaded() -> _OneBlasThread:
    """BLAS held to one thread: our threads run panels side by side (each panel's product
    next to another panel's element-wise pass), and a panel of a few rows is faster on one
    BLAS thread than on several, whose threads wait on each other. The one process-wide
    :class:`_OneBlasThread`, so that overlapping sections restore BLAS once all have left."""
    return _ONE_BLAS_THREAD


from muflow.thread_pool import deal, run_on_threads  # noqa: E402  (re-exported)


__all__ = ["ENV_VAR", "Share", "blas_single_threaded", "budget_scope", "cap_threads", "check_n_jobs",
           "dask_worker_threads", "deal", "divide_budget", "makespan", "pool_size", "run_on_threads",
           "scoped_budget", "thread_budget", "thread_cap", "threads_for", "usable_cores"]
