"""The layout of a source's files, checked from their metadata before any data are read:
which columns are the label and the features, whether every file has the same schema,
whether a file is empty.

Parquet files are checked from their footers (schema and row counts), CSV files from their
first two lines, a zarr store from its arrays' metadata. Every problem is a one-line
:class:`~muflow.exceptions.DataFileError` naming the file or the column and the fix.
The :class:`Layout` it returns is what both homes read by (:mod:`muflow.data.local` in this
process, :mod:`muflow.data.workers` on a cluster), so they read the same rows in the same
order: the files sorted by name, their rows as stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from muflow.data.columns import (NOT_TEXT, UNNAMED_LABELS, cells, check_no_columns_chosen,
                                  choose_columns, delimiter, first_lines, is_header, is_number,
                                  matched_names, names_text)
from muflow.data.source import DataSource, _within
from muflow.exceptions import DataFileError


@dataclass(frozen=True)
class Layout:
    """A checked source: its format, files (full URLs, sorted), label and feature columns
    (names; CSV without a header: ``"0"``, ``"1"``, ...), CSV header, rows per file (None
    where the metadata do not say), the fingerprint's file list, whether the one file
    is read whole by the file loader (npz, svmlight, a single local CSV file), every
    column's name in the files' order (Parquet and CSV), and for svmlight whether the
    feature indices were read 0-based (set once read: :func:`muflow.data.local.load_source`)."""

    format: str
    urls: tuple
    label: str | None
    features: tuple
    header: bool
    rows: tuple
    entries: tuple
    whole: bool = False
    columns: tuple = ()
    zero_based: bool | None = None

    @property
    def n_rows(self) -> int | None:
        return None if any(r is None for r in self.rows) else int(sum(self.rows))

    @property
    def feature_names(self) -> tuple | None:
        """The features' names where the files name their columns (Parquet, a CSV header):
        what a model keeps (``feature_names_in_``) and a prediction matches by name. None
        where the columns are known by position: npz, svmlight, zarr, a CSV file without a
        header, and names that are all whole numbers (pandas' default names 0, 1, ..., which
        scikit-learn does not keep as feature names either)."""
        if not self.header or all(name.isdigit() for name in self.features):
            return None
        return self.features


def inspect(source: DataSource, *, whole_files: bool = True) -> Layout:
    """List the source's files and check their layout (metadata only); bounded by the
    source's timeout. ``whole_files``: a single local CSV file is read whole by the file
    loader (in this process), which names the line of a bad row; False reads it by columns,
    as the workers do. Either way its columns are chosen here, from its first lines."""
    entries = source.files()
    urls = tuple(e["path"] for e in entries)
    kind = source.kind(list(urls))
    if kind in UNNAMED_LABELS:
        what = {"npz": "an npz file", "svmlight": "a svmlight file", "zarr": "a zarr group"}[kind]
        check_no_columns_chosen(f"{what} has", kind, source.label_column, source.feature_columns,
                                f"data path {source.label!r}", ", or write the data as Parquet "
                                "or CSV with named columns")
    if kind in ("npz", "svmlight"):
        if len(urls) != 1:
            raise DataFileError(f"data path {source.label!r}: {len(urls)} files; a {kind} source is "
                                "one file (Parquet, CSV or zarr can be several)")
        return Layout(kind, urls, None, (), False, (None,), tuple(entries), whole=True)
    if kind == "zarr":
        return _within(source.timeout, lambda: _zarr_layout(source, urls, entries),
                       f"data path {source.label!r}")
    schema, rows, header, whole = _table_schema(source, urls, kind, whole_files)
    label, features = choose_columns(schema, source.label_column, source.feature_columns,
                                     f"data path {source.label!r}")
    return Layout(kind, urls, label, features, header, tuple(rows), tuple(entries), whole,
                  columns=tuple(name for name, _, _ in schema))


def column_names(source: DataSource, *, whole_files: bool = True) -> tuple | None:
    """Every column's name of a Parquet or CSV source whose columns have names (a CSV file
    with a header), in the files' order; None for a source without names (npz, svmlight,
    zarr, CSV without a header), whose columns are known by position only. Metadata only,
    as :func:`inspect`; no column is chosen, so none is refused for being absent."""
    entries = source.files()
    urls = tuple(e["path"] for e in entries)
    kind = source.kind(list(urls))
    if kind not in ("parquet", "csv"):
        return None
    schema, _, header, _ = _table_schema(source, urls, kind, whole_files)
    return tuple(name for name, _, _ in schema) if header else None


def matched_test_source(source: DataSource, layout, *, training: str, whole_files: bool = True):
    """The test set's ``source`` with its columns matched to the training set's (``layout``,
    of the source named ``training``) by name where both have names (Parquet, CSV with a
    header): the training set's feature and label columns, in the training set's order, so
    a test set whose columns are in another order is read as trained on. One lacking a
    training column is refused naming it (:func:`muflow.data.columns.matched_names`, the
    rule the CLI's and the sweep's test sets follow too). Where either has no names (CSV
    without a header, npz, svmlight, zarr), the columns are matched by position (the
    caller compares their count); an npz, svmlight or zarr test set takes no column options
    (those name the training set's columns; it holds X and y), and an svmlight test set is
    read with the training file's indexing (``layout.zero_based``, as read) unless its own
    is given: guessed on its own, a zero-based test file that never uses feature 0 is read
    one-based, every column one to the left."""
    from dataclasses import replace

    if source.kind([f["path"] for f in source.files()]) in UNNAMED_LABELS:
        zero_based = source.zero_based
        if zero_based == "auto" and layout is not None and layout.zero_based is not None:
            zero_based = layout.zero_based
        return replace(source, label_column=None, feature_columns=None, zero_based=zero_based)
    if layout is None or not layout.header:
        return source
    # the label's name also tells the test file's header (muflow.data.columns.is_header)
    names = column_names(replace(source, label_column=layout.label), whole_files=whole_files)
    if matched_names(layout.features, names, label=layout.label,
                     lacking=f"data.test_path {source.label!r}",
                     after=f" of data.path {training!r}",
                     fix="give a test set with the training set's columns (in any order)",
                     error=DataFileError) is None:
        return source
    label = layout.label
    if label is not None and label.lstrip("-").isdigit():  # a name that reads as an index
        label = names.index(label)
    return replace(source, label_column=label, feature_columns=layout.features)


def _table_schema(source, urls, kind, whole_files):
    """``(schema, rows, header, whole)`` of a Parquet or CSV source: ``schema`` the first
    file's ``[(name, type text, numeric)]``, a column numeric when it is in every file,
    the files checked to share it and to hold rows."""
    whole = (whole_files and kind == "csv" and len(urls) == 1 and not source.is_url
             and _looks_plain(source))
    read = _parquet_schemas if kind == "parquet" else _csv_schemas
    schemas, rows, header = _within(source.timeout, lambda: read(source, urls, whole),
                                    f"data path {source.label!r}")
    first = schemas[0]
    for url, schema in zip(urls[1:], schemas[1:]):
        if [s[:2] for s in schema] != [s[:2] for s in first]:
            raise DataFileError(
                f"data path {source.label!r}: the files' schemas differ: {_name(urls[0])} has "
                f"{_schema_text(first)}, {_name(url)} has {_schema_text(schema)}; write every "
                "file with the same columns and types")
    for url, n in zip(urls, rows):
        if n == 0:
            raise DataFileError(f"data path {source.label!r}: {_name(url)} holds no rows (an empty "
                                "partition); remove it or write it with rows")
    # a column is numeric when it is in every file (CSV: by its first row)
    first = [(n, t, all(s[j][2] for s in schemas)) for j, (n, t, _) in enumerate(first)]
    return first, rows, header, whole


def _looks_plain(source) -> bool:
    """A single local CSV file named as such (no glob): read whole by the file loader
    (:mod:`muflow.data.files`), which names the line of a bad row."""
    return len(source.paths()) == 1 and not any(c in source.paths()[0] for c in "*?[")


def _parquet_schemas(source, urls, whole=False):
    import pyarrow.parquet as pq

    fs, roots = DataSource(path=tuple(urls), format="parquet",
                           storage_options=source.storage_options).filesystem()
    schemas, rows = [], []
    for url, root in zip(urls, roots):
        try:
            with fs.open(root, "rb") as fh:
                pf = pq.ParquetFile(fh)
                schema, n = pf.schema_arrow, pf.metadata.num_rows
        except Exception as exc:
            raise DataFileError(f"{url}: not a readable Parquet file ({type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:200]})") from None
        schemas.append([(f.name, str(f.type), _arrow_numeric(f.type)) for f in schema])
        rows.append(int(n))
    return schemas, rows, True


def _arrow_numeric(t) -> bool:
    import pyarrow.types as pt

    return bool(pt.is_integer(t) or pt.is_floating(t) or pt.is_boolean(t) or pt.is_decimal(t))


def _csv_schemas(source, urls, whole=False):
    """Each CSV file's columns from its first two lines: a header or not by
    :func:`muflow.data.columns.is_header` (else the columns are named by position),
    numeric when the first data line's cell is a number or empty (a missing value, refused
    as NaN once read). Comma separated, but for a file read ``whole`` by the file loader,
    which reads whitespace-separated files too."""
    fs, roots = DataSource(path=tuple(urls), format="csv",
                           storage_options=source.storage_options).filesystem()
    schemas, headers = [], []
    for url, root in zip(urls, roots):
        try:
            with fs.open(root, "rt") as fh:
                lines = first_lines(fh)
        except UnicodeDecodeError:
            raise DataFileError(f"{url}: {NOT_TEXT}") from None
        if not lines:
            raise DataFileError(f"data path {source.label!r}: {_name(url)} holds no rows (an empty "
                                "partition); remove it or write it with rows")
        sep = delimiter(lines[0])
        if sep is None and not whole:
            raise DataFileError(f"data path {source.label!r}: {_name(url)} is not comma separated; "
                                "CSV files read by a glob, a list, a directory or on the workers "
                                "must be: write them with commas")
        lines = [cells(line, sep) for line in lines]
        first, second = (lines + [None])[:2]
        header = is_header(first, second, source.label_column)
        if header and second is None:
            raise DataFileError(f"data path {source.label!r}: {_name(url)} has a header but no rows "
                                "(an empty partition); remove it or write it with rows")
        data = second if header else first
        names = first if header else [str(j) for j in range(len(first))]
        schemas.append([(n, "", j < len(data) and (not data[j] or is_number(data[j])))
                        for j, n in enumerate(names)])
        headers.append(header)
    if len(set(headers)) > 1:
        raise DataFileError(f"data path {source.label!r}: some CSV files have a header row and "
                            "some do not; write them alike")
    return schemas, [None] * len(urls), headers[0]


def _zarr_layout(source, urls, entries):
    import numpy as np
    import zarr

    root = source.paths()[0]
    try:
        group = zarr.open_group(root, mode="r", storage_options=source.options() or None) \
            if "://" in root else zarr.open_group(root, mode="r")
        X, y = group["X"], group["y"]
    except KeyError as exc:
        raise DataFileError(f"data path {source.label!r}: a zarr data set is a group with arrays "
                            f"'X' (n_samples x n_features) and 'y'; missing {exc}") from None
    except Exception as exc:
        raise DataFileError(f"data path {source.label!r}: not a readable zarr group "
                            f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
    if len(X.shape) != 2 or len(y.shape) != 1 or X.shape[0] != y.shape[0]:
        raise DataFileError(f"data path {source.label!r}: X has shape {X.shape} and y {y.shape}; "
                            "X must be 2-d with one row per label")
    if not np.issubdtype(X.dtype, np.number) and X.dtype != bool:
        raise DataFileError(f"data path {source.label!r}: X is not numeric ({X.dtype})")
    if X.shape[0] == 0:
        raise DataFileError(f"data path {source.label!r}: X holds no rows")
    return Layout("zarr", tuple(urls), None, tuple(str(j) for j in range(X.shape[1])), False,
                  (int(X.shape[0]),), tuple(entries))


def _name(url: str) -> str:
    return PurePosixPath(url).name


def _schema_text(schema) -> str:
    return "(" + names_text(f"{n}: {t}" if t else n for n, t, _ in schema) + ")"
