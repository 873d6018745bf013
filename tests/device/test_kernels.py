"""The device kernels' NumPy references against muflow's CPU code, and DeviceRows (under
NumPy) against the CPU's rows on demand: the same numbers, so that the GPU tests need only
check each device kernel against its reference."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.device.kernels import add_rows_reference, finish_block_reference
from muflow.device.rows import DeviceRows
from muflow.kernel_rows import KernelRows
from muflow.kernels import Kernel
from muflow.solvers._working_set_compiled import add_rows

KERNELS = [Kernel("rbf", gamma=0.3), Kernel("poly", gamma=0.2, coef0=1.0, degree=3),
           Kernel("sigmoid", gamma=0.05, coef0=-0.5), Kernel("linear"),
           Kernel("rbf", gamma=0.3, offset=1.0)]


@pytest.fixture
def X():
    return np.random.default_rng(3).normal(size=(300, 7))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}{'+1' if k.offset else ''}")
def test_the_finish_reference_is_the_cpu_float64_finish_bit_for_bit(X, kernel):
    A, B = X[:40], X[25:]
    sq_A, sq_B = np.einsum("ij,ij->i", A, A), np.einsum("ij,ij->i", B, B)
    expected = kernel.block_into(A, B, np.empty((40, B.shape[0])), sq_A=sq_A, sq_B=sq_B,
                                 same_rows=np.full(40, -1))
    G = A @ np.ascontiguousarray(B.T)
    finish_block_reference(G, sq_A, sq_B, kernel)
    np.testing.assert_array_equal(G, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nb", [0, 3, 4, 9])
def test_the_gradient_update_reference_is_the_compiled_loop_bit_for_bit(dtype, nb):
    rng = np.random.default_rng(nb)
    n = 1000
    data = rng.normal(size=(12, n)).astype(dtype)
    slots = rng.choice(12, size=nb, replace=False).astype(np.int64)
    coef = rng.normal(size=nb)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    G0 = rng.normal(size=n)
    expected, got = G0.copy(), G0.copy()
    add_rows(expected, y, data, slots, coef, 0, n)
    add_rows_reference(got, y, data, slots, coef)
    np.testing.assert_array_equal(got, expected)
    if nb:
        assert not np.array_equal(got, G0)


@pytest.mark.parametrize("kernel", KERNELS[:4], ids=lambda k: k.name)
def test_device_rows_under_numpy_are_the_cpu_rows(X, kernel):
    # the same prepared X, GEMM and finish: equal to the last bit or two (BLAS may take
    # another micro-kernel for another buffer's alignment)
    cpu = KernelRows(X, kernel, dtype="float64")
    dev = DeviceRows(X, kernel, np, dtype="float64")
    idx = np.array([5, 0, 299, 17, 5])
    np.testing.assert_allclose(dev.rows(idx), cpu.rows(idx), rtol=1e-15, atol=1e-300)
    np.testing.assert_array_equal(dev.diagonal(), cpu.diagonal())
    assert dev.nonnegative == cpu.nonnegative
    sub = np.array([3, 9, 100, 250])
    np.testing.assert_allclose(dev.restricted(sub).rows([1, 3]), cpu.restricted(sub).rows([1, 3]),
                               rtol=1e-15, atol=1e-300)
    np.testing.assert_allclose(dev.restricted(sub).rows([1, 3]), cpu.rows(sub[[1, 3]])[:, sub],
                               rtol=1e-15, atol=1e-300)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_device_products_and_a_resident_k_agree_with_the_kernel(X, dtype):
    kernel = Kernel("rbf", gamma=0.3)
    K = kernel.block_reference(X)
    V = np.random.default_rng(1).normal(size=(300, 3))
    tol = 1e-12 if dtype == "float64" else 2e-5
    streamed = DeviceRows(X, kernel, np, dtype=dtype)
    resident = DeviceRows(X, kernel, np, dtype=dtype, resident_bytes=10**9)
    assert streamed.K is None and resident.K is not None
    for op in (streamed, resident):
        np.testing.assert_allclose(op.matmul(V), K @ V, rtol=0, atol=tol * np.abs(V).sum(0).max())
        np.testing.assert_allclose(op.rows([4, 200]), K[[4, 200]], rtol=0, atol=tol)
    data = np.zeros((5, 300), dtype=dtype)
    streamed.rows_into(np.array([7, 8, 1]), data, np.array([0, 1, 3]))  # a run, then a gap
    np.testing.assert_allclose(data[[0, 1, 3]], K[[7, 8, 1]], rtol=0, atol=tol)
    assert not data[[2, 4]].any()


def test_the_device_refuses_kernels_it_does_not_compute(X):
    from muflow.exceptions import MuflowInputError

    with pytest.raises(MuflowInputError, match="use device='cpu'"):
        DeviceRows(X, Kernel("laplacian", gamma=0.1), np)
