"""Solver checkpoints: alpha, bias and iteration written atomically to a run directory.

Any solver's ``callback(iteration, alpha, objective)`` can be a :class:`Checkpointer`;
every ``every`` iterations, in the solver's own unit (``SolverInfo.iteration_unit``: passes,
epochs or sweeps, the unit of ``max_iter``), it writes ``checkpoint.npz`` (to a temporary file in the same
directory, flushed, then renamed over the old one, so a crash leaves the previous
checkpoint intact). To resume, :func:`load_checkpoint` gives the state back and
``init=(alpha, bias)`` warm-starts the same solver from it::

    ckpt = load_checkpoint(run_dir)                    # None on a fresh run
    init = None if ckpt is None else ckpt.init
    cp = Checkpointer(run_dir, every=50, problem=problem, resume=ckpt)
    solution = solve(problem, init=init, tol=tol, max_iter=max_iter - cp.start_iteration,
                     callback=cp)
    cp.finish(solution)

The bias stored is the one the KKT conditions give for alpha
(:func:`muflow.solvers.kkt.kkt_violation`), which for the multiplicative solvers with the
sum constraint is their multiplier lambda (M3 eq. (14)-(17)); computing it costs one
product, paid only when a checkpoint is written. A checkpoint records n, m and a caller's
``tag`` (kernel, solver and :func:`problem_fingerprint`, a hash of the data and of the
problem posed on them) and refuses to resume another problem. What it reads back is
checked: alpha and bias must be finite (a NaN passes clipping and would read as a KKT
point), and a tag key of the run that the checkpoint lacks is a mismatch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from muflow.atomic import atomic_path
from muflow.dask.predict import is_dask_collection
from muflow.exceptions import MuflowInputError

FILENAME = "checkpoint.npz"

#: :func:`problem_fingerprint` hashes all of X up to this many bytes, a strided sample of
#: its rows above (every k-th row, about this many bytes): blake2b over this many bytes is
#: small next to a fit, and it runs once per checkpointed fit.
FINGERPRINT_FULL_BYTES = 64 * 2**20


@dataclass
class Checkpoint:
    """A saved solver state: ``alpha`` (n, m) and ``bias`` (m,) as in a
    :class:`~muflow.solvers.DualSolution`, with

    - ``iteration``: iterations done in total across resumed runs, in the solver's unit;
    - ``objective``: F per column, shape (m,);
    - ``tag``: the caller's JSON values identifying the run;
    - ``finished``: True when written by :meth:`Checkpointer.finish` (the run completed).
    """

    alpha: np.ndarray
    bias: np.ndarray
    iteration: int
    objective: np.ndarray
    tag: dict
    finished: bool = False

    @property
    def init(self):
        """The warm start for ``solve(..., init=...)``."""
        return (self.alpha, self.bias)


def _hash_rows(h, X):
    """Feed X (dense, CSR or a dask collection) into ``h``: every byte up to
    :data:`FINGERPRINT_FULL_BYTES`, evenly strided rows above."""
    h.update(repr((type(X).__name__, tuple(X.shape), str(getattr(X, "dtype", "")))).encode())
    if is_dask_collection(X):
        from dask.base import tokenize  # a dask collection's name hashes its content

        h.update(tokenize(X).encode())
        return
    if hasattr(X, "indptr"):  # CSR: values, columns and row starts
        arrays = (X.data, X.indices, X.indptr)
    else:
        arrays = (np.asarray(X),)
    for a in arrays:
        a = np.ascontiguousarray(a)
        if a.nbytes > FINGERPRINT_FULL_BYTES:
            step = -(-a.nbytes // FINGERPRINT_FULL_BYTES)
            a = np.ascontiguousarray(a[::step])
        h.update(memoryview(a).cast("B"))


def problem_fingerprint(X, problem) -> str:
    """A hash of the training data and the problem posed on them: X (all of it, or a
    strided sample of rows above :data:`FINGERPRINT_FULL_BYTES`), the labels y, the upper
    bounds (C times sample and class weights), the linear term (offsets) and whether the
    sum constraint holds. A checkpoint of other data, weights or C is refused on resume."""
    h = hashlib.blake2b(digest_size=16)
    _hash_rows(h, X)
    for a in (problem.y, problem.upper, problem.linear):
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    h.update(b"equality" if problem.equality else b"free")
    return h.hexdigest()


def save_checkpoint(run_dir, alpha, bias, iteration, objective, tag=None, finished=False) -> str:
    """Write a checkpoint atomically; returns its path."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, FILENAME)
    alpha = np.asarray(alpha, dtype=np.float64)
    if alpha.ndim == 1:
        alpha = alpha[:, None]
    meta = {"iteration": int(iteration), "tag": tag or {}, "finished": bool(finished),
            "n": alpha.shape[0], "m": alpha.shape[1]}
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, alpha=alpha, bias=np.atleast_1d(np.asarray(bias, dtype=np.float64)),
                 objective=np.atleast_1d(np.asarray(objective, dtype=np.float64)),
                 meta=np.array(json.dumps(meta)))
    return path


def load_checkpoint(run_dir, *, tag=None, n=None, m=None) -> Checkpoint | None:
    """The checkpoint in ``run_dir``, or None when there is none.

    Raises
    ------
    MuflowInputError
        When the checkpoint is unreadable, damaged (non-finite or negative alpha, a bias
        of another shape) or was written for another problem (other n, m or tag, a tag key
        it lacks); the message names the file and says which.
    """
    path = os.path.join(run_dir, FILENAME)
    if not os.path.exists(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            ckpt = Checkpoint(alpha=data["alpha"], bias=data["bias"], iteration=meta["iteration"],
                              objective=data["objective"], tag=meta.get("tag", {}),
                              finished=meta.get("finished", False))
    except Exception as exc:
        raise MuflowInputError(f"checkpoint {path} is unreadable ({exc}); delete it to start over") from None
    for name, values in (("alpha", ckpt.alpha), ("bias", ckpt.bias)):
        bad = values.size - int(np.count_nonzero(np.isfinite(values)))
        if bad:
            raise MuflowInputError(
                f"checkpoint {path} is damaged: {bad} of its {name} values are NaN or inf; "
                f"delete {run_dir} to start over")
    if ckpt.alpha.ndim != 2 or ckpt.bias.shape != (ckpt.alpha.shape[1],) or np.any(ckpt.alpha < 0):
        raise MuflowInputError(
            f"checkpoint {path} is damaged: alpha of shape {ckpt.alpha.shape} (negative values: "
            f"{int(np.count_nonzero(ckpt.alpha < 0))}) with bias of shape {ckpt.bias.shape}; "
            f"delete {run_dir} to start over")
    problems = []
    if n is not None and ckpt.alpha.shape[0] != n:
        problems.append(f"it has {ckpt.alpha.shape[0]} samples, the problem {n}")
    if m is not None and ckpt.alpha.shape[1] != m:
        problems.append(f"it has {ckpt.alpha.shape[1]} problems (columns), this run {m}")
    if tag is not None:
        for key, value in tag.items():
            if key not in ckpt.tag:
                problems.append(f"it records no {key}")
            elif key == "data" and ckpt.tag[key] != value:
                if ckpt.tag.get("C") == tag.get("C") and (n is None or ckpt.alpha.shape[0] == n):
                    # (the fingerprint holds the bounds, so another C or n changes it too)
                    problems.append("it was written for other data (training samples, labels "
                                    "or sample weights differ)")
            elif ckpt.tag[key] != value:
                problems.append(f"its {key} is {ckpt.tag[key]!r}, this run's {value!r}")
    if problems:
        raise MuflowInputError(f"checkpoint {path} belongs to another run: " + "; ".join(problems)
                               + f"; resume with that run's data and settings, or delete {run_dir} "
                               "to start over")
    return ckpt


class Checkpointer:
    """A solver callback that saves the state every ``every`` iterations.

    Parameters
    ----------
    run_dir : str
    every : int, default=100
    problem : DualProblem, optional
        Used to compute the bias of a saved alpha (one product per checkpoint); without
        it the bias is saved as 0.
    tag : dict, optional
        JSON values identifying the run (checked on resume).
    resume : Checkpoint, optional
        The checkpoint this run resumes from; iterations count on from it.
    stop_after : int, optional
        Return True (stop the solver) at this total iteration; for tests and time limits.

    Notes
    -----
    A solver may report its iteration less often than every iteration (SMO reports every
    ``callback_every`` steps, and a per-column solver starts counting again at each
    column): a checkpoint is written whenever the count passes a multiple of ``every``
    since the previous call.
    """

    def __init__(self, run_dir, every=100, *, problem=None, tag=None, resume=None, stop_after=None):
        if int(every) < 1:
            raise MuflowInputError(f"checkpoint interval must be >= 1 iteration, got {every}")
        self.run_dir = str(run_dir)
        self.every = int(every)
        self.problem = problem
        self.tag = dict(tag or {})
        self.start_iteration = int(resume.iteration) if resume is not None else 0
        self.stop_after = stop_after
        self.saved = []
        self._last = self.start_iteration

    def _bias(self, alpha):
        if self.problem is None:
            return np.zeros(alpha.shape[1] if alpha.ndim == 2 else 1)
        return self.problem.kkt_violation(alpha)[1]

    def __call__(self, iteration, alpha, objective):
        total = self.start_iteration + int(iteration)
        last = self._last if self._last <= total else self.start_iteration  # a new column
        self._last = total
        if iteration > 0 and total // self.every > last // self.every:
            save_checkpoint(self.run_dir, alpha, self._bias(alpha), total, objective, self.tag)
            self.saved.append(total)
        return self.stop_after is not None and total >= self.stop_after

    def counted_from_the_start(self, solution):
        """The solution of a solve resumed at :attr:`start_iteration`, its iterations
        counted from the fit's beginning: ``n_iter_`` is the whole fit's, and a resumed fit
        stopped by ``max_iter`` is told apart from one that could make no further progress
        (its warning said "raise tol" where the budget had run out)."""
        if not self.start_iteration:
            return solution
        per_problem = solution.column_iters
        return dataclasses.replace(
            solution, n_iter=solution.n_iter + self.start_iteration,
            column_iters=None if per_problem is None else np.asarray(per_problem) + self.start_iteration)

    def finish(self, solution):
        """Save the final state (marked finished) after the solver returns."""
        return save_checkpoint(self.run_dir, solution.alpha, solution.bias,
                               self.start_iteration + solution.n_iter,
                               solution.objective_curve[-1], self.tag, finished=True)
