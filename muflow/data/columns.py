"""How a table's columns are read: whether a CSV file's first line is a header.

One rule for every reader (the file loader of :mod:`muflow.data.files`, the layout of
:mod:`muflow.data.tabular` that the in-process and the workers' reads follow), so a file
gives the same rows whether it is read whole, by a glob, in a list or on the workers.
Standard library only.
"""

from __future__ import annotations

import csv


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
    told from data and is read as data.
    """
    if (isinstance(label_column, str) and not label_column.lstrip("-").isdigit()
            and label_column in first):
        return True
    if second is None:
        return any(first) and not any(is_number(c) for c in first)
    return any(a and not is_number(a) and is_number(b) for a, b in zip(first, second))


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


def cells(line: str, delimiter=",") -> list:
    """A line's cells, stripped: split at ``delimiter`` (quotes as CSV has them), or at
    whitespace when None."""
    found = line.split() if delimiter is None else next(csv.reader([line], delimiter=delimiter), [])
    return [cell.strip() for cell in found]
