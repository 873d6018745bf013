"""Dump what the in-process working-set solver did on a8a and on 50,000 generated rows, so
that two versions of muflow can be compared bit for bit (a change of structure must not
change a single step).

    python benchmarks/check_iterates.py dump OUT.npz          # with the version to record
    python benchmarks/check_iterates.py compare A.npz B.npz   # exit 1 unless identical

Each case records alpha (every column), the bias, the outer iterations, the subproblem's
pair steps, the rows computed and the objective curve of ``solve_working_set`` on rows of
K computed on demand (the operator ``SVC.fit`` uses above the stored-K size).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def cases():
    from sklearn.datasets import make_classification

    from bench_a8a_single_fit import load as load_a8a

    X, y, _, _ = load_a8a()
    yield "a8a", X, np.where(np.asarray(y) > 0, 1.0, -1.0), 0.05, 1.0
    X, y = make_classification(n_samples=50000, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=0)
    yield "make50k", X, np.where(y > 0, 1.0, -1.0), 0.02, 1.0


def dump(out):
    from muflow.kernel_rows import KernelRows
    from muflow.kernels import Kernel
    from muflow.solvers.problem import DualProblem
    from muflow.solvers.working_set import solve_working_set

    record = {}
    for name, X, y, gamma, C in cases():
        op = KernelRows(X, Kernel("rbf", gamma=gamma))
        problem = DualProblem(op, y, upper=C, equality=True)
        t = time.perf_counter()
        sol = solve_working_set(problem, tol=1e-3, cache_mb=2000)
        seconds = time.perf_counter() - t
        record[f"{name}_alpha"] = sol.alpha
        record[f"{name}_bias"] = np.asarray(sol.bias)
        record[f"{name}_curve"] = sol.objective_curve
        record[f"{name}_counts"] = np.array([sol.n_iter, sol.timings["subproblem_steps"],
                                             sol.timings["rows_fetched"]])
        print(f"{name}: {seconds:.2f} s, {sol.n_iter} outer iterations, "
              f"{sol.timings['subproblem_steps']} subproblem steps, objective "
              f"{sol.objective_curve[-1, 0]!r}", flush=True)
    np.savez(out, **record)


def compare(a, b):
    A, B = np.load(a), np.load(b)
    same = sorted(A.files) == sorted(B.files)
    for key in sorted(A.files):
        equal = key in B.files and A[key].shape == B[key].shape and \
            A[key].tobytes() == B[key].tobytes()
        print(f"{key}: {'identical' if equal else 'DIFFERENT'}")
        same &= equal
    print("bit for bit identical" if same else "NOT identical")
    return 0 if same else 1


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        dump(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
