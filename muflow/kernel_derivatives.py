"""First and mixed second derivatives of kernel functions, block by block.

The input-space-margin algorithm (input-space-margin.txt, section 3.3) replaces the inner
products that involve the derivative psi(x) = grad phi(x) of the feature map by kernel
derivatives:

- ``psi(x) . phi(y)``   -> ``k_x(x, y) = dk(x, y) / dx``                 (a vector in R^m),
- ``psi(x) . psi(y)^T`` -> ``K_xy(x, y) = d^2 k(x, y) / dx dy^T``         (an m x m matrix),

with ``K_xy(x, y)[s, t] = d^2 k / dx_s dy_t``. This module evaluates both for every row
pair of two blocks ``A`` (n_A x m) and ``B`` (n_B x m), like :meth:`muflow.kernels.Kernel.block`.

Supported kernels (closed forms, ``delta = a - b``, ``s = gamma <a, b> + coef0``):

- ``rbf``, ``k = exp(-gamma |delta|^2)``:
  ``k_x = -2 gamma k delta``, ``K_xy = 2 gamma k (I - 2 gamma delta delta^T)``;
- ``poly``, ``k = s^d``:
  ``k_x = d gamma s^(d-1) b``, ``K_xy = d gamma s^(d-1) I + d (d-1) gamma^2 s^(d-2) b a^T``;
- ``linear`` (``poly`` with gamma 1, coef0 0, degree 1): ``k_x = b``, ``K_xy = I``.

Other kernels (sigmoid, laplacian, precomputed) raise :class:`MuflowInputError`; the
laplacian kernel is not differentiable where two coordinates coincide.

Notes
-----
``kernel_cross_hessian`` returns an array of shape (n_A, n_B, m, m): memory scales as
``8 * n_A * n_B * m^2`` bytes, the O(m^2 n^2) of input-space-margin.txt, section 3.6.
Per-block work only, dense inputs only.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from muflow.exceptions import MuflowInputError
from muflow.kernels import Kernel

#: Kernels whose derivatives are implemented.
DIFFERENTIABLE_KERNELS = ("rbf", "poly", "linear")


def check_differentiable(kernel: Kernel) -> None:
    """Raise a :class:`MuflowInputError` naming the supported kernels if ``kernel`` has no
    derivatives here."""
    if kernel.name not in DIFFERENTIABLE_KERNELS:
        raise MuflowInputError(
            f"the {kernel.name!r} kernel has no derivatives in muflow; the input-space "
            f"margin needs dk/dx and d2k/dxdy, available for the kernels "
            f"{', '.join(DIFFERENTIABLE_KERNELS)}"
        )


def _poly_parameters(kernel: Kernel):
    if kernel.name == "linear":
        return 1.0, 0.0, 1
    return float(kernel.gamma), float(kernel.coef0), int(kernel.degree)


def _blocks(kernel, A, B):
    check_differentiable(kernel)
    if sp.issparse(A) or (B is not None and sp.issparse(B)):
        raise MuflowInputError("kernel derivatives need dense arrays; convert with .toarray()")
    A = np.atleast_2d(np.asarray(A, dtype=np.float64))
    B = A if B is None else np.atleast_2d(np.asarray(B, dtype=np.float64))
    if A.shape[1] != B.shape[1]:
        raise MuflowInputError(f"A and B have {A.shape[1]} and {B.shape[1]} columns; they must match")
    return A, B


def kernel_value(kernel: Kernel, A, B=None) -> np.ndarray:
    """``k(a_i, b_j)`` without the kernel's offset, shape (n_A, n_B)."""
    A, B = _blocks(kernel, A, B)
    return kernel.with_offset(0.0).block(A, B)


def kernel_gradient(kernel: Kernel, A, B=None) -> np.ndarray:
    """``k_x(a_i, b_j) = dk(a_i, b_j) / da_i`` for every row pair.

    Parameters
    ----------
    kernel : Kernel
        One of :data:`DIFFERENTIABLE_KERNELS` (its offset is a constant and has no derivative).
    A : array-like of shape (n_A, m)
    B : array-like of shape (n_B, m), default=A

    Returns
    -------
    ndarray of shape (n_A, n_B, m)
    """
    A, B = _blocks(kernel, A, B)
    if kernel.name == "rbf":
        gamma = float(kernel.gamma)
        delta = A[:, None, :] - B[None, :, :]
        k = np.exp(-gamma * np.einsum("ijs,ijs->ij", delta, delta))
        return (-2.0 * gamma) * k[:, :, None] * delta
    gamma, coef0, degree = _poly_parameters(kernel)
    s = gamma * (A @ B.T) + coef0
    first = degree * gamma * s ** (degree - 1)
    return first[:, :, None] * B[None, :, :]


def kernel_cross_hessian(kernel: Kernel, A, B=None) -> np.ndarray:
    """``K_xy(a_i, b_j) = d^2 k(a_i, b_j) / da_i db_j^T`` for every row pair.

    Parameters
    ----------
    kernel : Kernel
    A : array-like of shape (n_A, m)
    B : array-like of shape (n_B, m), default=A

    Returns
    -------
    ndarray of shape (n_A, n_B, m, m)
        ``out[i, j, s, t] = d^2 k(a_i, b_j) / d(a_i)_s d(b_j)_t``.

    Notes
    -----
    Memory: ``8 * n_A * n_B * m^2`` bytes.
    """
    A, B = _blocks(kernel, A, B)
    m = A.shape[1]
    eye = np.eye(m)
    if kernel.name == "rbf":
        gamma = float(kernel.gamma)
        delta = A[:, None, :] - B[None, :, :]
        k = np.exp(-gamma * np.einsum("ijs,ijs->ij", delta, delta))
        outer = delta[:, :, :, None] * delta[:, :, None, :]
        return (2.0 * gamma) * k[:, :, None, None] * (eye - 2.0 * gamma * outer)
    gamma, coef0, degree = _poly_parameters(kernel)
    s = gamma * (A @ B.T) + coef0
    first = degree * gamma * s ** (degree - 1)
    out = first[:, :, None, None] * eye
    if degree >= 2:
        second = degree * (degree - 1) * gamma**2 * s ** (degree - 2)
        # d/db_t of (d gamma s^(d-1) b_s) adds d (d-1) gamma^2 s^(d-2) b_s a_t
        out = out + second[:, :, None, None] * (B[None, :, :, None] * A[:, None, None, :])
    return out
