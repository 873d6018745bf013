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
from muflow.validation import check_number

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


def _same_array(A, B) -> bool:
    """Whether A and B are the same dense rows (a diagonal block): one object, or two views
    of the same memory with the same shape and strides."""
    if A is B:
        return True
    if not (isinstance(A, np.ndarray) and isinstance(B, np.ndarray)):
        return False
    return (A.shape == B.shape and A.strides == B.strides and A.dtype == B.dtype
            and A.__array_interface__["data"][0] == B.__array_interface__["data"][0])


def _sq_norms64(A) -> np.ndarray:
    """Squared row norms summed in float64 whatever A's dtype."""
    if sp.issparse(A):
        return _row_sq_norms(A.astype(np.float64))
    return _row_sq_norms(np.asarray(A, dtype=np.float64))


def rbf_center(X) -> np.ndarray | None:
    """The shift to subtract from dense rows X before a float32 rbf block, or None.

    ``||a - b||^2`` is the same for ``a - c`` and ``b - c``, and sgemm's error in it scales
    with ``||a||^2 + ||b||^2``: a shift that shrinks the norms shrinks the error.

    - Integer-valued data (binary features as in a8a, counts, small integer scales): their
      float32 products are exact as they are (entries and sums below 2**24), so the shift
      is the mean rounded to integers, which keeps them integers (None when it is 0).
    - Other data: the mean, when it at least halves the mean squared norm
      (``||mean||^2 >= total variance``); otherwise subtracting it would only add a
      rounding.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] == 0:
        return None
    mean = X.mean(axis=0)
    if np.array_equal(X, np.rint(X)):
        return integer_center(mean)
    return mean if mean @ mean >= X.var(axis=0).sum() else None


def integer_center(mean) -> np.ndarray | None:
    """rbf's shift of integer-valued data (:func:`rbf_center`): their column means rounded
    to integers, which keeps the data integers; None when it is 0."""
    center = np.rint(mean)
    return center if np.any(center) else None


def _dense(A):
    return A.toarray() if sp.issparse(A) else A


def _is_nonnegative_data(X) -> bool:
    if sp.issparse(X):
        return X.nnz == 0 or X.data.min() >= 0
    if hasattr(X, "compute"):  # a dask array: reduced where its blocks are
        return bool((X.min() >= 0).compute())
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
        # gamma = 0 and degree = 0 give a constant kernel: degenerate, but scikit-learn's
        # SVC takes them (a grid may hold them), so they are taken here too
        if self.name in ("poly", "rbf", "sigmoid", "laplacian") and not self.gamma >= 0:
            raise MuflowInputError(f"gamma must be >= 0 for the {self.name} kernel, got {self.gamma!r}")
        if self.name == "poly" and (int(self.degree) != self.degree or self.degree < 0):
            raise MuflowInputError(f"degree must be a non-negative integer, got {self.degree!r}")

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

    def block_into(self, A, B, out, *, BT=None, sq_A=None, sq_B=None, scratch=None,
                   same_rows=None, product_ready=False):
        """Evaluate ``K(A, B)`` into ``out`` (float32 or float64), in place.

        The one code path of every block of K that muflow computes: the in-memory Gram
        (:func:`muflow.inmemory.numpy_gram`), the zarr tiles (:mod:`muflow.gram.build`),
        rows on demand (:class:`muflow.kernel_rows.KernelRows`) and prediction. The kernels
        built on inner products (linear, poly, rbf, sigmoid) take one BLAS product
        ``G = A B'`` in the dtype of ``out`` (sgemm for float32, dgemm for float64) written
        into ``out`` itself, then one element-wise finish in place: compiled and fused into
        one pass for float32 (:mod:`muflow._kernel_compiled`), NumPy's in-place ufuncs for
        float64.

        Parameters
        ----------
        A, B : ndarray or sparse matrix
        out : ndarray of shape (len(A), len(B)), float32 or float64
        BT : ndarray, optional
            ``B.T`` as a C-ordered array in the dtype of ``out`` (dense B only), computed
            once by callers that evaluate many blocks against the same B.
        sq_A, sq_B : ndarray, optional
            Squared row norms of A and B (rbf; the diagonal), computed in float64 from the
            values multiplied, likewise.
        scratch : ndarray, optional
            float64 work space with at least ``out.size`` elements for the product of
            sparse blocks, reused across calls.
        same_rows : ndarray of int, optional
            ``same_rows[r] = c >= 0`` where row r of A is row c of B: ``out[r, c]`` is then
            written from the kernel's diagonal (:meth:`diagonal_from_sq`) instead of the
            product, so that K(a, a) is exact (1 + offset for rbf) whatever the round-off of
            ``||a||^2 + ||a||^2 - 2 a'a``, or of sgemm for float32 (a float64 product of the
            other kernels is kept: its a'a is as exact). Default: every ``r`` when A and B
            are the same array (a diagonal block), none otherwise.
        product_ready : bool, default=False
            ``out`` (C-ordered) holds ``A B'`` already, computed by the caller
            (:meth:`muflow.inmemory.RowSource.product_into`); only the finish is done here,
            with ``sq_A`` and ``sq_B`` for rbf.

        Notes
        -----
        float32 accuracy: sgemm rounds each product ``a'b`` to about ``6e-8 ||a|| ||b||``,
        and rbf's squared distance (clamped at 0) inherits that absolute error. A common
        shift leaves distances unchanged and can make the norms, hence the error, small
        (:func:`rbf_center`): without ``BT`` the two blocks are shifted by B's here;
        callers that pass ``BT`` hold all of X and shift it once
        (:func:`muflow.inmemory.row_source`).
        """
        name = self.name
        if name in ("laplacian", "precomputed"):
            out[...] = self.block_reference(A, B)
            return out
        if same_rows is None and _same_array(A, B):
            same_rows = np.arange(A.shape[0])
        dtype = np.dtype(out.dtype)
        G = out if out.flags.c_contiguous else np.empty(out.shape, dtype)
        if product_ready:
            if G is not out:
                raise ValueError("block_into(product_ready=True) needs a C-ordered out")
        elif sp.issparse(A) or sp.issparse(B):
            product = A @ B.T
            if not sp.issparse(product):
                G[...] = product
            elif product.dtype == dtype:
                product.toarray(out=G)
            elif scratch is not None and scratch.size >= out.size:
                G[...] = product.toarray(out=scratch.reshape(-1)[: out.size].reshape(out.shape))
            else:
                G[...] = product.toarray()
            if name == "rbf":
                sq_A = _row_sq_norms(A) if sq_A is None else sq_A
                sq_B = _row_sq_norms(B) if sq_B is None else sq_B
        else:
            if BT is None and name == "rbf" and dtype == np.float32:
                # distances do not change under a common shift: one that makes the norms
                # small makes sgemm's cancellation error small
                B = np.asarray(B, dtype=np.float64)
                center = rbf_center(B)
                if center is not None:
                    A = np.asarray(A, dtype=np.float64) - center
                    B = B - center
                    sq_A = sq_B = None
            A = np.asarray(A, dtype=dtype)
            if BT is None:
                BT = np.ascontiguousarray(np.asarray(B, dtype=dtype).T)
            elif BT.dtype != dtype:
                BT = np.ascontiguousarray(BT, dtype=dtype)
            # not ``A @ A.T``: NumPy sends that to syrk, which OpenBLAS runs many times slower
            np.matmul(A, BT, out=G)
            if name == "rbf" and sq_A is None:
                sq_A = _sq_norms64(A)
            if name == "rbf" and sq_B is None:
                sq_B = _sq_norms64(BT.T)
        if dtype == np.float32:
            self._finish_float32(G, sq_A, sq_B)
        else:
            self._finish_float64(G, sq_A, sq_B)
        if same_rows is not None and (name == "rbf" or dtype == np.float32):
            # a float64 product's a'a is as exact as the norm (and bit for bit the matrix
            # a user computes as np.dot(X, X.T)); rbf's exp(0) and float32's rounding are not
            same_rows = np.asarray(same_rows)
            r = np.flatnonzero(same_rows >= 0)
            if r.size:
                sq = _sq_norms64(A) if sq_A is None else np.asarray(sq_A, dtype=np.float64)
                G[r, same_rows[r]] = self.diagonal_from_sq(sq[r])
        if G is not out:
            out[...] = G
        return out

    def _finish_float32(self, G, sq_A, sq_B):
        """The compiled, fused element-wise pass over a C-ordered float32 product."""
        from muflow import _kernel_compiled as kc

        f32 = np.float32
        offset = f32(self.offset)
        if self.name == "rbf":
            kc.finish_rbf(G, np.ascontiguousarray(sq_A, dtype=np.float64),
                          np.ascontiguousarray(sq_B, dtype=np.float64), float(self.gamma), offset)
        elif self.name == "poly":
            kc.finish_poly(G, f32(self.gamma), f32(self.coef0), int(self.degree), offset)
        elif self.name == "sigmoid":
            kc.finish_sigmoid(G, f32(self.gamma), f32(self.coef0), offset)
        elif self.offset:
            G += offset

    def _finish_float64(self, G, sq_A, sq_B):
        """NumPy's in-place passes over a float64 product (no compiled code: prediction
        from a saved model needs NumPy and SciPy only)."""
        name = self.name
        if name == "rbf":
            # -gamma ||a - b||^2 = 2 gamma a.b - gamma ||a||^2 - gamma ||b||^2, clipped at 0
            G *= 2.0 * self.gamma
            G -= (self.gamma * np.asarray(sq_A, dtype=np.float64))[:, None]
            G -= (self.gamma * np.asarray(sq_B, dtype=np.float64))[None, :]
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
        if self.name == "precomputed":
            return np.diag(_dense(A)).astype(np.float64) + self.offset
        if self.name in ("rbf", "laplacian"):
            return self.diagonal_from_sq(np.zeros(A.shape[0]))
        return self.diagonal_from_sq(_row_sq_norms(A))

    def diagonal_from_sq(self, sq) -> np.ndarray:
        """``K(a, a)`` from ``||a||^2`` (float64): the exact diagonal of a block.

        rbf and laplacian: ``1 + offset`` whatever ``sq``; linear ``sq``; poly
        ``(gamma sq + coef0) ** degree``; sigmoid ``tanh(gamma sq + coef0)``.
        """
        sq = np.asarray(sq, dtype=np.float64)
        if self.name in ("rbf", "laplacian"):
            d = np.ones(sq.shape[0])
        elif self.name == "linear":
            d = sq.copy()
        elif self.name == "poly":
            d = (self.gamma * sq + self.coef0) ** int(self.degree)
        elif self.name == "sigmoid":
            d = np.tanh(self.gamma * sq + self.coef0)
        else:
            raise MuflowInputError("a precomputed kernel's diagonal is read from the matrix, not from norms")
        return d + self.offset

    # -- properties -------------------------------------------------------------------
    def is_nonnegative(self, X) -> bool:
        """Whether every kernel value on the data ``X`` is >= 0.

        RBF and laplacian: always. Polynomial of even degree: always (an even power).
        Polynomial of odd degree and sigmoid: when the data and ``coef0`` are non-negative.
        Linear: when the data are non-negative. Precomputed: when the matrix is.
        A non-negative ``offset`` keeps a non-negative kernel non-negative.
        """
        known = self.nonnegative_without_data()
        if known is not None:
            return known
        if self.name == "precomputed":
            return _is_nonnegative_data(X) or float(np.min(_dense(X))) + self.offset >= 0
        return _is_nonnegative_data(X)

    def nonnegative_without_data(self) -> bool | None:
        """What :meth:`is_nonnegative` says before the data are seen: True on any data
        (rbf, laplacian, an even polynomial), False on any data (a negative ``offset``, an
        odd polynomial or a sigmoid with ``coef0 < 0``), None when the data decide. Lets a
        configuration be checked before any data are read."""
        if self.offset < 0:
            return False
        if self.name in ("rbf", "laplacian") or (self.name == "poly" and int(self.degree) % 2 == 0):
            return True
        if self.name in ("poly", "sigmoid") and self.coef0 < 0:
            return False
        return None

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
        """Plain Python values (a NumPy float, such as a gamma resolved from ``"scale"``,
        as a float): what JSON writes and what messages show as numbers."""
        return {k: (int(v) if k == "degree" else float(v) if isinstance(v, np.floating) else v)
                for k, v in asdict(self).items()}

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
            elif hasattr(X, "compute"):  # a dask array: reduced where its blocks are
                from muflow.dask.block_stats import dask_variance
                var = dask_variance(X)
            else:
                var = np.asarray(X).var()
            return 1.0 / (n_features * var) if var != 0 else 1.0
        if gamma == "auto":
            return 1.0 / n_features
        raise MuflowInputError(f"gamma must be 'scale', 'auto' or a number >= 0, got {gamma!r}")
    return check_number(gamma, "gamma", low=0, hint="give 'scale', 'auto' or a finite number >= 0")


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
    X : array-like or sparse matrix of shape (n_samples, n_features), or None
        The training data: ``"scale"`` and ``"auto"`` are resolved on it by
        :func:`resolve_gamma` (scikit-learn's rule). None: no data yet (a configuration
        checked before any data are read); gamma is then left at 1.0, a kernel only for
        what its setting says without data (:meth:`Kernel.nonnegative_without_data`).
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
        params["gamma"] = 1.0 if X is None else resolve_gamma(setting.get("gamma", "scale"), X)
    if "degree" in reads:
        degree = setting.get("degree", 3)
        if isinstance(degree, bool) or not isinstance(degree, (int, float, np.integer, np.floating)) \
                or degree != int(degree):  # 2.5 was truncated to 2
            raise MuflowInputError(f"degree must be a non-negative integer, got {degree!r}")
        params["degree"] = int(degree)
    if "coef0" in reads:
        params["coef0"] = check_number(setting.get("coef0", 0.0), "coef0")
    offset = 1.0 if intercept == "regularized" else 0.0
    return Kernel(name, offset=offset, **params)
