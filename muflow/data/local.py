"""A source read whole into this process: ``(X, y)`` as NumPy arrays (CSR for svmlight).

The home of the embedded default and of every run without a cluster: a Parquet file of a
few MB is the common case. The files are those :func:`muflow.data.tabular.inspect` listed,
in its order, so the rows are the rows the workers read (:mod:`muflow.data.workers`).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import PurePosixPath

import numpy as np

from muflow.data.files import _labels, _missing, check_finite, load_data, read_svmlight
from muflow.data.source import DataSource
from muflow.data.tabular import Layout, inspect
from muflow.exceptions import DataFileError, MuflowInputError


def load_source(source: DataSource):
    """``(X, y, layout)`` of ``source``, validated: numeric features, finite values, one
    label per row; for svmlight, the layout says how the feature indices were read
    (``layout.zero_based``)."""
    layout = inspect(source)
    where = f"data path {source.label!r}"
    X, y, zero_based = _read(source, layout)
    if zero_based is not None:
        layout = replace(layout, zero_based=zero_based)
    if y is not None:  # label_column=False: features alone
        check_labels(y, where)
    try:
        check_finite(X)
    except MuflowInputError as exc:
        raise DataFileError(f"{where}: {exc}") from None
    return X, y, layout


def _read(source: DataSource, layout: Layout):
    """``(X, y, zero_based)``: ``zero_based`` how an svmlight file's indices were read,
    None for the other formats."""
    fs, roots = DataSource(path=layout.urls, storage_options=source.storage_options).filesystem()
    if layout.whole:  # one file, by the file loader
        return _whole_file(source, layout, fs, roots[0])
    if layout.format == "zarr":
        import zarr

        root = source.paths()[0]
        group = (zarr.open_group(root, mode="r", storage_options=source.options() or None)
                 if "://" in root else zarr.open_group(root, mode="r"))
        X = np.asarray(group["X"][:], dtype=np.float64)
        return X, None if source.label_column is False else _labels(np.asarray(group["y"][:])), None
    columns = [*layout.features] + ([layout.label] if layout.label is not None else [])
    parts = [_read_table(fs, root, layout, columns) for root in roots]
    import pandas as pd

    frame = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    y = None if layout.label is None else _labels(frame[layout.label].to_numpy())
    return features_of(frame, layout, source.label), y, None


def _read_table(fs, root, layout, columns):
    with fs.open(root, "rb") as fh:
        if layout.format == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(fh, columns=columns).to_pandas()
        import pandas as pd

        frame = pd.read_csv(fh, header=0 if layout.header else None, skipinitialspace=True)
    frame.columns = [str(c) for c in frame.columns]
    return frame[columns]


def features_of(frame, layout: Layout, label: str) -> np.ndarray:
    """The feature columns of a pandas frame as float64, refusing a column that is not
    numeric (a CSV cell that is not a number)."""
    for name in layout.features:
        if frame[name].dtype.kind not in "biuf":
            raise DataFileError(f"data path {label!r}: feature column {name!r} is not numeric "
                                f"({frame[name].dtype}); fix its values or leave it out of "
                                "feature_columns")
    return np.ascontiguousarray(frame[list(layout.features)].to_numpy(dtype=np.float64))


def _whole_file(source, layout, fs, root):
    """A single npz, svmlight or CSV file, by the file loaders (a CSV file's features: those
    the layout chose), as :func:`_read` returns it; a remote one is copied to a temporary
    local file first."""
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        return _load_file(root, source, layout)
    fd, tmp = tempfile.mkstemp(suffix=PurePosixPath(root).suffix)
    os.close(fd)
    try:
        fs.get_file(root, tmp)
        return _load_file(tmp, source, layout)
    finally:
        os.unlink(tmp)


def _load_file(path, source, layout):
    if layout.format == "svmlight":
        return read_svmlight(path, n_features=source.n_features, zero_based=source.zero_based)
    X, y = load_data(path, label_column=source.label_column, fmt=layout.format,
                     feature_columns=layout.features if layout.format == "csv" else None)
    return X, y, None


def check_labels(y, where: str) -> None:
    """Labels that are numbers must be finite (a missing label reads as NaN)."""
    y = np.asarray(y)
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        bad = int(np.size(y) - np.isfinite(y).sum())
        raise DataFileError(f"{where}: the label column holds {bad} NaN or infinite value(s); drop "
                            "those rows")
    if y.dtype.kind in "OU":
        bad = sum(_missing(v) for v in y.tolist())
        if bad:
            raise DataFileError(f"{where}: the label column holds {bad} missing value(s); fill "
                                "them in or drop those rows")
