"""Statistics of a dask array reduced where its blocks are, one small result a block, for
callers that must not import the Dask side's machinery (:func:`muflow.kernels.resolve_gamma`
resolves gamma's ``"scale"`` on a dask X with :func:`dask_variance`). Imports nothing of
muflow, and Dask only through the array it is given."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def dask_variance(X) -> float:
    """The variance of all values of a dask array (gamma's ``"scale"``), reduced where its
    blocks are: dask's own for dense chunks; for sparse chunks, which dask cannot reduce, as
    :func:`muflow.kernels.resolve_gamma` takes a CSR matrix's, the mean of the squares less
    the squared mean, from each block's sum and sum of squares."""
    if not sp.issparse(X._meta):
        return float(X.var().compute())
    sums = X.map_blocks(_block_sums, chunks=(1, 2), dtype=np.float64,
                        meta=np.empty((0, 0))).compute().reshape(-1, 2).sum(axis=0)
    size = float(X.shape[0]) * float(X.shape[1])
    return float(sums[1] / size - (sums[0] / size) ** 2)


def _block_sums(block) -> np.ndarray:
    """One task of :func:`dask_variance`: a block's sum and sum of squares, as a 1 x 2 array."""
    values = block.data if sp.issparse(block) else np.asarray(block)
    return np.array([[values.sum(), np.square(values).sum()]], dtype=np.float64)


__all__ = ["dask_variance"]
