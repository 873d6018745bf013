"""Kernel functions evaluated block by block.

A :class:`Kernel` evaluates one block ``K(A, B)`` of a Gram matrix, knows its parameters
under their scikit-learn names (``gamma``, ``degree``, ``coef0``) and says whether it is
non-negative on given data, which decides whether the MUNK update applies
(munk-nonnegative-kernel-svm.txt, section 4: "a kernel function is non-negative when its
output value is greater than or equal to zero for all possible inputs").

``offset`` adds a constant to every entry: ``K(A, B) + offset``. The "regularized"
intercept of :class:`muflow.SVC` is the bias as an augmented constant feature, that is
``offset = 1``; a non-negative kernel stays non-negative.

Notes
-----
Per-block work only: no graph building, no I/O. The Gram store and the operators call
:meth:`Kernel.block` on row and column panels.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import cdist

from muflow.exceptions import MuflowInputError

KERNELS = ("linear", "poly", "rbf", "sigmoid", "laplacian", "precomputed")

#: Parameters that each kernel reads; any other one given to it is an error in sweeps.
KERNEL_PARAMETERS = {
    "linear": (),
    "poly": ("gamma", "degree", "coef0"),
    "rbf": ("gamma",),
    "sigmoid": ("gamma", "coef0"),
    "laplacian": ("gamma",),
    "precomputed": (),
}


def gamma_from_sigma(sigma: float) -> float:
    """Gaussian width ``sigma`` of the papers as scikit-learn's ``gamma = 1 / (2 sigma^2)``.

    The papers write the Gaussian kernel as ``exp(-||x - y||^2 / (2 sigma^2))``
    (m3-multiplicative-updates-large-margin.txt, section 4; munk paper, Table 1).
    """
    if not sigma > 0:
        raise MuflowInputError(f"sigma must be positive, got {sigma!r}")
    return 1.0 / (2.0 * float(sigma) ** 2)


def _dot(A, B):
    out = A @ B.T
    return out.toarray() if sp.issparse(out) else np.asarray(out)


def _row_sq_norms(A):
    if sp.issparse(A):
        return np.asarray(A.multiply(A).sum(axis=1)).ravel()
    return np.einsum("ij,ij->i", A, A)


def squared_distances(A, B) -> np.ndarray:
    """``||a_i - b_j||^2`` for every row pair, clipped at 0 against round-off."""
    d = _row_sq_norms(A)[:, None] + _row_sq_norms(B)[None, :] - 2.0 * _dot(A, B)
    np.maximum(d, 0.0, out=d)
    return d


def _dense(A):
    return A.toarray() if sp.issparse(A) else A


def _is_nonnegative_data(X) -> bool:
    if sp.issparse(X):
        return X.nnz == 0 or X.data.min() >= 0
    return bool(np.all(np.asarray(X) >= 0))


@dataclass(frozen=True)
class Kernel:
    """A kernel function with its parameters.

    Parameters
    ----------
    name : {"linear", "poly", "rbf", "sigmoid", "laplacian", "precomputed"}
    gamma : float, default=1.0
        Scale for poly, rbf, sigmoid and laplacian. Resolve scikit-learn's ``"scale"`` and
        ``"auto"`` with :func:`resolve_gamma` before building a kernel.
    degree : int, default=3
        Degree of the polynomial kernel ``(gamma <a, b> + coef0) ** degree``.
    coef0 : float, default=0.0
        Independent term of the poly and sigmoid kernels.
    offset : float, default=0.0
        Constant added to every entry (the "regularized" intercept uses 1).
    """

    name: str
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 0.0
    offset: float = 0.0

    def __post_init__(self):
        if self.name not in KERNELS:
            raise MuflowInputError(
                f"unknown kernel {self.name!r}; choose one of {', '.join(KERNELS)}"
            )
        if self.name in ("poly", "rbf", "sigmoid", "laplacian") and not self.gamma > 0:
            raise MuflowInputError(f"gamma must be positive for the {self.name} kernel, got {self.gamma!r}")
        if self.name == "poly" and (int(self.degree) != self.degree or self.degree < 1):
            raise MuflowInputError(f"degree must be a positive integer, got {self.degree!r}")

    # -- evaluation -------------------------------------------------------------------
    def block(self, A, B=None) -> np.ndarray:
        """Evaluate ``K(A, B)`` as a dense float64 array of shape (len(A), len(B)).

        For ``"precomputed"``, ``A`` already holds kernel values and is returned as is
        (plus ``offset``).
        """
        if B is None:
            B = A
        if self.name == "precomputed":
            K = np.array(_dense(A), dtype=np.float64)
            if self.offset:
                K += self.offset
            return K
        out = np.empty((A.shape[0], B.shape[0]))
        return self.block_into(A, B, out)

    __call__ = block

    def block_into(self, A, B, out, *, BT=None, sq_A=None, sq_B=None, scratch=None):
        """Evaluate ``K(A, B)`` into ``out`` (float32 or float64), in place.

        The kernels built on inner products (linear, poly, rbf, sigmoid) take one BLAS
        product into a float64 ``scratch`` block and finish it in place there, so that a
        block costs one product and a few passes over memory, and rounding happens once,
        when the float64 values are stored into ``out``.

        Parameters
        ----------
        A, B : ndarray or sparse matrix
        out : ndarray of shape (len(A), len(B)), float32 or float64
        BT : ndarray, optional
            ``B.T`` as a C-ordered array (dense B only), computed once by callers that
            evaluate many blocks against the same B.
        sq_A, sq_B : ndarray, optional
            Squared row norms of A and B (rbf), likewise.
        scratch : ndarray, optional
            float64 work space with at least ``out.size`` elements, reused across calls.
        """
        name = self.name
        if name in ("laplacian", "precomputed") or sp.issparse(A) or sp.issparse(B):
            out[...] = self.block_reference(A, B)
            return out
        A = np.asarray(A, dtype=np.float64)
        if scratch is None or scratch.size < out.size:
            G = out if out.dtype == np.float64 else np.empty(out.shape)
        else:
            G = scratch.reshape(-1)[: out.size].reshape(out.shape)
        if BT is None:
            BT = np.ascontiguousarray(np.asarray(B, dtype=np.float64).T)
        # not ``A @ A.T``: NumPy sends that to syrk, which OpenBLAS runs many times slower
        np.matmul(A, BT, out=G)
        if name == "rbf":
            # -gamma ||a - b||^2 = 2 gamma a.b - gamma ||a||^2 - gamma ||b||^2, clipped at 0
            sq_A = _row_sq_norms(A) if sq_A is None else sq_A
            sq_B = _row_sq_norms(np.asarray(B, dtype=np.float64)) if sq_B is None else sq_B
            G *= 2.0 * self.gamma
            G -= (self.gamma * sq_A)[:, None]
            G -= (self.gamma * sq_B)[None, :]
            np.minimum(G, 0.0, out=G)
            np.exp(G, out=G)
        elif name == "poly":
            G *= self.gamma
            G += self.coef0
            np.power(G, int(self.degree), out=G)
        elif name == "sigmoid":
            G *= self.gamma
            G += self.coef0
            np.tanh(G, out=G)
        if self.offset:
            G += self.offset
        if G is not out:
            out[...] = G
        return out

    def block_reference(self, A, B=None) -> np.ndarray:
        """``K(A, B)`` by the textbook formulas, as float64 (laplacian, sparse input and the
        tests' reference)."""
        if B is None:
            B = A
        name = self.name
        if name == "precomputed":
            K = np.array(_dense(A), dtype=np.float64)
        elif name == "linear":
            K = _dot(A, B).astype(np.float64, copy=False)
        elif name == "poly":
            K = (self.gamma * _dot(A, B) + self.coef0) ** int(self.degree)
        elif name == "rbf":
            K = np.exp(-self.gamma * squared_distances(A, B))
        elif name == "sigmoid":
            K = np.tanh(self.gamma * _dot(A, B) + self.coef0)
        else:  # laplacian: L1 distances need dense rows (one block at a time)
            K = np.exp(-self.gamma * cdist(_dense(A), _dense(B), "cityblock"))
        K = np.asarray(K, dtype=np.float64)
        if self.offset:
            K += self.offset
        return K

    def diagonal(self, A) -> np.ndarray:
        """``K(a_i, a_i)`` for every row, without building the block."""
        if self.name in ("rbf", "laplacian"):
            d = np.ones(A.shape[0])
        elif self.name == "precomputed":
            d = np.diag(_dense(A)).astype(np.float64)
        else:
            sq = _row_sq_norms(A)
            if self.name == "linear":
                d = sq
            elif self.name == "poly":
                d = (self.gamma * sq + self.coef0) ** int(self.degree)
            else:
                d = np.tanh(self.gamma * sq + self.coef0)
        return np.asarray(d, dtype=np.float64) + self.offset

    # -- properties -------------------------------------------------------------------
    def is_nonnegative(self, X) -> bool:
        """Whether every kernel value on the data ``X`` is >= 0.

        RBF and laplacian: always. Polynomial of even degree: always (an even power).
        Polynomial of odd degree and sigmoid: when the data and ``coef0`` are non-negative.
        Linear: when the data are non-negative. Precomputed: when the matrix is.
        A non-negative ``offset`` keeps a non-negative kernel non-negative.
        """
        if self.offset < 0:
            return False
        if self.name in ("rbf", "laplacian"):
            return True
        if self.name == "poly" and int(self.degree) % 2 == 0:
            return True
        if self.name == "precomputed":
            return _is_nonnegative_data(X) or float(np.min(_dense(X))) + self.offset >= 0
        if self.name in ("poly", "sigmoid"):
            return self.coef0 >= 0 and _is_nonnegative_data(X)
        return _is_nonnegative_data(X)

    def params(self) -> dict:
        """The kernel's parameters under their scikit-learn names, as plain JSON values."""
        out = {"kernel": self.name}
        for key in KERNEL_PARAMETERS[self.name]:
            value = getattr(self, key)
            out[key] = int(value) if key == "degree" else float(value)
        if self.offset:
            out["offset"] = float(self.offset)
        return out

    def to_dict(self) -> dict:
        return {k: (int(v) if k == "degree" else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Kernel":
        return cls(**d)

    def with_offset(self, offset: float) -> "Kernel":
        return replace(self, offset=float(offset))


def resolve_gamma(gamma, X) -> float:
    """scikit-learn's rule for ``gamma``: ``"scale"`` is 1 / (n_features * X.var()),
    ``"auto"`` is 1 / n_features, a number is taken as is."""
    n_features = X.shape[1]
    if isinstance(gamma, str):
        if gamma == "scale":
            if sp.issparse(X):
                var = X.multiply(X).mean() - X.mean() ** 2
            else:
                var = np.asarray(X).var()
            return 1.0 / (n_features * var) if var != 0 else 1.0
        if gamma == "auto":
            return 1.0 / n_features
        raise MuflowInputError(f"gamma must be 'scale', 'auto' or a positive number, got {gamma!r}")
    gamma = float(gamma)
    if not gamma > 0:
        raise MuflowInputError(f"gamma must be positive, got {gamma!r}")
    return gamma


def kernel_from_setting(setting, X, *, intercept: str = "exact") -> Kernel:
    """The one way to build a :class:`Kernel` from a kernel setting and the training data.

    A setting names a kernel and its parameters as :class:`muflow.SVC` takes them:
    ``{"kernel": "rbf", "gamma": "scale"}``, ``{"kernel": "poly", "degree": 2, "gamma": 0.1,
    "coef0": 1.0}``. The sweep, the run pipeline (whose Gram stores must carry the same cache
    keys as the sweep's) and the estimators all build their kernels here.

    Parameters
    ----------
    setting : mapping
        ``kernel`` and, optionally, ``gamma`` (a positive number, ``"scale"`` or ``"auto"``;
        default ``"scale"``), ``degree`` (default 3) and ``coef0`` (default 0). Parameters
        the kernel does not read (:data:`KERNEL_PARAMETERS`) are ignored and take the
        :class:`Kernel` defaults, so that equal kernels compare (and cache) equal.
    X : array-like or sparse matrix of shape (n_samples, n_features)
        The training data: ``"scale"`` and ``"auto"`` are resolved on it by
        :func:`resolve_gamma` (scikit-learn's rule).
    intercept : {"exact", "regularized", "none"}, default="exact"
        ``"regularized"`` adds ``offset = 1`` to every entry: the bias as an augmented
        constant feature (see the module docstring).

    Returns
    -------
    Kernel
    """
    name = setting["kernel"]
    reads = KERNEL_PARAMETERS.get(name, ())
    params = {}
    if "gamma" in reads:
        params["gamma"] = resolve_gamma(setting.get("gamma", "scale"), X)
    if "degree" in reads:
        params["degree"] = int(setting.get("degree", 3))
    if "coef0" in reads:
        params["coef0"] = float(setting.get("coef0", 0.0))
    offset = 1.0 if intercept == "regularized" else 0.0
    return Kernel(name, offset=offset, **params)
