"""The raw device kernels, each with the NumPy reference that CI runs in its place.

Two element-wise passes are all that the device code writes by hand; everything else is
the array module's own (GEMM, gathers, reductions):

- :func:`finish_block`: the kernel function applied to a product ``G = A B'`` in place, the
  fused pass after one GEMM (ThunderSVM's ``RBF_kernel``; muflow's CPU twin is
  :meth:`muflow.kernels.Kernel.block_into`). rbf: ``exp(min(2 gamma g - gamma ||a||^2 -
  gamma ||b||^2, 0))``, poly ``(gamma g + coef0)^degree``, sigmoid ``tanh(gamma g + coef0)``,
  linear ``g``, each plus the kernel's offset;
- :func:`add_rows`: the working-set loop's gradient update ``G_t += y_t sum_b c_b
  K[s_b, t]`` over the cached rows ``s_b`` of the variables that moved (step 4 of
  :mod:`muflow.solvers.working_set_loop`): one thread a column t, the rows summed four at
  a time in the order of muflow's compiled CPU loop
  (:func:`muflow.solvers._working_set_compiled.add_rows`), so that the NumPy reference is
  that loop's arithmetic, operation for operation.

With ``xp = numpy`` the references run; with CuPy the kernels below are compiled once per
dtype. The GPU tests (``tests/device/test_gpu.py``) check each kernel against its
reference on the device.
"""

from __future__ import annotations

import numpy as np

from muflow.kernels import Kernel

# -- finish_block --------------------------------------------------------------------------


def finish_block_reference(G: np.ndarray, sq_A, sq_B, kernel: Kernel) -> np.ndarray:
    """NumPy reference of :func:`finish_block`, in place on ``G``: the float64 passes of
    :meth:`muflow.kernels.Kernel._finish_float64` themselves (so that a float64 block equals
    the CPU's bit for bit)."""
    kernel._finish_float64(G, sq_A, sq_B)
    return G


_FINISH_BODY = {
    "rbf": "double t = (double)g * (2.0 * gamma) - gamma * sa - gamma * sb;"
           " k = (T)(exp(t < 0.0 ? t : 0.0) + offset)",
    "poly": "double t = gamma * (double)g + coef0; double p = 1.0;"
            " for (int i = 0; i < degree; ++i) p *= t; k = (T)(p + offset)",
    "sigmoid": "k = (T)(tanh(gamma * (double)g + coef0) + offset)",
    "linear": "k = (T)((double)g + offset)",
}
_FINISH_KERNELS: dict = {}


def _finish_kernel(cp, name):
    kernel = _FINISH_KERNELS.get(name)
    if kernel is None:
        kernel = _FINISH_KERNELS[name] = cp.ElementwiseKernel(
            "T g, float64 sa, float64 sb, float64 gamma, float64 coef0, int32 degree, "
            "float64 offset", "T k", _FINISH_BODY[name], f"muflow_finish_{name}")
    return kernel


def finish_block(xp, G, sq_A, sq_B, kernel: Kernel):
    """The kernel function applied in place to ``G = A B'`` (C-ordered, float32 or
    float64), ``sq_A`` and ``sq_B`` the rows' squared norms in float64 (rbf): one fused
    element-wise pass on the GPU, :func:`finish_block_reference` under NumPy."""
    if xp is np:
        return finish_block_reference(G, sq_A, sq_B, kernel)
    sa = sq_A[:, None] if kernel.name == "rbf" else xp.zeros((1, 1))
    sb = sq_B[None, :] if kernel.name == "rbf" else xp.zeros((1, 1))
    _finish_kernel(xp, kernel.name)(G, sa, sb, float(kernel.gamma), float(kernel.coef0),
                                    np.int32(kernel.degree), float(kernel.offset), G)
    return G


# -- add_rows -------------------------------------------------------------------------------


def add_rows_reference(G, y, data, slots, coef) -> None:
    """NumPy reference of :func:`add_rows`: ``G += y * acc`` with ``acc`` summed over the
    rows ``data[slots[b]]`` four at a time, ``(c0 r0 + c1 r1) + (c2 r2 + c3 r3)``, then one
    by one, in float64: the compiled CPU loop's arithmetic in its order."""
    acc = np.zeros(G.shape[0])
    nb = len(slots)
    b = 0
    while b + 4 <= nb:
        r0, r1, r2, r3 = (data[slots[b + i]] for i in range(4))
        acc += (coef[b] * r0 + coef[b + 1] * r1) + (coef[b + 2] * r2 + coef[b + 3] * r3)
        b += 4
    while b < nb:
        acc += coef[b] * data[slots[b]]
        b += 1
    G += y * acc


_ADD_ROWS_SOURCE = r"""
extern "C" __global__ void muflow_add_rows(double* G, const double* y, const T* data,
                                           const long long* slots, const double* coef,
                                           const long long nb, const long long n) {
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    double acc = 0.0;
    long long b = 0;
    for (; b + 4 <= nb; b += 4) {
        acc += (coef[b] * (double)data[slots[b] * n + t] + coef[b + 1] * (double)data[slots[b + 1] * n + t])
             + (coef[b + 2] * (double)data[slots[b + 2] * n + t] + coef[b + 3] * (double)data[slots[b + 3] * n + t]);
    }
    for (; b < nb; ++b) acc += coef[b] * (double)data[slots[b] * n + t];
    G[t] += y[t] * acc;
}
"""
_ADD_ROWS_KERNELS: dict = {}
_THREADS = 256


def add_rows(xp, G, y, data, slots, coef) -> None:
    """``G[t] += y[t] sum_b coef[b] data[slots[b], t]`` for every column t, in float64
    (``G``, ``y``, ``coef`` float64; ``data`` the row cache's storage, float32 or float64;
    ``slots`` int64): one GPU thread a column, reading each row once and coalesced;
    :func:`add_rows_reference` under NumPy."""
    if len(slots) == 0:
        return
    if xp is np:
        add_rows_reference(G, y, data, slots, coef)
        return
    ctype = "float" if data.dtype == np.float32 else "double"
    kernel = _ADD_ROWS_KERNELS.get(ctype)
    if kernel is None:
        kernel = _ADD_ROWS_KERNELS[ctype] = xp.RawKernel(
            _ADD_ROWS_SOURCE.replace("T*", f"{ctype}*"), "muflow_add_rows")
    n = G.shape[0]
    kernel(((n + _THREADS - 1) // _THREADS,), (_THREADS,),
           (G, y, data, xp.asarray(slots, dtype=xp.int64), xp.asarray(coef, dtype=xp.float64),
            np.int64(len(slots)), np.int64(n)))
