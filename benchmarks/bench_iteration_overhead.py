"""Cost of one multiplicative iteration next to the bare ``K @ V`` product it needs.

One pass of :func:`muflow.solvers.multiplicative.solve_multiplicative` is the products
(``_Products``: one operator call), the objective, the KKT measure (the stopping rule) and
the update (``_step``, with the root finding for lambda when the sum constraint is on).
For a non-negative kernel ``_Products`` multiplies K by 2m columns, ``[alpha * pos,
alpha * neg]``, so the bare product with 2m columns is the floor a pass can reach; the
product with m columns is printed too for reference.

An iteration is timed inside the real solver loop: the callback runs once per pass, so the
time between consecutive callbacks is exactly one full pass. The median over ``--repeats``
passes (after ``--warmup`` passes) is reported, next to the median of the bare product on
arrays of the same shape and dtype. Target: iteration / bare(2m) <= 1.3.

Run ``python benchmarks/bench_iteration_overhead.py --help`` for the options.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from muflow.kernels import Kernel
from muflow.operators import DenseGram
from muflow.solvers.multiplicative import solve_multiplicative
from muflow.solvers.problem import DualProblem

TARGET = 1.3


def make_data(n, m, seed):
    """A two-class cloud in 10 dimensions and m label columns (m distinct binary problems)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 10))
    score = X[:, 0] + 0.5 * np.sin(3 * X[:, 1]) + 0.3 * rng.normal(size=n)
    base = np.where(score > 0, 1.0, -1.0)
    # each column flips a different 5% of the labels: m genuinely different problems
    flips = rng.random((n, m)) < 0.05
    Y = np.where(flips, -base[:, None], base[:, None])
    return X, Y


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def iteration_time(K, Y, V2, equality, rule, warmup, repeats):
    """Per pass of the solver loop: median seconds, its products, and paired bare products.

    The machine may be shared, so each timed pass is paired with one bare ``K @ V2`` run
    right after it (inside the callback, excluded from the pass): the ratio of each pair
    is taken, then the median of the ratios, which cancels slow drifts in load.
    """
    problem = DualProblem(DenseGram(K), Y, upper=1.0, linear=-1.0, equality=equality)
    op = problem.operator
    passes, bare, prods, calls = [], [], [], []
    state = {"end": None, "seconds": 0.0, "products": 0}

    def callback(iteration, alpha, objective):
        now = time.perf_counter()
        if state["end"] is not None:
            passes.append(now - state["end"])
            prods.append(op.seconds - state["seconds"])
            calls.append(op.products - state["products"])
        t = time.perf_counter()
        K @ V2
        bare.append(time.perf_counter() - t)
        state["seconds"], state["products"] = op.seconds, op.products
        state["end"] = time.perf_counter()
        return False

    # tol=0 never stops early: every pass runs the full loop body
    solve_multiplicative(problem, rule=rule, tol=0.0, max_iter=warmup + repeats,
                         callback=callback)
    passes = np.asarray(passes[warmup:])
    bare_after = np.asarray(bare[warmup + 1:])
    return {
        "iter": float(np.median(passes)),
        "prod": float(np.median(prods[warmup:])),
        "ratio": float(np.median(passes / bare_after)),
        "calls": float(np.mean(calls[warmup:])),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4000, 8000], help="n values")
    parser.add_argument("--columns", type=int, nargs="+", default=[1, 40], help="m values")
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"],
                        choices=["float64", "float32"], help="dtype of K")
    parser.add_argument("--rule", default="munk", choices=["munk", "m3", "seminmf", "musik"])
    parser.add_argument("--warmup", type=int, default=3, help="passes not timed")
    parser.add_argument("--repeats", type=int, default=15, help="timed passes / products")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    print(f"muflow iteration overhead: rule={args.rule}, RBF kernel gamma=0.1 on 10-d "
          f"Gaussian data, C=1, seed={args.seed}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"numpy {np.__version__}; medians over {args.repeats} repeats "
          f"(after {args.warmup} warm-up passes)")
    print("iter = one full solver pass (products + objective + KKT + update), prod = time in\n"
          "its operator calls, K@V/it = operator calls per pass (> 1: safeguard line searches),\n"
          "bare(k) = K @ V with k columns, same dtype; it/b(2m) = median over passes of\n"
          "pass / bare(2m) product timed right after it (paired against load drift)")
    header = (f"{'n':>6} {'dtype':>8} {'m':>4} {'eq':>3} | {'bare(m)':>9} {'bare(2m)':>9} | "
              f"{'iter':>9} {'prod':>9} {'K@V/it':>5} | {'it/b(m)':>7} {'it/b(2m)':>8} {'target':>6}")
    print(header)
    print("-" * len(header))
    worst = 0.0
    for n in args.sizes:
        X, Y_all = make_data(n, max(args.columns), args.seed)
        K64 = Kernel("rbf", gamma=0.1).block(X)
        for dtype in args.dtypes:
            K = K64.astype(dtype)
            rng = np.random.default_rng(args.seed + 1)
            for m in args.columns:
                V1 = rng.random((n, m)).astype(dtype)
                V2 = rng.random((n, 2 * m)).astype(dtype)
                K @ V2  # warm the BLAS threads
                bare1 = median_time(lambda: K @ V1, args.repeats)
                bare2 = median_time(lambda: K @ V2, args.repeats)
                Y = Y_all[:, :m]
                for equality in (False, True):
                    r = iteration_time(K, Y, V2, equality, args.rule, args.warmup, args.repeats)
                    worst = max(worst, r["ratio"])
                    print(f"{n:>6} {dtype:>8} {m:>4} {'on' if equality else 'off':>3} | "
                          f"{bare1 * 1e3:>7.2f}ms {bare2 * 1e3:>7.2f}ms | "
                          f"{r['iter'] * 1e3:>7.2f}ms {r['prod'] * 1e3:>7.2f}ms {r['calls']:>5.2f} | "
                          f"{r['iter'] / bare1:>7.2f} {r['ratio']:>8.2f} "
                          f"{'ok' if r['ratio'] <= TARGET else 'MISS':>6}", flush=True)
            del K
    print(f"worst iteration / bare(2m) = {worst:.2f}; target <= {TARGET}: "
          f"{'met' if worst <= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
