"""K held in this process: the "stored" path of :func:`muflow.backends.gram_operator`.

One entry, :func:`held_operator`, makes the :class:`~muflow.operators.DenseGram` of a
stored plan: a precomputed kernel's K as given, K read from the Gram store cache in
``cache_dir`` (float64; built there first when it holds none), or K built on threads
(:func:`muflow.inmemory.numpy_gram`, into ``out`` when it fits). Each K is checked against
the available memory before it is allocated (:func:`muflow.memory.check_gram_fits`).
"""

from __future__ import annotations

import numpy as np

from muflow.gram.build import ensure_gram
from muflow.gram.store import StoreCorruptError
from muflow.memory import check_gram_fits
from muflow.operators import DenseGram


def held_operator(X, kernel, dtype="auto", *, cache_dir=None, out=None,
                  n_threads: int | None = None, storage_options=None) -> DenseGram:
    """The operator of K(X, X) held in this process.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
        Or K itself, of shape (n_samples, n_samples), for a precomputed ``kernel``.
    kernel : muflow.kernels.Kernel
    dtype : {"auto", "float64", "float32"}, default="auto"
        K's dtype when it is built here (:func:`muflow.inmemory.gram_dtype`); K read from
        the store cache is float64.
    cache_dir : str, optional
        Read K from the Gram store cache in this directory (:func:`cached_gram`).
    out : ndarray of shape (n_samples, n_samples), optional
        An array to build K into when its shape and dtype fit (a sweep reuses one buffer
        for every kernel setting); ignored otherwise, and with ``cache_dir``.
    n_threads : int, optional
        Threads that build K (:func:`muflow.inmemory.numpy_gram`).
    storage_options : dict, optional
        Of the file system of ``cache_dir`` when it is an fsspec URL (:func:`cached_gram`).
    """
    if kernel.name == "precomputed":
        K = kernel.block(X)
    elif cache_dir is not None:
        K = cached_gram(X, kernel, cache_dir, storage_options)
    else:
        from muflow.inmemory import gram_dtype, numpy_gram

        n = X.shape[0]
        dtype = gram_dtype(n, dtype)
        fits = out is not None and out.shape == (n, n) and out.dtype == dtype
        K = numpy_gram(X, kernel, dtype=dtype, out=out if fits else None, n_threads=n_threads)
    return DenseGram(K)


def cached_gram(X, kernel, cache_dir, storage_options=None) -> np.ndarray:
    """K(X, X) in float64 from the Gram store cache in ``cache_dir`` (:func:`ensure_gram`:
    built there first when it holds none; an fsspec URL opened with ``storage_options``),
    refused before anything is built when it cannot fit in memory; a damaged tile is
    recomputed from X and the store read again."""
    check_gram_fits(X.shape[0], np.float64)
    for deep_check in (False, True):
        store, _ = ensure_gram(X, kernel, cache_dir=cache_dir, dtype="float64", deep_check=deep_check,
                               storage_options=storage_options)
        try:
            return np.asarray(store.read(), dtype=np.float64)
        except StoreCorruptError:  # a damaged tile, with X at hand: recompute it (once)
            if deep_check:
                raise
