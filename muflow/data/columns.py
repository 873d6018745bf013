"""How a table's columns are read: whether a CSV file's first line is a header, which
columns are the label and the features, and which columns of a test or prediction set are
the training data's (:func:`matched_names`).

One rule for every reader (the file loader of :mod:`muflow.data.files`, the layout of
:mod:`muflow.data.tabular` that the in-process and the workers' reads follow), so a file
gives the same rows and columns whether it is read whole, by a glob, in a list or on the
workers. Standard library only.
"""

from __future__ import annotations

import csv

from muflow.exceptions import DataFileError

#: What a CSV reader says of a file that is not text.
NOT_TEXT = "not a text file, so not CSV; for another format give --format (svmlight, npz, parquet)"

#: Names of a leading column of sample ids (any case): never a feature unless named in
#: ``feature_columns``. The empty name and "Unnamed: 0" are the row index pandas'
#: ``DataFrame.to_csv`` writes first (the row number as a feature would follow the file's
#: order).
ID_COLUMNS = ("id", "sample", "sample_id", "", "unnamed: 0")

#: Columns pandas adds to a Parquet file for a DataFrame's index, wherever they are.
INDEX_COLUMNS = ("__index_level_0__",)


#: Where a source without column names keeps its labels.
UNNAMED_LABELS = {"npz": "its array 'y'", "svmlight": "each line's first number",
                  "zarr": "its array 'y'"}


def check_no_columns_chosen(what: str, kind: str, label_column, feature_columns, where: str,
                            fix: str = "") -> None:
    """Refuse ``feature_columns`` or a ``label_column`` on a source whose columns have no
    names (an npz or svmlight file, a zarr group: ``kind`` in :data:`UNNAMED_LABELS`;
    ``what`` names it in the message): they would be ignored, and the run would go on with
    other columns than asked for. ``label_column=False`` (no labels) is taken. ``fix``:
    more to say after "drop feature_columns"."""
    if feature_columns is not None:
        raise DataFileError(f"{where}: {what} no column names, so feature_columns cannot choose "
                            f"among them; drop feature_columns and write X with the features to "
                            f"use alone{fix}")
    if label_column is not None and label_column is not False:
        raise DataFileError(f"{where}: {what} no column names, so label_column cannot choose "
                            "among them; drop label_column (--label-column): the labels are "
                            f"{UNNAMED_LABELS[kind]}")


def is_number(text: str) -> bool:
    """Whether a cell's text is a number (``float`` reads it)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def is_header(first: list, second: list | None, label_column=None) -> bool:
    """Whether the first line of a CSV file (its cells ``first``) names the columns.

    It does when it holds the label column's name (``label_column`` a name, not an index),
    or when one of its cells is text where the second line (``second``) holds a number in
    that column: a name above a value. A line of data whose label is text (``0.02,...,R``)
    is data: its text cell has text below it too, whichever column the label is in. An
    empty cell is no name (a missing value). A file of one line (``second`` None) is a
    header when it holds text and no number. A header of numbers above numbers cannot be
    told from data and is read as data, but for pandas' default column names
    (:func:`is_pandas_default_header`).
    """
    if (isinstance(label_column, str) and not label_column.lstrip("-").isdigit()
            and label_column in first):
        return True
    if is_pandas_default_header(first):
        return True
    if second is None:
        return any(first) and not any(is_number(c) for c in first)
    return any(a and not is_number(a) and is_number(b) for a, b in zip(first, second))


def is_pandas_default_header(first: list) -> bool:
    """Whether a first line is exactly ``0,1,...,k-1`` (after an empty cell for the index):
    the names ``pandas.DataFrame(X).to_csv()`` writes for a frame without column names. Read
    as data, it would be one more sample, its label a class of its own."""
    names = first[1:] if first and first[0] == "" else first
    return len(names) >= 2 and names == [str(j) for j in range(len(names))]


def first_lines(fh, count: int = 2) -> list:
    """The first ``count`` lines of an open text file that hold more than whitespace (the
    readers skip blank lines), fewer at the end of the file."""
    lines = []
    while len(lines) < count:
        line = fh.readline()
        if not line:
            break
        if line.strip():
            lines.append(line)
    return lines


def delimiter(line: str):
    """A CSV file's delimiter from its first line: "," when the line holds a comma, else
    None (whitespace separated)."""
    return "," if "," in line else None


def cells(line: str, delimiter=",") -> list:
    """A line's cells, stripped: split at ``delimiter`` (quotes as CSV has them), or at
    whitespace when None."""
    found = line.split() if delimiter is None else next(csv.reader([line], delimiter=delimiter), [])
    return [cell.strip() for cell in found]


def choose_columns(schema, label_column, feature_columns, where: str):
    """``(label, features)`` from ``schema`` (``[(name, type text, numeric)]``): the label
    by name or 0-based index (default the last column; ``label_column=False``: none, the
    label is None), the features as given (each must be there and numeric) or every
    numeric column but the label and a leading sample id (:data:`ID_COLUMNS`)."""
    names = [s[0] for s in schema]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # a column chosen by name would be either of them
        raise DataFileError(f"{where}: the columns {names_text(repeated)} are named more than "
                            "once; give every column its own name")
    if label_column is False:  # no label column: every numeric column is a feature
        label = None
    elif label_column is None:
        label = names[-1]
    elif isinstance(label_column, int) or str(label_column).lstrip("-").isdigit():
        index = int(label_column)
        if not -len(names) <= index < len(names):
            raise DataFileError(f"{where}: label_column {index} is out of range; the data have "
                                f"{len(names)} columns")
        label = names[index]
    elif label_column in names:
        label = label_column
    else:
        raise DataFileError(f"{where}: no label column {label_column!r}; the columns are "
                            f"{names_text(names)}; set label_column")
    numeric = {s[0]: s[2] for s in schema}
    types = {s[0]: s[1] for s in schema}
    if feature_columns is None:
        features = tuple(n for j, n in enumerate(names) if n != label and numeric[n]
                         and not (j == 0 and n.strip().lower() in ID_COLUMNS)
                         and n not in INDEX_COLUMNS)
    else:
        features = tuple(str(c) for c in feature_columns)
        for name in features:
            if name not in numeric:
                raise DataFileError(f"{where}: no feature column {name!r}; the columns are "
                                    f"{names_text(names)}")
            if not numeric[name]:
                kind = f" ({types[name]})" if types[name] else ""
                raise DataFileError(f"{where}: feature column {name!r} is not numeric{kind}; drop "
                                    "it from feature_columns or encode it as numbers")
            if name == label:
                raise DataFileError(f"{where}: {name!r} is the label column and a feature column; "
                                    "drop it from feature_columns")
    if not features:
        raise DataFileError(f"{where}: no numeric feature column"
                            + (f" besides the label {label!r}" if label is not None else "")
                            + f"; the columns are {names_text(names)}")
    return label, features


def names_text(names) -> str:
    """Names for a message: the first 12, and how many in all."""
    names = list(names)
    shown = ", ".join(str(n) for n in names[:12])
    return shown + (f" ... ({len(names)} in all)" if len(names) > 12 else "")


def matched_names(trained, other, *, label=None, lacking: str, columns: str = "the columns",
                  after: str = "", fix: str, error: type) -> list | None:
    """The training data's column names to pick from another data set (a test or
    prediction set) whose columns are named ``other``: ``trained`` (the features' names)
    and then ``label`` where given, in the training order, so a set whose columns come in
    another order, among others, is read as the training data were. None where either
    side has no names (``trained`` or ``other`` None): the columns are matched by position
    and the caller compares their number.

    The one rule for the CLI's predict and sweep --test-data
    (:func:`muflow.commands._common.read_as_trained`), the run's ``data.test_path``
    (:func:`muflow.data.tabular.matched_test_source`) and the sweep's ``X_test``
    (:func:`muflow.selection.test_set.columns_of`). A training column the other set lacks
    is refused, the missing names listed in the training order, as ``error`` (each
    caller's exception class) with the caller's words:
    "{lacking} lacks {columns} <missing>{after}; {fix}" (``lacking`` names the other set,
    ``columns`` and ``after`` the training side, ``fix`` what to do)."""
    if trained is None or other is None:
        return None
    wanted = [*trained, *([label] if label is not None else [])]
    present = set(other)
    missing = [name for name in wanted if name not in present]
    if missing:
        raise error(f"{lacking} lacks {columns} {names_text(missing)}{after}; {fix}")
    return wanted
