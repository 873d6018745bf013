"""The in-memory float32 Gram of a8a: the previous build against the current one, side by side.

RBF gamma = 0.05 on a8a's 22,696 training rows (123 binary features, densified): K is
22,696^2 float32 = 1.92 GiB.

- ``previous``: muflow's build before issue 16, kept here as the reference: per row panel
  one float64 product (dgemm) into a float64 scratch panel, five NumPy passes
  (scale, two broadcasts, clamp, exp) and a cast into the float32 K; panels on the
  threads of :func:`muflow.inmemory.run_panels`' pattern, BLAS held to one thread.
- ``current``: :func:`muflow.inmemory.numpy_gram`: X cast (and centred) once, one sgemm per
  panel written into K itself, one compiled, fused pass (float64 distance, vectorised
  float32 exp) in place.

Each is timed into a reused, already mapped buffer (the compute alone) and end to end into
a fresh array (as a fit sees it: mapping 1.9 GiB is part of the cost). Printed: seconds,
the ratio, the largest difference between the two matrices and of each to float64 exact
values on 300 rows; then the current build's panel height, and rows on demand
(:class:`muflow.kernel_rows.KernelRows`): a batch of 1,024 rows (a working set's fetch)
and single rows.

Run on a quiet machine: python benchmarks/bench_gram_build.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from muflow.inmemory import block_input, empty_populated, numpy_gram
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
GAMMA = 0.05


def previous_gram(X, gamma, out, block_rows=512, n_threads=None):
    """muflow's float32 build before issue 16 (the reference): float64 GEMM per panel into
    float64 scratch, NumPy passes there, one cast into ``out``."""
    from threadpoolctl import threadpool_limits

    Xb = np.ascontiguousarray(X, dtype=np.float64)
    n = Xb.shape[0]
    XT = np.ascontiguousarray(Xb.T)
    sq = np.einsum("ij,ij->i", Xb, Xb)
    starts = list(range(0, n, block_rows))
    n_threads = max(1, min(n_threads or len(os.sched_getaffinity(0)), len(starts)))

    def panels(worker):
        scratch = np.empty(block_rows * n)
        for start in starts[worker::n_threads]:
            stop = min(start + block_rows, n)
            G = scratch[: (stop - start) * n].reshape(stop - start, n)
            np.matmul(Xb[start:stop], XT, out=G)
            G *= 2.0 * gamma
            G -= (gamma * sq[start:stop])[:, None]
            G -= (gamma * sq)[None, :]
            np.minimum(G, 0.0, out=G)
            np.exp(G, out=G)
            out[start:stop] = G

    with threadpool_limits(1 if n_threads > 1 else None, user_api="blas"):
        with ThreadPoolExecutor(n_threads) as pool:
            list(pool.map(panels, range(n_threads)))
    return out


def best_of(repeat, fn):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="timings are the best of this many runs")
    args = parser.parse_args()

    from sklearn.datasets import load_svmlight_file

    Xs, _ = load_svmlight_file(str(DATA / "a8a"), n_features=123)
    X = block_input(Xs)
    n = X.shape[0]
    kernel = Kernel("rbf", gamma=GAMMA)
    cores = len(os.sched_getaffinity(0))
    print(f"a8a: n = {n}, {X.shape[1]} features (dense), RBF gamma = {GAMMA}, K float32 = "
          f"{n * n * 4 / 2**30:.2f} GiB; {cores} cores, {platform.processor() or platform.machine()}, "
          f"numpy {np.__version__}")

    # warm up: compiled finish loaded, threads started
    numpy_gram(X[:512], kernel)
    previous_gram(X[:512], GAMMA, np.empty((512, 512), np.float32))

    K_prev = empty_populated((n, n), np.float32)
    K_new = empty_populated((n, n), np.float32)
    t_prev = best_of(args.repeat, lambda: previous_gram(X, GAMMA, K_prev))
    t_new = best_of(args.repeat, lambda: numpy_gram(X, kernel, out=K_new))
    print("\ninto a reused buffer (compute only), best of", args.repeat)
    print(f"  previous (dgemm + NumPy passes + cast) {t_prev:7.2f} s")
    print(f"  current  (sgemm + fused compiled pass) {t_new:7.2f} s   speed-up {t_prev / t_new:.2f}x")

    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(n, 300, replace=False))
    exact = kernel.block_reference(X[rows], X)
    print("\naccuracy (max |difference|)")
    print(f"  current vs previous           {np.abs(K_new - K_prev).max():.2e}")
    print(f"  previous vs float64, 300 rows {np.abs(K_prev[rows] - exact).max():.2e}")
    print(f"  current  vs float64, 300 rows {np.abs(K_new[rows] - exact).max():.2e}")
    print(f"  current diagonal == 1 exactly  {bool(np.all(np.diagonal(K_new) == 1.0))}")
    K_prev = K_new = exact = None  # free 3.9 GiB before the fresh builds
    t_prev_fresh = best_of(1, lambda: previous_gram(X, GAMMA, empty_populated((n, n), np.float32)))
    t_new_fresh = best_of(1, lambda: numpy_gram(X, kernel))
    print("\nend to end into a fresh array (mapping 1.9 GiB included), one run")
    print(f"  previous {t_prev_fresh:7.2f} s")
    print(f"  current  {t_new_fresh:7.2f} s   speed-up {t_prev_fresh / t_new_fresh:.2f}x")

    K_new = empty_populated((n, n), np.float32)
    print("\ncurrent build, rows per panel (reused buffer)")
    for block in (64, 128, 256, 512):
        t = best_of(args.repeat, lambda: numpy_gram(X, kernel, out=K_new, block_rows=block))
        print(f"  block_rows {block:4d}  {t:6.2f} s")
    K_new = None

    op = KernelRows(Xs, kernel, dtype="float32")
    batch = np.sort(rng.choice(n, 1024, replace=False))
    out = np.empty((batch.size, n), np.float32)
    op.rows_native(batch[:8], out=out[:8])
    t_batch = best_of(args.repeat, lambda: op.rows_native(batch, out=out))
    singles = rng.choice(n, 200, replace=False)
    one = np.empty((1, n), np.float32)
    t = time.perf_counter()
    for i in singles:
        op.rows_native([i], out=one)
    t_one = (time.perf_counter() - t) / singles.size
    print("\nrows on demand (KernelRows, float32)")
    print(f"  1,024 rows in one batch  {t_batch:6.3f} s  ({t_batch / batch.size * 1e6:.0f} us a row; "
          f"the whole K at that rate: {t_batch / batch.size * n:.2f} s)")
    print(f"  one row at a time        {t_one * 1e3:6.3f} ms a row")


if __name__ == "__main__":
    main()
