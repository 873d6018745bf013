"""Whether this machine's BLAS rounds an entry of a product by the product's shape.

    python benchmarks/probe_blas_shapes.py

muflow computes rows of K as BLAS products, and its results are the same to the bit on any
number of threads because every entry comes from a product of the same shape whatever the
threads (docs/threads.md, ``KernelRows._begin_tiles``). That care is needed where BLAS
rounds an entry by the shape: this script multiplies a 64 x d block by d x 256 (one BLAS
thread) and compares each leading slice of rows, ``A[:M] @ B``, and of columns,
``A @ B[:, :N]``, with the same entries of the whole product. It prints, for float64
(dgemm) and float32 (sgemm), the row counts and column counts whose entries differ.

On an AVX-512 CPU OpenBLAS gave the same entries for every slice tried in earlier
sessions; on an AVX2 AMD EPYC (Zen 3) dgemm's rows differ for odd M and sgemm's for most M
and for most N (docs/benchmarks.md, session 26).
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits


def differing(dtype, d: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Row counts M and column counts N whose slice of the product differs from the whole."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((64, d)).astype(dtype)
    B = np.ascontiguousarray(rng.standard_normal((d, 256)).astype(dtype))
    whole = A @ B
    rows = [M for M in range(1, 65) if not np.array_equal(A[:M] @ B, whole[:M])]
    cols = [N for N in range(1, 257)
            if not np.array_equal(A @ np.ascontiguousarray(B[:, :N]), whole[:, :N])]
    return rows, cols


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", type=int, default=50, help="d, the inner dimension (default 50)")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_info

    blas = [(i.get("internal_api"), i.get("version"), i.get("architecture"))
            for i in threadpool_info() if i.get("user_api") == "blas"]
    print(f"BLAS: {blas}")
    any_differ = False
    with threadpool_limits(1, user_api="blas"):
        for dtype in (np.float64, np.float32):
            rows, cols = differing(dtype, args.features)
            any_differ = any_differ or bool(rows or cols)
            print(f"{np.dtype(dtype).name}: rows M of 1..64 that differ: {len(rows)} {rows[:16]}"
                  f"{' ...' if len(rows) > 16 else ''}")
            print(f"{np.dtype(dtype).name}: columns N of 1..256 that differ: {len(cols)} {cols[:16]}"
                  f"{' ...' if len(cols) > 16 else ''}")
    print("this BLAS rounds an entry by the product's shape" if any_differ else
          "this BLAS gave every entry the same in every slice tried")


if __name__ == "__main__":
    main()
