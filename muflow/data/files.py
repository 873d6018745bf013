"""Data loaders (CSV, LIBSVM/svmlight text, .npz) and input validation.

Every loader returns ``(X, y)``: ``X`` a float64 array (CSR matrix for svmlight files) of
shape (n_samples, n_features) and ``y`` an array of labels of shape (n_samples,). A file
that is missing or does not parse raises :class:`~muflow.exceptions.DataFileError` naming
the file and, for text formats, the line.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from muflow.data.columns import (NOT_TEXT, cells, check_no_columns_chosen, choose_columns,
                                  delimiter, first_lines, is_header, is_number)
from muflow.exceptions import DataFileError, MuflowInputError

SVMLIGHT_SUFFIXES = (".svm", ".svmlight", ".libsvm")
FORMATS = ("csv", "svmlight", "npz")


def detect_format(path: Path, fmt: str | None = None) -> str:
    """The format of ``path``: ``fmt`` when given, else from the suffix (CSV by default)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise MuflowInputError(f"unknown data format {fmt!r}; choose one of {', '.join(FORMATS)}")
        return fmt
    suffix = path.suffix.lower()
    if suffix in SVMLIGHT_SUFFIXES or (suffix not in (".csv", ".txt") and _looks_like_svmlight(path)):
        return "svmlight"
    if suffix == ".npz":
        return "npz"
    return "csv"


def _looks_like_svmlight(path: Path) -> bool:
    """Whether a file named without a known suffix (libsvm's ``a8a``) begins with an
    svmlight line: a label, then ``index:value`` pairs."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 16).split()
    except OSError:
        return False
    return len(first) >= 2 and all(b":" in token for token in first[1:]) and b":" not in first[0]


def load_data(path, *, label_column=None, fmt: str | None = None, n_features: int | None = None,
              feature_columns=None, zero_based="auto"):
    """Load a labelled data set.

    Parameters
    ----------
    path : str or Path
    label_column : str, int or False, optional
        CSV only: the column that holds the labels, by header name or 0-based index.
        Default: the last column. False: the file has no labels (CSV, npz without y);
        y is then None. An npz or svmlight file has no column names (its labels are its
        array ``y``, each line's first number): giving one is an error.
    fmt : {"csv", "svmlight", "npz"}, optional
        Default: from the suffix (``.svm``, ``.svmlight``, ``.libsvm``: svmlight; ``.npz``;
        anything else: CSV).
    n_features : int, optional
        svmlight only: the number of features (a8a has 123).
    zero_based : bool or "auto", default="auto"
        svmlight only: whether the feature indices start at 0; "auto" guesses it from the
        file (:func:`read_svmlight`).
    feature_columns : sequence of str, optional
        CSV only: the columns of X, by header name (without a header: ``"0"``, ``"1"``,
        ...). Default: every numeric column but the label and a leading sample id
        (:func:`muflow.data.columns.choose_columns`). An npz or svmlight file has no
        column names: giving them is an error.

    Returns
    -------
    X : ndarray or CSR matrix of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
    """
    path = Path(path)
    if not path.exists():
        raise DataFileError(f"data file {str(path)!r} does not exist; check the path")
    if path.is_dir():
        raise DataFileError(f"{str(path)!r} is a directory; give a data file")
    kind = detect_format(path, fmt)
    if kind != "csv":
        check_no_columns_chosen(f"{kind} data have", kind, label_column, feature_columns, str(path))
    if kind == "svmlight":
        return read_svmlight(path, n_features=n_features, zero_based=zero_based)[:2]
    if kind == "npz":
        return _load_npz(path, labels=label_column is not False)
    try:
        return _load_csv(path, label_column, feature_columns)
    except UnicodeDecodeError:
        raise DataFileError(f"{path}: {NOT_TEXT}") from None


def _load_csv(path: Path, label_column, feature_columns=None):
    """A CSV (or whitespace-separated) file: every cell numeric goes through NumPy's C
    parser (:func:`_load_numeric_csv`, far faster than reading row by row); anything
    else (string labels, ragged or bad rows) through the row-by-row reader, which names the
    line of any problem."""
    fast = _load_numeric_csv(path, label_column, feature_columns)
    if fast is not None:
        return fast
    with open(path, newline="") as f:
        sep = delimiter(next(iter(first_lines(f, 1)), ""))
        f.seek(0)
        rows = []
        if sep is None:
            reader = (line.split() for line in f)
        else:
            reader = csv.reader(f, delimiter=sep)
        for row in reader:
            rows.append([cell.strip() for cell in row])
    rows = [(i + 1, r) for i, r in enumerate(rows) if r and any(cell for cell in r)]
    if not rows:
        raise DataFileError(f"{path}: the file holds no data rows")
    header = None
    first_line, first = rows[0]
    if is_header(first, rows[1][1] if len(rows) > 1 else None, label_column):
        header, rows = first, rows[1:]
    if not rows:
        raise DataFileError(f"{path}: the file has a header but no data rows")
    width = len(rows[0][1])
    numeric = [not c or is_number(c) for c in rows[0][1]]
    label_index, feature_index = _columns(path, header, numeric, label_column, feature_columns)
    X = np.empty((len(rows), len(feature_index)))
    labels = []
    for r, (line, row) in enumerate(rows):
        if len(row) != width:
            raise DataFileError(f"{path}, line {line}: {len(row)} fields where the first row has {width}")
        try:
            X[r] = [float(row[j]) for j in feature_index]
        except ValueError:
            bad = next(row[j] for j in feature_index if not is_number(row[j]))
            raise DataFileError(f"{path}, line {line}: {bad!r} is not a number") from None
        if label_index is None:
            continue
        if not row[label_index]:
            raise DataFileError(f"{path}, line {line}: the label is missing; fill it in or "
                                "drop the row")
        labels.append(row[label_index])
    return X, None if label_index is None else _labels(np.asarray(labels))


def _load_numeric_csv(path: Path, label_column, feature_columns=None):
    """``(X, y)`` of a file whose first line is data or a header and whose every other line
    holds the same number of numbers, parsed by ``np.loadtxt``; None for any other file (the
    row-by-row reader then loads it or names the line at fault)."""
    with open(path, newline="") as f:
        lines = first_lines(f)
    if not lines:
        return None
    sep = delimiter(lines[0])
    first, second = ([cells(line, sep) for line in lines] + [None])[:2]
    if not any(first):
        return None
    header = first if is_header(first, second, label_column) else None
    try:
        values = np.loadtxt(path, delimiter=sep, skiprows=0 if header is None else 1,
                            dtype=np.float64, comments=None, ndmin=2)
    except ValueError:
        return None
    if values.shape[0] == 0 or values.shape[1] != len(first):
        return None
    label_index, feature_index = _columns(path, header, [True] * values.shape[1], label_column,
                                          feature_columns)
    y = None if label_index is None else _labels(values[:, label_index])
    return np.ascontiguousarray(values[:, feature_index]), y


def _columns(path: Path, header, numeric: list, label_column, feature_columns):
    """``(label_index, feature_index)`` of a file whose first data row has
    ``len(numeric)`` cells (``numeric``: which are numbers or empty), chosen by
    :func:`muflow.data.columns.choose_columns` as for every other source."""
    width = len(numeric)
    if header is not None and len(header) != width:
        raise DataFileError(f"{path}: the header has {len(header)} columns and the first data "
                            f"row {width}; write them alike")
    names = header if header is not None else [str(j) for j in range(width)]
    label, features = choose_columns([(n, "", ok) for n, ok in zip(names, numeric)], label_column,
                                     feature_columns, str(path))
    return (None if label is None else names.index(label)), [names.index(n) for n in features]


def _labels(labels: np.ndarray) -> np.ndarray:
    """Labels as read: integers when every one is a whole number, floats when numeric, the
    strings otherwise."""
    if labels.dtype.kind == "O" and any(isinstance(v, (str, bytes)) for v in labels):
        # a pandas or Arrow column of strings; one with missing labels stays as it is, for
        # the caller's check (muflow.data.local.check_labels) to name them
        if any(_missing(v) for v in labels):
            return labels
        labels = labels.astype(str)
    if labels.dtype.kind in "US":
        if not all(is_number(v) for v in labels):
            return labels
        labels = labels.astype(np.float64)
    if np.all(labels == np.round(labels)):
        return labels.astype(np.int64)
    return labels


def label_text(label) -> str:
    """A class as a person writes it in a message: ``2``, ``-1.5``, ``'cat'`` (not
    ``np.int64(2)``, nor ``'2'`` for the integer class 2)."""
    value = label.item() if hasattr(label, "item") else label
    return repr(value) if isinstance(value, str) else str(value)


def _missing(value) -> bool:
    """Whether a label read from a table is missing (None, NaN, an empty text)."""
    return value is None or (isinstance(value, float) and value != value) or value == ""


def read_svmlight(path, *, n_features=None, zero_based="auto"):
    """``(X, y, zero_based)`` of an svmlight/LIBSVM file, and whether its feature indices
    were read as starting at 0.

    ``zero_based="auto"`` guesses as scikit-learn's ``load_svmlight_file`` does (1-based
    unless some row uses index 0): a guess per file, so a test file whose rows never use
    feature 0 would be read 1-based where its training file was 0-based, every feature
    one column to the left. Read a test file with the training file's ``zero_based``
    (``python -m muflow fit`` records it in the model). A file with an index beyond
    ``n_features`` is refused, naming its widest index.
    """
    from sklearn.datasets import load_svmlight_file

    path = Path(path)
    try:  # the indices as written; shifted below once the indexing is known
        X, y = load_svmlight_file(str(path), zero_based=True)
    except (ValueError, IndexError) as exc:
        line = _first_bad_svmlight_line(path)
        where = f", line {line}" if line else ""
        raise DataFileError(f"{path}{where}: not a valid svmlight/LIBSVM file ({exc})") from None
    X = sp.csr_matrix(X)
    lowest = int(X.indices.min()) if X.nnz else None
    if zero_based == "auto":
        zero_based = lowest is None or lowest == 0
    zero_based = bool(zero_based)
    width = X.shape[1] if X.nnz else 0
    if not zero_based:
        if lowest == 0:
            raise DataFileError(f"{path}: a row uses feature index 0, but the file is read "
                                "1-based (as its training file was); write its indices from 1")
        X = sp.csr_matrix((X.data, X.indices - 1, X.indptr), shape=(X.shape[0], max(width - 1, 1)))
        width = max(width - 1, 0)
    if n_features is not None:
        if width > n_features:
            raise DataFileError(
                f"{path} uses feature indices beyond n_features={n_features}: it holds {width} "
                f"features ({'0' if zero_based else '1'}-based indices); give a file of "
                f"{n_features} features")
        X.resize((X.shape[0], n_features))
    X.sort_indices()
    if np.all(y == np.round(y)):
        y = y.astype(np.int64)
    return X, y, zero_based


def _first_bad_svmlight_line(path: Path) -> int | None:
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            body = line.split("#", 1)[0].split()
            if not body:
                continue
            if not is_number(body[0]):
                return number
            for item in body[1:]:
                key, _, value = item.partition(":")
                if key == "qid":
                    continue
                if not key.isdigit() or not is_number(value):
                    return number
    return None


def _load_npz(path: Path, labels: bool = True):
    try:
        with np.load(path, allow_pickle=False) as data:
            if not labels:
                if "X" not in data.files:
                    raise DataFileError(f"{path}: an .npz data file must hold an array 'X'")
                return np.asarray(data["X"]), None
            missing = {"X", "y"} - set(data.files)
            if missing:
                raise DataFileError(
                    f"{path}: an .npz data file must hold arrays 'X' and 'y'; missing {', '.join(sorted(missing))}"
                )
            y = np.asarray(data["y"])
            # labels read as every other format reads them (1.0 is the class 1 of a CSV file)
            return np.asarray(data["X"]), (_labels(y) if y.dtype.kind in "fiuUSO" else y)
    except DataFileError:
        raise
    except Exception as exc:
        raise DataFileError(f"{path}: not a readable .npz file ({exc})") from None


def check_finite(X, name="X", *, before="fitting"):
    """Refuse NaN and infinity with a message that says how to fix it (``before``: what
    the caller was asked to do, "fitting" or "predicting")."""
    values = X.data if sp.issparse(X) else X
    if not np.all(np.isfinite(values)):
        bad = int(np.size(values) - np.isfinite(values).sum())
        raise MuflowInputError(
            f"{name} contains {bad} NaN or infinite value(s); impute or drop them "
            f"(e.g. sklearn.impute.SimpleImputer) before {before}"
        )


def check_labels_are_classes(y, *, labels: str, choose: str):
    """Refuse labels that are continuous numbers (a feature column taken for the labels),
    before a classifier or a stratified split meets them: the message names the column
    (``labels``: "the last column of data.csv") and the option that chooses another
    (``choose``: "--label-column"; None where the caller passed the labels themselves)."""
    from sklearn.utils.multiclass import type_of_target

    if type_of_target(np.asarray(y)) == "continuous":
        fix = ("give the class of each sample" if choose is None else
               f"choose the column of the classes with {choose} (a name or a 0-based index)")
        raise MuflowInputError(f"the labels ({labels}) are continuous numbers, not classes; {fix}")
