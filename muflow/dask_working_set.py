"""The working-set solver across Dask workers: X stays where it lives (issue 17, item 1).

The algorithm is :mod:`muflow.solvers.working_set`'s (Joachims' decomposition as ThunderSVM
runs it, the pair rule WSS 2 of Fan, Chen & Lin, JMLR 6, 2005, eq. (14)); what changes is
where its state lives. X is split by rows into partitions, each owned by a
:class:`RowPartition`, a ``distributed`` actor (a long-lived object on one worker) that
keeps its rows of X and, for the column being solved, its slices of y, the bounds, the
linear term, alpha and the gradient G, and its active set. The client keeps alpha whole
(O(n), needed for the answer and to rebuild a lost slice) and the q x q subproblem.

One outer iteration is one round trip, one call per actor:

- the client sends X_B (the rows of the variables that moved in the last subproblem) and
  y_B delta_B: O(q d);
- each actor updates its slice of the gradient, ``G_p += y_p K(X_B, X_p)' (y_B delta_B)``,
  from its cache of kernel rows over its columns (the rows it lacks computed there from the
  rows of X it holds, as in process: :meth:`muflow.kernel_rows.KernelRows.foreign_rows_into`),
  applies shrinking when asked, and answers its best candidates for the next working set:
  the q / (2 workers) most violating variables of I_up and of I_low on its slice (first
  order) and the active members of the previous working set, with their y, alpha, bound,
  G, K_tt and rows of X: O(q d).

The client merges the answers: the maximal violators of the merged candidates are the
global ones (each actor sent its own best of each side), so the stopping gap is exact; the
working set keeps the useful half of the previous one (as ThunderSVM does) and takes the
two violators and the candidates that rank best by WSS 2's second-order gain against them,
computed on the client from the candidates' rows. K_BB is computed on the client from X_B
(in the workers' dtype) and the subproblem is solved there by the compiled SMO
(:func:`muflow.solvers.smo.smo_column`), as in process; the client's BLAS runs on one
thread (OpenBLAS's idle threads would spin on the workers' cores).

Nothing of size n crosses the network per iteration; G is pulled once to certify a point
with the common KKT measure (:mod:`muflow.solvers.kkt`) when the gap is met.

A worker lost mid-fit is replaced (:meth:`DaskRowPartitions.recover`): its partitions are
started again from their source and given the column at the current alpha (their gradient
slice recomputed from the support's rows), and the round trip is made again.

Notes
-----
Memory per worker: its rows of X, the row cache (``cache_mb``; it must hold one working
set's rows, q n_p 4 bytes above 4096 samples), a few vectors of its rows. On the client:
alpha, y, the bounds (O(n)), the candidates (O(workers q d)) and the q x q subproblem.
docs/scaling.md gives the cost of an iteration as a function of n, d, q and the workers.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict

import numpy as np
import scipy.sparse as sp

from muflow.exceptions import MuflowError, MuflowInputError
from muflow.inmemory import _blas_single_threaded, gram_dtype
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.operators import DenseGram, GramOperator
from muflow.solvers._subset import Column, assemble, column_callback
from muflow.solvers.problem import DualProblem, DualSolution
from muflow.solvers._working_set_compiled import Threads, add_rows
from muflow.solvers.rowcache import DEFAULT_CACHE_MB, RowCache
from muflow.solvers.smo import smo_column
from muflow.solvers.working_set import (_TAU, _smallest, check_q, default_q,
                                         projected_gradient, side_violations)

#: Largest kernel block K(X_B, X_p) an actor holds at once in a product (bytes, float64).
BLOCK_BYTES = 64 << 20

#: Partitions lost with their workers are restarted at most this many times in a row.
MAX_RECOVERIES = 3


def _stack(rows):
    """Rows of X from several partitions, dense or CSR, in order."""
    if any(sp.issparse(r) for r in rows):
        return sp.vstack([sp.csr_matrix(r) for r in rows], format="csr")
    return np.concatenate(rows, axis=0)


class RowPartition:
    """Actor on one worker: rows ``[lo, lo + len(X))`` of X and one column's state on them.

    Parameters
    ----------
    X : ndarray or CSR matrix
        The partition's rows (from a scattered array, a dask.array block or a dataframe
        partition: passed by the scheduler where it already lives).
    lo : int
        Global index of its first row.
    kernel : dict
        :meth:`muflow.kernels.Kernel.to_dict`.
    """

    def __init__(self, X, lo, kernel, n_total, cache_mb=DEFAULT_CACHE_MB):
        self.X = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.ascontiguousarray(X, dtype=np.float64)
        self.lo = int(lo)
        self.n = self.X.shape[0]
        values = self.X.data if sp.issparse(self.X) else self.X
        if not np.all(np.isfinite(values)):
            raise ValueError(f"Input X contains NaN or infinity (in rows {self.lo} to "
                             f"{self.lo + self.n - 1}); remove or impute them before fitting")
        self.kernel = Kernel.from_dict(kernel)
        self.QD = np.ascontiguousarray(self.kernel.diagonal(self.X), dtype=np.float64)
        self.products = 0
        # kernel rows computed as in process (muflow.kernel_rows): float64 up to 4096
        # samples in all, float32 above; X_p prepared once, a column chunk at a time
        self.rows_op = KernelRows(self.X, self.kernel, dtype=gram_dtype(int(n_total)), n_threads=1)
        self.dtype = self.rows_op.dtype
        slots = int(np.clip(cache_mb * 2**20 // (self.dtype.itemsize * max(self.n, 1)), 2, 1 << 20))
        self.cache = np.empty((slots, self.n), dtype=self.dtype)
        self.slot_of = OrderedDict()  # global row -> slot, least recently used first
        self.rows_computed = 0
        self._scratch = {}
        self.threads = Threads(1)
        self.seconds = dict.fromkeys(("rows", "gradient", "candidates", "iterate"), 0.0)

    # -- the kernel on this partition's rows --------------------------------------------
    def _times(self, XB, coef):
        """``K(X_B, X_p)' coef`` (coef of shape (|B|,) or (|B|, m)): the block computed in
        row chunks of at most BLOCK_BYTES."""
        out = np.zeros((self.n,) + coef.shape[1:])
        step = max(1, BLOCK_BYTES // (8 * max(self.n, 1)))
        for s in range(0, XB.shape[0], step):
            block = np.empty((min(step, XB.shape[0] - s), self.n))
            self.kernel.block_into(XB[s:s + step], self.X, block)
            out += block.T @ coef[s:s + step]
        self.products += 1
        return out

    def kernel_rows(self, XR):
        """``K(X_R, X_p)``: the columns of this partition of the rows R (float64)."""
        block = np.empty((XR.shape[0], self.n))
        return self.kernel.block_into(XR, self.X, block)

    def _slots(self, XB, B):
        """Cache slots of the rows B (distinct global indices), computing the missing ones
        in one block; least recently used rows are evicted (never one of B)."""
        slots = np.empty(B.size, dtype=np.int64)
        missing = []
        for k, b in enumerate(B.tolist()):
            slot = self.slot_of.get(b)
            if slot is None:
                missing.append(k)
            else:
                self.slot_of.move_to_end(b)
                slots[k] = slot
        if missing:
            missing = np.asarray(missing, dtype=np.int64)
            free = len(self.cache) - len(self.slot_of)
            for k in missing:
                if free > 0:
                    slot = len(self.cache) - free
                    free -= 1
                else:
                    _, slot = self.slot_of.popitem(last=False)
                self.slot_of[int(B[k])] = slot
                slots[k] = slot
            rows = B[missing]
            same = np.where((rows >= self.lo) & (rows < self.lo + self.n), rows - self.lo, -1)
            self.rows_op.foreign_rows_into(XB[missing], self.cache, slots[missing], same,
                                           scratch=self._scratch)
            self.rows_computed += missing.size
        return slots

    def info(self):
        return {"lo": self.lo, "n": self.n, "products": self.products,
                "rows_computed": self.rows_computed, "cache_slots": len(self.cache),
                "seconds": dict(self.seconds), "row_seconds": self.rows_op.row_seconds}

    def diagonal(self):
        return self.QD

    def matmul(self, XS, coef):
        """``K(X_p, X_S) coef`` (the certificate's and a warm start's product)."""
        coef = np.asarray(coef, dtype=np.float64)
        return self._times(XS, coef) if len(coef) else np.zeros((self.n,) + coef.shape[1:])

    # -- one column's state ----------------------------------------------------------------
    def begin(self, y, U, p, alpha, equality, XS, coef):
        """Take the slices of a column; ``G = y * K(X_p, X_S) coef + p`` with S the support
        of the start (empty from alpha = 0)."""
        self.y = np.asarray(y, dtype=np.float64)
        self.U = np.asarray(U, dtype=np.float64)
        self.p = np.asarray(p, dtype=np.float64)
        self.alpha = np.array(alpha, dtype=np.float64)
        self.equality = bool(equality)
        self.G = self.y * self.matmul(XS, coef) + self.p
        self.act = np.flatnonzero(self.U > 0)
        return self.n

    def iterate(self, XB, moved, coef, B, alpha_B, shrink_with, reactivate, k):
        """Apply the last subproblem's step (rows ``moved`` of X_B, ``coef`` = y delta
        there), shrink or reactivate when asked, and answer the best ``k`` candidates of
        each side (see the module notes)."""
        t0 = time.perf_counter()
        B = np.asarray(B, dtype=np.int64)
        if len(coef):
            slots = self._slots(XB, np.asarray(moved, dtype=np.int64))
            t1 = time.perf_counter()
            self.seconds["rows"] += t1 - t0
            self.threads.split(add_rows, self.n, slots.size, self.G, self.y, self.cache, slots,
                               np.ascontiguousarray(coef, dtype=np.float64))
            self.seconds["gradient"] += time.perf_counter() - t1
        mine = (B >= self.lo) & (B < self.lo + self.n)
        self.alpha[B[mine] - self.lo] = np.asarray(alpha_B)[mine]
        if reactivate:
            self.act = np.flatnonzero(self.U > 0)
        elif shrink_with is not None:
            self._shrink(*shrink_with)
        t2 = time.perf_counter()
        answer = self._candidates(int(k), B[mine] - self.lo)
        self.seconds["candidates"] += time.perf_counter() - t2
        self.seconds["iterate"] += time.perf_counter() - t0
        return answer

    def _shrink(self, gmax, gmax2):
        """libsvm's rule (Chang & Lin, LIBSVM sec. 5.2): a variable at a bound that the
        maximal violating pair (gmax over I_up, gmax2 over I_low) says cannot move leaves
        the active set; without the sum constraint, one at a bound whose gradient points
        out of the box by more than the largest violation."""
        act = self.act
        y, a, U, G = self.y[act], self.alpha[act], self.U[act], self.G[act]
        at_upper, at_lower = a >= U, a <= 0.0
        if self.equality:
            pos = y > 0
            drop = (at_upper & np.where(pos, -G > gmax, -G > gmax2)) | \
                   (at_lower & np.where(pos, G > gmax2, G > gmax))
        else:
            drop = (at_lower & (G > gmax)) | (at_upper & (-G > gmax))
        self.act = act[~drop]

    def _candidates(self, k, previous):
        """The k most violating variables of each side (first order) and the active
        members of the previous working set ``previous`` (local indices), which the client
        may keep (as ThunderSVM keeps half of its previous set)."""
        act = self.act
        at = np.minimum(np.searchsorted(act, previous), max(act.size - 1, 0))
        kept = at[act[at] == previous] if act.size else at[:0]
        y, a, U, G = self.y[act], self.alpha[act], self.U[act], self.G[act]
        if self.equality:
            _, _, _, v_up, v_low = side_violations(y, a, U, G)
            pick = np.union1d(np.union1d(_smallest(-v_up, k), _smallest(-v_low, k)), kept)
            scores = (v_up[pick], v_low[pick])
        else:
            score = np.abs(projected_gradient(a, U, G))
            pick = np.union1d(_smallest(-np.where(score > 0, score, -np.inf), k), kept)
            scores = (score[pick],)
        local = act[pick]
        return {"idx": local + self.lo, "scores": scores, "y": self.y[local], "a": self.alpha[local],
                "U": self.U[local], "G": self.G[local], "QD": self.QD[local], "X": self.X[local],
                "n_act": int(act.size)}

    def state(self):
        """(alpha, G) of the slice: the certificate's pull."""
        return self.alpha, self.G

    def rows(self, local):
        return self.X[np.asarray(local, dtype=np.int64)]


def check_finite_blocks(X) -> None:
    """Refuse a dask array with NaN or infinite values, naming the rows of the first block
    that holds one; one pass over the blocks where they are, one boolean each back."""
    ok = X.map_blocks(lambda b: np.array([[bool(np.all(np.isfinite(b)))]]), chunks=(1, 1),
                      dtype=bool).rechunk({1: -1}).compute()
    bad = np.flatnonzero(~np.all(np.asarray(ok), axis=1))
    if bad.size:
        lo = int(np.sum(X.chunks[0][: bad[0]]))
        hi = lo + int(X.chunks[0][bad[0]]) - 1
        raise ValueError(f"Input X contains NaN or infinity (in rows {lo} to {hi}); remove or "
                         "impute them before fitting")


class DaskRowPartitions(GramOperator):
    """X split by rows over the workers of ``client``, one :class:`RowPartition` each; as a
    :class:`~muflow.operators.GramOperator`, K computed where the rows are (a product
    ``K @ V`` sends the rows of X where V is non-zero, rows of K come back).

    Parameters
    ----------
    X : ndarray, CSR matrix, dask.array or dask.dataframe
        NumPy and SciPy data are split into one contiguous partition per worker and
        scattered once; a dask collection's row blocks (dataframe: partitions) become the
        partitions where they already are.
    kernel : Kernel
    client : distributed.Client
    owns_client : bool, default=False
        Close ``client`` with the operator.
    cache_mb : float, default=256
        Kernel rows each worker caches (libsvm's ``cache_size``), in MB.
    """

    def __init__(self, X, kernel: Kernel, client, *, owns_client=False, cache_mb=DEFAULT_CACHE_MB):
        self.client = client
        self.owns_client = bool(owns_client)
        self.kernel = kernel
        self.cache_mb = float(cache_mb)
        self._source = X
        self._blocks_of, bounds = self._blocks(X)
        self.bounds = bounds
        self.n = bounds[-1][1] if bounds else 0
        self.recoveries = 0
        self.dtype = gram_dtype(self.n)  # of the workers' kernel rows (muflow.kernel_rows)
        futures = [self._start(i) for i in range(len(bounds))]
        # an actor's calls go through the current client (distributed's get_client()): this
        # one, not the process's default client, which may be another or none
        with self.client.as_current():
            self.actors = self.client.gather(futures)
        self._futures = futures
        self.nonnegative = kernel.name in ("rbf", "laplacian") and kernel.offset >= 0

    def _start(self, i):
        """Start the actor of partition i on its rows: a dask block where it is (the
        scheduler recomputes a lost one from its graph), NumPy rows scattered afresh."""
        lo, hi = self.bounds[i]
        return self.client.submit(RowPartition, self._block(i), lo, self.kernel.to_dict(), self.n,
                                  self.cache_mb, actor=True, pure=False,
                                  key=f"muflow-rows-{uuid.uuid4().hex[:8]}-{lo}-{hi}")

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

    def retrying(self, call, *, restart=None, again=None):
        """``call()``; when partitions are lost with their workers, start them again from
        their source (:meth:`recover`), hand them their state back (``restart(lost)``) and
        make ``again()`` (default: the same call), at most :data:`MAX_RECOVERIES` times in
        a row."""
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                return call() if attempt == 0 else (again or call)()
            except LostPartitions as lost:
                if attempt == MAX_RECOVERIES:
                    raise MuflowError(f"the solve on the workers lost workers {MAX_RECOVERIES + 1} "
                                      "times in a row; check the workers' memory and logs") from None
                self.recover(lost.lost)
                if restart is not None:
                    try:
                        restart(lost.lost)
                    except LostPartitions:
                        continue

    #: :func:`muflow.solvers.working_set.solve_working_set` solves on the workers
    partitioned = True

    def _blocks(self, X):
        from muflow.distributed import is_dask_array

        client = self.client
        if hasattr(X, "to_dask_array"):  # a dask.dataframe
            X = X.to_dask_array(lengths=True)
        if is_dask_array(X):
            if X.ndim != 2:
                raise MuflowInputError(f"X must be 2-d, got a dask array of shape {X.shape}")
            from distributed import futures_of

            # one block per row range, kept on the workers that computed it
            X = client.persist(X.rechunk({1: -1}))
            by_key = {f.key: f for f in futures_of(X)}
            blocks = [by_key[row[0]] for row in X.__dask_keys__()]
            sizes = X.chunks[0]
            self._from_dask = True
        else:
            workers = sorted(client.scheduler_info()["workers"])
            n = X.shape[0]
            parts = max(1, min(len(workers), n))
            edges = np.linspace(0, n, parts + 1).astype(int)
            sizes = np.diff(edges)
            blocks = [client.scatter(X[a:b], workers=[w], hash=False) for a, b, w in zip(edges[:-1], edges[1:], workers)]
            self._from_dask = False
        bounds, lo = [], 0
        for s in sizes:
            bounds.append((lo, lo + int(s)))
            lo += int(s)
        return blocks, bounds

    def call(self, method, *args):
        """``method(*args)`` on every actor in one round trip; answers in partition order."""
        return self.wait([getattr(actor, method)(*args) for actor in self.actors])

    def wait(self, calls) -> list:
        """The answers of actor calls, awaited together in the client's event loop (each
        call's own ``result()`` kept the client's thread busy: measured, the client took a
        core from the two workers).

        Raises
        ------
        LostPartitions
            When calls failed because their worker is gone (the others' answers are lost);
            a closed scheduler raises :class:`muflow.distributed.SchedulerLostError`.
        """
        from muflow.distributed import lost_scheduler_error

        answers = self.client.sync(_answers, calls)
        lost = [i for i, a in enumerate(answers) if isinstance(a, BaseException)]
        if lost:
            if getattr(self.client, "status", "running") != "running":
                raise lost_scheduler_error(self.client)
            own = [answers[i] for i in lost
                   if isinstance(answers[i], (ValueError, TypeError, MuflowInputError))]
            if own:  # the call's own error, not a lost worker
                raise own[0]
            raise LostPartitions(lost)
        return answers

    def take(self, idx) -> np.ndarray:
        """Rows ``idx`` of X (dense or CSR), fetched from their partitions."""
        idx = np.asarray(idx, dtype=np.int64)
        futures = []
        for actor, (lo, hi) in zip(self.actors, self.bounds):
            where = np.flatnonzero((idx >= lo) & (idx < hi))
            if where.size or not futures:
                futures.append((where, actor.rows(idx[where] - lo)))
        got = _stack(self.wait([f for _, f in futures]))  # row k is idx[positions[k]]
        positions = np.concatenate([w for w, _ in futures])
        return got[np.argsort(positions)] if idx.size else got

    def matmul(self, V):
        V = np.asarray(V, dtype=np.float64)
        flat = V.ndim == 1
        V2 = V[:, None] if flat else V
        support = np.flatnonzero(np.any(V2 != 0, axis=1))
        out = np.concatenate([np.asarray(r) for r in self.call("matmul", self.take(support),
                                                              V2[support])], axis=0)
        return out[:, 0] if flat else out

    def rows(self, idx):
        XR = self.take(idx)
        return np.concatenate([np.asarray(r) for r in self.call("kernel_rows", XR)], axis=1)

    def diagonal(self) -> np.ndarray:
        return np.concatenate([np.asarray(d) for d in self.call("diagonal")])

    def close(self):
        for f in self._futures:
            f.release()
        self._futures, self.actors = [], []
        if self.owns_client:
            self.owns_client = False
            self.client.close()


def solve_working_set_dask(problem: DualProblem, *, init=None, tol: float = 1e-3,
                           max_iter: int = 100_000, q: int | None = None, shrinking: bool = True,
                           callback=None) -> DualSolution:
    """The working-set solver (:func:`muflow.solvers.working_set.solve_working_set`, which
    hands its problem here when the operator is a :class:`DaskRowPartitions`) on X
    partitioned over Dask workers, one column after another.

    Parameters
    ----------
    problem : DualProblem
        Its operator a :class:`DaskRowPartitions`; any intercept mode, per-sample bounds
        and linear term.
    init : ndarray of shape (n,) or (n, m), tuple (alpha, bias) or DualSolution, optional
        Warm start (clipped and balanced as in process); its support's rows of X are sent
        to the workers once.
    tol, max_iter, shrinking
        As in process: the loop stops at a maximal-violating-pair gap of ``tol``;
        ``max_iter`` outer iterations per column.
    q : int, optional
        Working-set size; default :func:`~muflow.solvers.working_set.default_q`.
    callback : callable, optional
        ``callback(iteration, alpha, objective)`` after every outer iteration; True stops.

    Returns
    -------
    DualSolution
        As in process; ``timings`` adds "round_trips", "bytes_sent" and "bytes_received"
        (the payload of the iterations' calls, all workers together).
    """
    parts = problem.operator
    if not isinstance(parts, DaskRowPartitions):
        raise MuflowInputError("solve_working_set_dask needs a problem on DaskRowPartitions")
    n = problem.n
    alpha0, _ = problem.check_init(init)
    check_q(q)
    q_max = int(q) if q is not None else default_q(n)
    t0 = time.perf_counter()
    timings = {"round_trips": 0, "bytes_sent": 0, "bytes_received": 0, "select": 0.0,
               "subproblem": 0.0, "calls": 0.0, "kkt": 0.0, "q": q_max}
    alphas, biases, curves, viols, iters = [], [], [], [], 0
    for j in range(problem.m):
        col = Column(problem, j)
        alpha = col.start(None if alpha0 is None else alpha0[:, j])
        on_iter = column_callback(callback, problem, alphas, curves, j, alpha)
        loop = _ColumnLoop(parts, col, alpha, q_max, timings)
        # the client's products are small (K_BB): on one BLAS thread, for OpenBLAS's idle
        # threads spin after each call and took a core from the workers (measured: 5.3 of
        # the client's 7.4 CPU seconds in a 6.7 s fit on 2 cores)
        with _blas_single_threaded():
            v, it, bias, curve = loop.run(tol=tol, max_iter=max(0, int(max_iter)),
                                          shrinking=shrinking, on_iter=on_iter)
        alphas.append(loop.alpha)
        biases.append(bias if col.equality else 0.0)
        curves.append(curve)
        viols.append(v)
        iters = max(iters, it)
    timings["outer_iterations"] = iters
    timings["total"] = time.perf_counter() - t0
    return assemble(problem, alphas, biases, curves, viols, tol, timings, "working_set", iters)


class _ColumnLoop:
    """The outer loop of one column against the partitions (module notes)."""

    def __init__(self, parts, col, alpha, q, timings):
        self.parts, self.col, self.alpha, self.timings = parts, col, alpha, timings
        self._recovering(lambda: self._begin(range(len(parts.actors))))
        n_free = int((col.U > 0).sum())
        self.q = max(2, min(q, n_free + n_free % 2))
        self.kernel = parts.kernel

    def _begin(self, which):
        """Hand partitions ``which`` their slices of the column at the current alpha (their
        gradient is computed there from the support's rows)."""
        col, alpha, parts = self.col, self.alpha, self.parts
        support = np.flatnonzero(alpha)
        XS = parts.take(support)
        coef = col.y[support] * alpha[support]
        calls = []
        for i in which:
            lo, hi = parts.bounds[i]
            calls.append(parts.actors[i].begin(col.y[lo:hi], col.U[lo:hi], col.p[lo:hi],
                                               alpha[lo:hi], col.equality, XS, coef))
        parts.wait(calls)

    def _recovering(self, call, again=None):
        """``call()``; when partitions are lost with their workers, restart them from their
        source, give them the column at the current alpha and make ``again()`` (default:
        the same call) (:meth:`DaskRowPartitions.retrying`)."""
        return self.parts.retrying(call, restart=self._begin, again=again)

    def _round_trip(self, XB, moved, coef, B, alpha_B, shrink_with, reactivate):
        """One call per actor (see :meth:`_round_trip_once`). After a recovery the call is
        made again without the step, which the other workers applied and the restarted
        ones hold in their gradient, with every variable active again."""
        none = np.zeros(0, dtype=np.int64)
        return self._recovering(
            lambda: self._round_trip_once(XB, moved, coef, B, alpha_B, shrink_with, reactivate),
            again=lambda: self._round_trip_once(XB[:0], none, np.zeros(0), none, np.zeros(0),
                                                None, True))

    def _round_trip_once(self, XB, moved, coef, B, alpha_B, shrink_with, reactivate):
        t = time.perf_counter()
        k = max(8, self.q // (2 * len(self.parts.actors)))  # a side of B from all workers
        futures = [actor.iterate(XB, moved, coef, B, alpha_B, shrink_with, reactivate, k)
                   for actor in self.parts.actors]
        answers = self.parts.wait(futures)
        self.timings["calls"] += time.perf_counter() - t
        self.timings["round_trips"] += 1
        sent = ((XB.data.nbytes if sp.issparse(XB) else XB.nbytes) + moved.nbytes + coef.nbytes
                + B.nbytes + alpha_B.nbytes)
        self.timings["bytes_sent"] += sent * len(futures)
        self.timings["bytes_received"] += sum(
            (a["X"].data.nbytes if sp.issparse(a["X"]) else a["X"].nbytes) + 7 * 8 * a["idx"].size
            for a in answers)
        return answers

    def run(self, *, tol, max_iter, shrinking, on_iter=None):
        """The loop of :func:`muflow.solvers.working_set._solve_column`, one round trip an
        iteration; returns (violation, iterations, bias, curve)."""
        col, timings = self.col, self.timings
        none = np.zeros(0, dtype=np.int64)
        nothing = (self.parts.take(none), none, np.zeros(0), none, np.zeros(0))
        sending = nothing
        gap_tol = tol
        shrink_every = max(1, min(col.y.shape[0], 1000) // self.q)  # libsvm: every 1000 steps
        it, since_shrink, unshrunk, stalls = 0, 0, False, 0
        shrink_with, reactivate, shrunk, stopped = None, False, False, False
        F = self._certify_state()[1]
        curve, bias = [F], 0.0
        previous = np.zeros(0, dtype=np.int64)
        while True:
            while True:
                answers = self._round_trip(*sending, shrink_with, reactivate)
                sending = nothing  # applied by the workers
                shrunk = (shrunk or shrink_with is not None) and not reactivate
                shrink_with, reactivate = None, False
                t = time.perf_counter()
                cand = _Candidates(answers, col.equality, previous)
                if it >= max_iter or not cand.gap > gap_tol:
                    timings["select"] += time.perf_counter() - t
                    break
                if shrinking and not unshrunk and cand.gap <= 10.0 * gap_tol:
                    unshrunk, reactivate = True, shrunk
                elif shrinking and since_shrink >= shrink_every:
                    shrink_with, since_shrink = cand.extremes, 0
                sel = cand.select(self.q, self.kernel)
                timings["select"] += time.perf_counter() - t
                *sending, change = self._step(cand, sel, cand.gap, gap_tol)
                previous = sending[3]
                if sending[2].size == 0:  # nothing moved: certify
                    break
                it += 1
                since_shrink += 1
                F += change
                curve.append(F)
                if on_iter is not None and on_iter(it, F):
                    stopped = True
                    break
            if sending[2].size:  # stopped by the callback: the last step reaches the workers
                self._round_trip(*sending, None, False)
                sending = nothing
            violation, F, bias = self._certify_state(bias)
            curve[-1] = F
            if violation <= tol or it >= max_iter or stopped:
                return violation, it, bias, curve
            if not shrunk:
                stalls += 1
                if stalls > 20:  # the gap cannot be closed further (rounding)
                    return violation, it, bias, curve
                gap_tol *= 0.25
            reactivate, previous = shrunk, np.zeros(0, dtype=np.int64)

    def _certify_state(self, bias=0.0):
        """Pull G (O(n), once per certificate): the common KKT measure, F and the bias."""
        t = time.perf_counter()
        G = np.concatenate([np.asarray(g) for _, g in self._recovering(lambda: self.parts.call("state"))])
        violation, bias = self.col.kkt(self.alpha, G, bias)
        F = self.col.objective(self.alpha, G)
        self.timings["kkt"] += time.perf_counter() - t
        return violation, F, bias

    def _step(self, cand, sel, gap, gap_tol):
        """Solve the subproblem on the selected candidates; what the next call sends."""
        t = time.perf_counter()
        B = cand.idx[sel]
        XB = cand.X[sel]
        # in the workers' dtype, as in process K_BB is gathered from the row cache (float32
        # above 4096 samples: 1.1 ms at q = 512 where float64 took 3.5 ms)
        K_BB = self.kernel.block_into(XB, XB, np.empty((B.size, B.size), dtype=self.parts.dtype))
        yB, UB, aB = cand.y[sel], cand.U[sel], cand.a[sel].copy()
        lin = cand.G[sel] - yB * (K_BB.T @ (yB * aB))
        sub = Column(DualProblem(DenseGram(K_BB), yB, upper=UB, linear=lin,
                                 equality=self.col.equality), 0)
        scale = 2.0 if self.col.equality else 1.0
        new, _, curve, _, _ = smo_column(sub, RowCache(sub.problem.operator), aB.copy(),
                                         tol=0.1 * max(gap_tol, gap) / scale,
                                         max_updates=50 * B.size + 1000, timings={})
        self.timings["subproblem"] += time.perf_counter() - t
        delta = new - aB
        moved = np.flatnonzero(delta != 0.0)
        self.alpha[B] = new
        order = np.argsort(B)
        return (XB[moved], B[moved], yB[moved] * delta[moved], B[order], new[order],
                float(curve[-1] - curve[0]))


class _Candidates:
    """The merged answers of the actors: the candidates' data and the global extremes."""

    def __init__(self, answers, equality, previous):
        self.equality = equality
        cat = lambda key: np.concatenate([np.asarray(a[key]) for a in answers])  # noqa: E731
        self.idx = cat("idx")
        self.y, self.a, self.U, self.G, self.QD = cat("y"), cat("a"), cat("U"), cat("G"), cat("QD")
        self.X = _stack([a["X"] for a in answers])
        self.previous = np.isin(self.idx, previous)
        if equality:
            self.v_up = np.concatenate([a["scores"][0] for a in answers])
            self.v_low = np.concatenate([a["scores"][1] for a in answers])
            if self.idx.size == 0 or not np.isfinite(self.v_up).any() or not np.isfinite(self.v_low).any():
                self.gap, self.extremes = -np.inf, None
            else:
                self.ku, self.kl = int(np.argmax(self.v_up)), int(np.argmax(self.v_low))
                gmax, gmax2 = self.v_up[self.ku], self.v_low[self.kl]
                self.gap, self.extremes = float(gmax + gmax2), (float(gmax), float(gmax2))
        else:
            self.score = np.concatenate([a["scores"][0] for a in answers])
            top = float(self.score.max()) if self.score.size else -np.inf
            self.gap, self.extremes = top, (top, top)

    def select(self, q, kernel):
        """Positions (in the candidates) of the working set: the two maximal violators,
        then each side by WSS 2's gain against the other side's violator (q/2 a side);
        without the sum constraint, the q largest violations."""
        free = (self.a > 0) & (self.a < self.U)
        taken = np.zeros(self.idx.size, dtype=bool)
        if not self.equality:
            kept = self._kept(self.score, free, q)
            taken[kept] = True
            gain = np.where((self.score > 0) & ~taken, -self.score, np.inf)
            return np.sort(np.concatenate([kept, _smallest(gain, q - kept.size)]))
        ku, kl = self.ku, self.kl
        gmax, gmax2 = self.extremes
        score = np.maximum(self.v_up + gmax2, self.v_low + gmax)
        kept = self._kept(score, free, q)
        taken[kept] = True
        taken[[ku, kl]] = True
        need = q - int(taken.sum())
        K_i = kernel.block(self.X[[ku, kl]], self.X)  # rows of the violators over the candidates
        yG = np.where(np.isfinite(self.v_low), self.v_low, -self.v_up)
        b_up = -yG + gmax2
        b_low = yG + gmax
        a_up = np.maximum(self.QD + self.QD[kl] - 2.0 * K_i[1], _TAU)
        a_low = np.maximum(self.QD[ku] + self.QD - 2.0 * K_i[0], _TAU)
        up, low = np.isfinite(self.v_up), np.isfinite(self.v_low)
        gain_up = np.where(up & (b_up > 0) & ~taken, -(b_up * b_up) / a_up, np.inf)
        gain_low = np.where(low & (b_low > 0) & ~taken, -(b_low * b_low) / a_low, np.inf)
        new_up = _smallest(gain_up, need // 2)
        gain_low[new_up] = np.inf
        new_low = _smallest(gain_low, need - new_up.size)
        if new_up.size + new_low.size < need:
            gain_up[new_low] = np.inf
            gain_up[new_up] = np.inf
            new_up = np.concatenate([new_up, _smallest(gain_up, need - new_up.size - new_low.size)])
        # positions are distinct samples: each actor answers a sample once, and owns it
        return np.unique(np.concatenate([[ku, kl], kept, new_up, new_low]).astype(np.int64))[:q]

    def _kept(self, score, free, q):
        """The useful part of the previous working set (still violating, or free), at most
        q/2, most violating first (:meth:`muflow.solvers.working_set.ColumnState.candidates`)."""
        useful = np.flatnonzero(self.previous & ((score > 0) | free))
        return useful[np.argsort(-score[useful], kind="stable")[: q // 2]]


async def _answers(calls) -> list:
    """Every call's answer, or the exception it raised."""
    import asyncio

    return list(await asyncio.gather(*(call._result() for call in calls), return_exceptions=True))


class LostPartitions(Exception):
    """Actor calls failed because their workers are gone (partition indices)."""

    def __init__(self, lost):
        super().__init__(f"partitions {lost} lost with their workers")
        self.lost = lost
