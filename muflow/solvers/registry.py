"""The solver registry: one entry per solver, with what it supports.

Adding a solver means one module plus one entry here. ``solve(problem, *, init, tol,
max_iter, callback) -> DualSolution`` is the one signature.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import partial
from typing import Callable

from muflow.exceptions import SolverCombinationError
from muflow.operators import require_rows
from muflow.solvers.adatron import solve_adatron
from muflow.solvers.coordinate import solve_coordinate
from muflow.solvers.hybrid import solve_hybrid
from muflow.solvers.multiplicative import solve_multiplicative
from muflow.solvers.smo import solve_smo
from muflow.solvers.working_set import solve_working_set

INTERCEPTS = ("exact", "regularized", "none")
NEEDS = ("products", "rows")


@dataclass(frozen=True)
class SolverInfo:
    """A registered solver.

    Attributes
    ----------
    name : str
    solve : callable
        ``solve(problem, *, init=None, tol, max_iter, callback) -> DualSolution``.
    intercepts : tuple of str
        Intercept modes it supports ("exact" needs the equality constraint).
    needs_nonnegative_kernel : bool
        True for MUNK (munk-nonnegative-kernel-svm.txt, section 4).
    summary : str
    iteration_unit : str
        What one of its iterations is: ``max_iter`` caps them, ``n_iter`` and the
        callback's ``iteration`` count them, a checkpoint resumes in them.
    needs : {"products", "rows"}
        What it asks of the operator: products ``K @ V`` only, or rows of K and its
        diagonal as well (:attr:`muflow.operators.GramOperator.has_rows`).
    reports_progress : bool
        Its ``solve`` takes ``progress=`` (:class:`muflow.progress.FitProgress`) and
        reports the KKT gap and kernel rows as it goes; the others report through the
        common callback.
    """

    name: str
    solve: Callable
    intercepts: tuple
    needs_nonnegative_kernel: bool
    summary: str
    iteration_unit: str
    needs: str = "products"
    reports_progress: bool = False

    def __post_init__(self):
        if self.needs not in NEEDS:
            raise ValueError(f"SolverInfo.needs must be one of {NEEDS}, got {self.needs!r}")

    def options(self, *, cache_mb=None, shrinking=None, progress=None,
                libsvm_iterations=False, n_threads=None) -> dict:
        """The keywords beyond the common signature that this solver's ``solve`` takes, of
        those given: the row cache in MB (solvers that read rows), libsvm's shrinking,
        progress reporting (:attr:`reports_progress`), libsvm's iteration unit (smo) and
        the threads of the solve (:func:`muflow.threads.thread_budget`).
        A keyword left at None (False) or that ``solve`` does not take is left out."""
        accepted = inspect.signature(self.solve).parameters
        options = {}
        if n_threads is not None and "n_threads" in accepted:
            options["n_threads"] = int(n_threads)
        if cache_mb is not None and self.needs == "rows" and "cache_mb" in accepted:
            options["cache_mb"] = float(cache_mb)
        if shrinking is not None and "shrinking" in accepted:
            options["shrinking"] = bool(shrinking)
        if progress is not None and self.reports_progress:
            options["progress"] = progress
        if libsvm_iterations and "libsvm_iterations" in accepted:
            options["libsvm_iterations"] = True
        return options


SOLVERS: dict[str, SolverInfo] = {}


def register(info: SolverInfo) -> SolverInfo:
    SOLVERS[info.name] = info
    return info


_PASS = "pass: one product with K and one multiplicative update of every coefficient"
_MULTIPLICATIVE = (  # name, rule, box, needs a non-negative kernel, summary
    ("m3", "m3", "clip", False,
     "M3 multiplicative update (Sha, Saul & Lee eq. 12), box by clipping (eq. 19), sum "
     "constraint via lambda (eq. 13-18)"),
    ("m3_flipped", "m3", "flip", False, "M3 with the flipped box update (eq. 20-25)"),
    ("munk", "munk", "clip", True, "MUNK NMF-style update for non-negative kernels (munk eq. 7-9)"),
    ("musik", "musik", "clip", False, "MUSIK sign-insensitive update (slides)"),
    ("seminmf", "seminmf", "clip", False, "semi-NMF update (slides)"),
)
for _name, _rule, _box, _nonneg, _summary in _MULTIPLICATIVE:
    register(SolverInfo(_name, partial(solve_multiplicative, rule=_rule, box=_box, solver_name=_name),
                        INTERCEPTS, _nonneg, _summary, _PASS))

register(SolverInfo(
    "smo", solve_smo, INTERCEPTS, False,
    "SMO with second-order working-set selection (Fan, Chen & Lin 2005) and shrinking; "
    "exact bias via pair steps, greedy single steps without the sum constraint",
    "sweep: n pair steps (n_iter = sweeps begun; timings['pair_steps'] has the steps; "
    "muflow.SVC counts single pair steps, as libsvm)", "rows"))
register(SolverInfo(
    "cd", solve_coordinate, ("regularized", "none"), False,
    "dual coordinate descent (LIBLINEAR style, variants paper eq. 4): random permutation, "
    "shrinking; weighted and drifted SVM through U and p",
    "epoch: one step on every active coordinate", "rows"))
register(SolverInfo(
    "adatron", solve_adatron, ("regularized", "none"), False,
    "Kernel Adatron (Friess, Cristianini & Campbell 1998): sequential sweeps, rate 1/K_ii",
    "epoch: one step on every coordinate, in index order", "rows"))
register(SolverInfo(
    "hybrid", solve_hybrid, INTERCEPTS, False,
    "multiplicative passes until the support set settles, then SMO on it with KKT-driven growth",
    "multiplicative pass or SMO sweep (n pair steps), counted together", "rows"))
register(SolverInfo(
    "working_set", solve_working_set, INTERCEPTS, False,
    "working-set decomposition (Joachims 1999 SVMlight; ThunderSVM): q variables chosen by "
    "WSS 2 (Fan, Chen & Lin 2005), q/2 per side, solved by the compiled SMO on K_BB, the "
    "gradient updated with K[B, :]^T delta; shrinking; reads only rows of K on demand",
    "outer iteration: one working set of q variables solved and the gradient updated", "rows",
    reports_progress=True))

#: What ``solver="auto"`` takes per intercept mode (benchmarks/bench_a8a_single_fit.py and
#: bench_usps_objective_vs_time.py: SMO is the fastest to KKT <= 1e-3 with the sum
#: constraint, coordinate descent without it).
AUTO = {"exact": "smo", "regularized": "cd", "none": "cd"}


def svc_iterations(solution) -> int:
    """A solution's iterations in the unit of :class:`muflow.SVC`'s ``n_iter_`` and
    ``max_iter``: the solver's own (:attr:`SolverInfo.iteration_unit`), except SMO's,
    which SVC counts in single pair steps as libsvm and scikit-learn do
    (``timings["pair_steps"]``) where the solver counts sweeps of n steps (a whole fit of
    50,000 samples is then 1 sweep begun)."""
    if solution.solver == "smo" and "pair_steps" in solution.timings:
        return int(solution.timings["pair_steps"])
    return int(solution.n_iter)


def svc_iteration_unit(name: str) -> str:
    """The unit of :func:`svc_iterations` for solver ``name``, in a few words ("pair
    step" for SMO, "pass", "epoch", "outer iteration" ...), for reports."""
    if name == "smo":
        return "pair step"
    info = SOLVERS.get(name)
    return "" if info is None else info.iteration_unit.split(":")[0].split(" (")[0]


def get_solver(name: str) -> SolverInfo:
    if name not in SOLVERS:
        raise SolverCombinationError(
            f"unknown solver {name!r}; choose 'auto' or one of {', '.join(SOLVERS)}"
        )
    return SOLVERS[name]


def choose_solver(name: str, *, intercept: str, kernel_nonnegative: bool | None,
                  operator=None) -> SolverInfo:
    """Resolve ``solver="auto"`` and refuse combinations a solver does not support.

    Parameters
    ----------
    name : str
        A registered solver, or "auto" (:data:`AUTO` by intercept mode).
    intercept : {"exact", "regularized", "none"}
    kernel_nonnegative : bool or None
        None: not known yet (no data read); a solver that needs a non-negative kernel
        is then not refused here.
    operator : GramOperator, optional
        When given, refused if it cannot answer what the solver needs (rows of K).
    """
    if name == "auto":
        name = AUTO.get(intercept, name)
    info = get_solver(name)
    if intercept not in info.intercepts:
        raise SolverCombinationError(
            f"solver {name!r} does not support intercept={intercept!r}; it supports "
            f"{', '.join(info.intercepts)}"
        )
    if info.needs_nonnegative_kernel and kernel_nonnegative is not None and not kernel_nonnegative:
        raise SolverCombinationError(
            f"solver {name!r} needs a kernel that is non-negative on the data, and this one "
            "has negative entries (linear on signed data, sigmoid, odd polynomial); use "
            "solver='musik' or solver='seminmf' (sign-insensitive updates) or 'm3'"
        )
    if operator is not None and info.needs == "rows":
        require_rows(operator, name)
    return info
