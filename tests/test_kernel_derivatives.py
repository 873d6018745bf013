"""Kernel derivatives (muflow.kernel_derivatives) against central finite differences.

input-space-margin.txt, section 3.3: k_x(x, y) = dk/dx and K_xy(x, y) = d2k/dx dy^T.
Central differences have error O(h^2) ~ 1e-10 at h = 1e-5, so agreement to 1e-6 relative
(to the largest entry of the block) is a strict check of the closed forms.
"""

import numpy as np
import pytest

from muflow.exceptions import MuflowInputError
from muflow.kernel_derivatives import (
    DIFFERENTIABLE_KERNELS,
    kernel_cross_hessian,
    kernel_gradient,
    kernel_value,
)
from muflow.kernels import Kernel

H = 1e-5
RTOL = 1e-6

KERNELS = [
    Kernel("rbf", gamma=0.7),
    Kernel("rbf", gamma=3.0),
    Kernel("poly", gamma=0.5, degree=3, coef0=1.0),
    Kernel("poly", gamma=1.3, degree=2, coef0=0.0),
    Kernel("poly", gamma=0.8, degree=1, coef0=0.2),
    Kernel("linear"),
]


@pytest.fixture
def blocks():
    rng = np.random.default_rng(7)
    return rng.normal(size=(5, 3)), rng.normal(size=(4, 3))


def _fd_gradient_first(kernel, A, B):
    """d k(a_i, b_j) / d a_i by central differences, shape (n_A, n_B, m)."""
    out = np.empty((A.shape[0], B.shape[0], A.shape[1]))
    for s in range(A.shape[1]):
        e = np.zeros(A.shape[1]); e[s] = H
        out[:, :, s] = (kernel_value(kernel, A + e, B) - kernel_value(kernel, A - e, B)) / (2 * H)
    return out


def _fd_cross(kernel, A, B):
    """d/d b_t of the analytic k_x(a_i, b_j)[s], shape (n_A, n_B, m, m)."""
    m = A.shape[1]
    out = np.empty((A.shape[0], B.shape[0], m, m))
    for t in range(m):
        e = np.zeros(m); e[t] = H
        out[:, :, :, t] = (kernel_gradient(kernel, A, B + e) - kernel_gradient(kernel, A, B - e)) / (2 * H)
    return out


def _assert_close(actual, expected):
    scale = np.abs(expected).max()
    assert np.abs(actual - expected).max() <= RTOL * scale


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.gamma}-{k.degree}")
def test_gradient_matches_finite_differences(kernel, blocks):
    A, B = blocks
    G = kernel_gradient(kernel, A, B)
    assert G.shape == (5, 4, 3)
    _assert_close(G, _fd_gradient_first(kernel, A, B))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.gamma}-{k.degree}")
def test_cross_hessian_matches_finite_differences(kernel, blocks):
    A, B = blocks
    K = kernel_cross_hessian(kernel, A, B)
    assert K.shape == (5, 4, 3, 3)
    _assert_close(K, _fd_cross(kernel, A, B))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: f"{k.name}-{k.gamma}-{k.degree}")
def test_symmetry_of_derivatives(kernel, blocks):
    """k symmetric => K_xy(a, b) = K_xy(b, a)^T, and k_x(a, b) = dk(b, a)/da."""
    A, B = blocks
    K_ab = kernel_cross_hessian(kernel, A, B)
    K_ba = kernel_cross_hessian(kernel, B, A)
    np.testing.assert_allclose(K_ab, np.transpose(K_ba, (1, 0, 3, 2)), rtol=1e-12, atol=1e-14)


def test_offset_has_no_derivative(blocks):
    A, B = blocks
    k = Kernel("rbf", gamma=0.5)
    np.testing.assert_array_equal(kernel_gradient(k, A, B), kernel_gradient(k.with_offset(1.0), A, B))


@pytest.mark.parametrize("name", ["sigmoid", "laplacian", "precomputed"])
def test_unsupported_kernel_names_the_supported_ones(name, blocks):
    A, B = blocks
    with pytest.raises(MuflowInputError) as err:
        kernel_gradient(Kernel(name), A, B)
    for supported in DIFFERENTIABLE_KERNELS:
        assert supported in str(err.value)
    with pytest.raises(MuflowInputError):
        kernel_cross_hessian(Kernel(name), A, B)


def test_mismatched_columns():
    with pytest.raises(MuflowInputError, match="columns"):
        kernel_gradient(Kernel("rbf"), np.zeros((2, 3)), np.zeros((2, 2)))
