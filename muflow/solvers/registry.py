"""The solver registry: one entry per solver, with what it supports.

Adding a solver means one module plus one entry here. ``solve(problem, *, init, tol,
max_iter, callback) -> DualSolution`` is the one signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

from muflow.exceptions import SolverCombinationError
from muflow.solvers.multiplicative import solve_multiplicative

INTERCEPTS = ("exact", "regularized", "none")


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
    """

    name: str
    solve: Callable
    intercepts: tuple
    needs_nonnegative_kernel: bool
    summary: str


SOLVERS: dict[str, SolverInfo] = {}


def register(info: SolverInfo) -> SolverInfo:
    SOLVERS[info.name] = info
    return info


register(SolverInfo(
    "m3", partial(solve_multiplicative, rule="m3", box="clip", solver_name="m3"),
    INTERCEPTS, False,
    "M3 multiplicative update (Sha, Saul & Lee eq. 12), box by clipping (eq. 19), sum constraint via lambda (eq. 13-18)"))
register(SolverInfo(
    "m3_flipped", partial(solve_multiplicative, rule="m3", box="flip", solver_name="m3_flipped"),
    INTERCEPTS, False,
    "M3 with the flipped box update (eq. 20-25)"))
register(SolverInfo(
    "munk", partial(solve_multiplicative, rule="munk", box="clip", solver_name="munk"),
    INTERCEPTS, True,
    "MUNK NMF-style update for non-negative kernels (munk eq. 7-9)"))
register(SolverInfo(
    "musik", partial(solve_multiplicative, rule="musik", box="clip", solver_name="musik"),
    INTERCEPTS, False,
    "MUSIK sign-insensitive update (slides)"))
register(SolverInfo(
    "seminmf", partial(solve_multiplicative, rule="seminmf", box="clip", solver_name="seminmf"),
    INTERCEPTS, False,
    "semi-NMF update (slides)"))


def get_solver(name: str) -> SolverInfo:
    if name not in SOLVERS:
        raise SolverCombinationError(
            f"unknown solver {name!r}; choose 'auto' or one of {', '.join(SOLVERS)}"
        )
    return SOLVERS[name]


def choose_solver(name: str, *, intercept: str, kernel_nonnegative: bool) -> SolverInfo:
    """Resolve ``solver="auto"`` and refuse combinations a solver does not support."""
    if name == "auto":
        name = "munk" if kernel_nonnegative else "m3"
        for preferred in AUTO_PREFERENCE.get(intercept, ()):
            if preferred in SOLVERS:
                name = preferred
                break
    info = get_solver(name)
    if intercept not in info.intercepts:
        raise SolverCombinationError(
            f"solver {name!r} does not support intercept={intercept!r}; it supports "
            f"{', '.join(info.intercepts)}"
        )
    if info.needs_nonnegative_kernel and not kernel_nonnegative:
        raise SolverCombinationError(
            f"solver {name!r} needs a kernel that is non-negative on the data, and this one "
            "has negative entries (linear on signed data, sigmoid, odd polynomial); use "
            "solver='musik' or solver='seminmf' (sign-insensitive updates) or 'm3'"
        )
    return info


#: Solvers ``"auto"`` prefers per intercept mode when they are registered.
AUTO_PREFERENCE: dict[str, tuple] = {}


# -- subset and coordinate solvers (issue 3) ---------------------------------------------
from muflow.solvers.adatron import solve_adatron  # noqa: E402
from muflow.solvers.coordinate import solve_coordinate  # noqa: E402
from muflow.solvers.hybrid import solve_hybrid  # noqa: E402
from muflow.solvers.smo import solve_smo  # noqa: E402

register(SolverInfo(
    "smo", solve_smo, INTERCEPTS, False,
    "SMO with second-order working-set selection (Fan, Chen & Lin 2005) and shrinking; "
    "exact bias via pair steps, greedy single steps without the sum constraint"))
register(SolverInfo(
    "cd", solve_coordinate, ("regularized", "none"), False,
    "dual coordinate descent (LIBLINEAR style, variants paper eq. 4): random permutation, "
    "shrinking; weighted and drifted SVM through U and p"))
register(SolverInfo(
    "adatron", solve_adatron, ("regularized", "none"), False,
    "Kernel Adatron (Friess, Cristianini & Campbell 1998): sequential sweeps, rate 1/K_ii"))
register(SolverInfo(
    "hybrid", solve_hybrid, INTERCEPTS, False,
    "multiplicative passes until the support set settles, then SMO on it with KKT-driven growth"))

# benchmarks/bench_a8a_single_fit.py and bench_usps_objective_vs_time.py: SMO is the
# fastest to KKT <= 1e-3 with the sum constraint, coordinate descent without it.
AUTO_PREFERENCE["exact"] = ("smo",)
AUTO_PREFERENCE["regularized"] = ("cd",)
AUTO_PREFERENCE["none"] = ("cd",)
