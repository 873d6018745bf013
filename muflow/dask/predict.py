"""Prediction on Dask collections: lazy, one block of rows per task, on the workers; the
tests for a Dask collection that the rest of muflow asks without importing Dask
(:func:`is_dask_collection`, :func:`is_dask_array`); :func:`map_rows`, a row-wise function
over a Dask array's blocks.

:class:`muflow.SVC`'s ``predict``, ``decision_function`` and ``predict_proba`` given a
``dask.array.Array`` or a ``dask.dataframe.DataFrame`` return a lazy ``dask.array.Array``
built by :func:`predict_lazy` (``predict_log_proba`` is ``np.log`` of the lazy
``predict_proba``, lazy too):

- The input is checked when the method is called, from its metadata only (the number of
  columns, a DataFrame's column names, sparse chunks against a dense fit), with the errors
  and warnings a NumPy input gets (scikit-learn's ``validate_data``); nothing is computed.
- The model's prediction state (:meth:`muflow.SVC._prediction_state`: parameters, kernel,
  support vectors, coefficients, intercepts, classes, Platt's sigmoids; no fit diagnostics,
  no client) enters the graph once, as one key (``dask.delayed(state, pure=True)``) that
  every block's task depends on. The tasks themselves hold only a method name: each worker
  receives the state once, as a dependency, however many blocks it computes.
- A task runs the estimator's own NumPy method on one block of whole rows (column chunks
  are merged first; a DataFrame partition becomes the NumPy array of its columns, which
  are the fitted features in the fitted order). A block's result is therefore exactly the
  in-memory result for those rows, ``classes_`` mapping included.

Per-block NumPy work (:func:`predict_block`) is kept apart from graph building
(:func:`predict_lazy`). Dask is imported only when the input is a Dask collection:
predicting NumPy or SciPy input needs neither Dask nor this module.

Notes
-----
Memory: a task holds its block of X, its output and at most
:data:`muflow.prediction.PREDICT_BLOCK_BYTES` of kernel values (the in-memory method evaluates
K(block, support vectors) in row blocks itself); a worker holds one copy of the prediction
state. The client holds the graph (a few hundred bytes per block) and, on ``compute()``,
only the result: X is generated or read on the workers and never passes through it.
A DataFrame's partition lengths are unknown until computed, so the result's row chunks
are then unknown (``nan``), as those of ``DataFrame.to_dask_array()``.
"""

from __future__ import annotations

import sys

import numpy as np
import scipy.sparse as sp

from muflow.dask.worker_memory import reuse_freed_memory
from muflow.exceptions import MuflowInputError

#: The estimator methods that run blockwise on Dask input.
METHODS = ("decision_function", "predict", "predict_proba")


def is_dask_collection(X) -> bool:
    """Whether X is a Dask array, DataFrame or Series, importing nothing for other input."""
    if not type(X).__module__.startswith("dask"):
        return False
    da, dd = sys.modules.get("dask.array"), sys.modules.get("dask.dataframe")
    return ((da is not None and isinstance(X, da.Array))
            or (dd is not None and isinstance(X, (dd.DataFrame, dd.Series))))


def is_dask_array(X) -> bool:
    """True for a ``dask.array.Array`` (without importing dask when it is not loaded)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(X, da.Array)


def map_rows(fn, X, *, n_outputs=None, dtype=np.float64):
    """Apply a row-wise function to every row block of a Dask array, lazily.

    For ``predict`` / ``decision_function`` of a fitted model: ``fn`` (a bound method of
    the model, so only the model with its support vectors travels with the graph) sees one
    NumPy block of rows at a time. Column chunks are merged first (a kernel needs whole
    rows).

    Parameters
    ----------
    fn : callable
        ``fn(block) -> ndarray`` of shape (len(block),) or (len(block), n_outputs).
    X : dask.array.Array of shape (n_samples, n_features)
    n_outputs : int, optional
        Columns of ``fn``'s result; None for a 1-D result.
    dtype : dtype of the result

    Returns
    -------
    dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
    """
    if X.ndim != 2:
        raise MuflowInputError(f"X must be 2-D (n_samples, n_features), got {X.ndim} dimensions")
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    if n_outputs is None:
        return X.map_blocks(fn, drop_axis=1, dtype=dtype, meta=np.empty((0,), dtype=dtype))
    return X.map_blocks(fn, chunks=(X.chunks[0], (int(n_outputs),)), dtype=dtype,
                        meta=np.empty((0, 0), dtype=dtype))


def predict_block(block, state, method):
    """One task: ``state.<method>(block)`` on a NumPy block of rows (the in-memory path), its
    temporaries reusing the memory the worker frees
    (:func:`muflow.dask.worker_memory.reuse_freed_memory`). A block of no rows (an empty
    chunk, a filtered dataframe's empty partition), which the in-memory method refuses as
    it refuses any empty X, gives an empty result of the method's dtype and columns."""
    if block.shape[0] == 0:
        n_out = output_columns(state, method)
        return np.empty((0,) if n_out is None else (0, n_out), dtype=output_dtype(state, method))
    reuse_freed_memory()
    return getattr(state, method)(block)


def output_dtype(model, method):
    """dtype of ``method``'s result: the classes' for ``predict``, float64 otherwise."""
    return model.classes_.dtype if method == "predict" else np.dtype(np.float64)


def output_columns(model, method):
    """Columns of ``method``'s result, None for a 1-D result (as the NumPy path gives)."""
    k = len(model.classes_)
    if method == "predict":
        return None
    if method == "predict_proba":
        return k
    if k == 2:
        return None
    if model._ovo and model.decision_function_shape == "ovo":
        return k * (k - 1) // 2
    return k


def check_input(model, X):
    """Refuse Dask input the fitted model cannot take, from its metadata (nothing computed).

    The same errors as NumPy input: scikit-learn's for the number of features and a
    DataFrame's column names (and its warning when only one side has names), muflow's for a
    precomputed kernel of the wrong width and for sparse chunks against a dense fit.
    """
    from sklearn.utils.validation import validate_data

    dd = sys.modules.get("dask.dataframe")
    if dd is not None and isinstance(X, dd.Series):
        raise MuflowInputError(
            "X must be 2-D (n_samples, n_features), got a dask Series; pass series.to_frame()")
    if X.ndim != 2:
        raise MuflowInputError(
            f"X must be 2-D (n_samples, n_features), got a dask array of {X.ndim} dimension(s) "
            f"and shape {X.shape}; reshape it, e.g. X.reshape(-1, 1) for a single feature")
    if not np.isfinite(X.shape[1]):
        raise MuflowInputError(
            "the number of columns of the dask array is unknown; call X.compute_chunk_sizes() "
            "first")
    if callable(model.kernel):
        return
    model._check_support_layout()
    if model.kernel == "precomputed":
        model._check_precomputed_shape(X.shape)
        return
    meta = X._meta  # an empty pandas DataFrame (names and dtypes) or an empty chunk
    validate_data(model, meta if hasattr(meta, "columns") else X, reset=False,
                  skip_check_array=True)
    if sp.issparse(meta) and not getattr(model, "_sparse", True):
        raise ValueError(
            f"cannot use sparse input in {type(model).__name__!r} trained on dense data; "
            "pass X.map_blocks(lambda b: b.toarray()) or fit on sparse data")


def predict_lazy(model, method, X):
    """``model.<method>(X)`` for a Dask array or DataFrame, as a lazy Dask array.

    Parameters
    ----------
    model : SVC
        A fitted estimator (its ``check_is_fitted`` and parameter checks already passed).
    method : {"decision_function", "predict", "predict_proba"}
    X : dask.array.Array or dask.dataframe.DataFrame of shape (n_samples, n_features)
        Rows in any row chunks; the columns of a DataFrame are the fitted features.

    Returns
    -------
    dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
        One chunk per row chunk (partition) of X, dtype and columns as the NumPy path gives.
    """
    import dask

    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    check_input(model, X)
    if not hasattr(X, "chunks"):  # a DataFrame: each partition as a NumPy array
        X = X.to_dask_array()
    if X.numblocks[1] != 1:  # a kernel needs whole rows
        X = X.rechunk({1: -1})
    state = dask.delayed(model._prediction_state(), pure=True)
    n_out = output_columns(model, method)
    dtype = output_dtype(model, method)
    if n_out is None:
        return X.map_blocks(predict_block, state, method, drop_axis=1, dtype=dtype,
                            meta=np.empty((0,), dtype=dtype))
    return X.map_blocks(predict_block, state, method, chunks=(X.chunks[0], (n_out,)),
                        dtype=dtype, meta=np.empty((0, 0), dtype=dtype))
