"""The discriminant of eq. (2) of input-space-margin.txt (Akaho), its gradient, Hessian and
``r = omega . omega``: what the projection (:mod:`muflow.input_margin._projection`) and the
steps of Algorithm 1 (:mod:`muflow.input_margin._algorithm`) both evaluate. Its own module
so that neither of those imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from muflow.kernel_derivatives import kernel_cross_hessian, kernel_gradient, kernel_value
from muflow.kernels import Kernel


@dataclass
class Discriminant:
    """``f(x) = sum_i {a_i k(c_i, x) + b_i^T k_x(c_i, x)} + f0`` (eq. 2), ``c_i = x_hat_i``.

    Attributes
    ----------
    kernel : Kernel
    centers : ndarray of shape (n_b, m)
        The bases x_hat_i.
    a : ndarray of shape (n_b,)
    b : ndarray of shape (n_b, m)
    f0 : float
    """

    kernel: Kernel
    centers: np.ndarray
    a: np.ndarray
    b: np.ndarray
    f0: float

    def value(self, X) -> np.ndarray:
        """f(x) for every row of X, shape (n,)."""
        out = kernel_value(self.kernel, X, self.centers) @ self.a
        if np.any(self.b):
            # k_x(c_j, x) = dk(c_j, x)/dc_j = kernel_gradient(C, X)[j, i]
            out = out + np.einsum("jis,js->i", kernel_gradient(self.kernel, self.centers, X), self.b)
        return out + self.f0

    def gradient(self, X) -> np.ndarray:
        """grad f(x) = sum_j a_j k_x(x, c_j) + K_xy(x, c_j) b_j (the q of eq. 12), shape (n, m)."""
        out = np.einsum("ijs,j->is", kernel_gradient(self.kernel, X, self.centers), self.a)
        if np.any(self.b):
            out = out + np.einsum("ijst,jt->is", kernel_cross_hessian(self.kernel, X, self.centers), self.b)
        return out

    def hessian(self, X, step=1e-5) -> np.ndarray:
        """Hessian of f by central differences of the analytic gradient, shape (n, m, m).

        Only the slow-down of section 3.4 uses it, to classify a point as stable or not, so
        O(step^2) accuracy is ample.
        """
        X = np.asarray(X, dtype=np.float64)
        n, m = X.shape
        H = np.empty((n, m, m))
        for t in range(m):
            e = np.zeros(m)
            e[t] = step
            H[:, :, t] = (self.gradient(X + e) - self.gradient(X - e)) / (2 * step)
        return 0.5 * (H + np.transpose(H, (0, 2, 1)))

    def support(self) -> np.ndarray:
        """Indices of the bases with a nonzero coefficient (a_i or b_i)."""
        return np.flatnonzero((self.a != 0) | np.any(self.b != 0, axis=1))

    def compact(self) -> "Discriminant":
        """The same f on the bases of :meth:`support` only (what a fitted model keeps)."""
        keep = self.support()
        return Discriminant(self.kernel, self.centers[keep].copy(), self.a[keep].copy(),
                            self.b[keep].copy(), self.f0)

    def magnitude(self, X) -> np.ndarray:
        """``sum_i |a_i k(c_i, x)| + |b_i^T k_x(c_i, x)| + |f0|`` for every row of X, shape (n,):
        the size of the terms that eq. (2) sums, which bounds its rounding error (divided by
        the machine epsilon)."""
        out = np.abs(kernel_value(self.kernel, X, self.centers)) @ np.abs(self.a)
        if np.any(self.b):
            out = out + np.abs(np.einsum("jis,js->jis", kernel_gradient(self.kernel, self.centers, X),
                                         self.b)).sum(axis=(0, 2))
        return out + abs(self.f0)

    def squared_norm(self) -> float:
        """``r = omega . omega = sum_i a_i p_i + b_i^T q_i`` (section 3.3)."""
        C = self.centers
        p = kernel_value(self.kernel, C, C) @ self.a
        if np.any(self.b):
            p = p + np.einsum("jis,js->i", kernel_gradient(self.kernel, C, C), self.b)
        q = self.gradient(C)
        return float(self.a @ p + np.einsum("is,is->", self.b, q))
