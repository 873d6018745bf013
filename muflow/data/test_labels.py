"""A test set's labels against the classes a model was fitted on.

A test label that is none of the classes is a class the model cannot predict: its rows
count as errors in the test accuracy, taken over every row (as ``predict`` and the run's
``metrics.json`` count them), and the caller says so. Labels of another kind than the
classes (text against numbers) are refused in words: scikit-learn's scoring fails on them
with "Mix of label input types".
"""

from __future__ import annotations

import numpy as np

from muflow.data.files import label_text
from muflow.exceptions import MuflowInputError


def unseen_classes(y_test, classes, *, test: str = "the test set",
                   training: str = "the training data") -> dict:
    """``{label text: rows}`` of the labels of ``y_test`` that are none of ``classes``;
    ``test`` and ``training`` name the two sides in the message refusing labels of
    another kind."""
    y_test, classes = np.asarray(y_test), np.asarray(classes)
    if _is_text(y_test) != _is_text(classes):
        raise MuflowInputError(
            f"{test}'s labels are {_kind(y_test)} ({_examples(y_test)}) and {training}'s are "
            f"{_kind(classes)} ({_examples(classes)}); give test labels of the training "
            "labels' kind")
    unseen, rows = np.unique(y_test[~np.isin(y_test, classes)], return_counts=True)
    return {label_text(c): int(n) for c, n in zip(unseen, rows)}


def unseen_classes_note(unseen: dict, training: str = "the training split") -> str:
    """One line naming the test set's classes that ``training`` lacks and their rows
    (:func:`unseen_classes`): the model cannot predict them, so the test accuracy, taken
    over every row, counts them as errors."""
    listed = ", ".join(f"{label} ({rows} row{'' if rows == 1 else 's'})"
                       for label, rows in unseen.items())
    return (f"the test set holds classes {training} does not: {listed}; the model "
            "cannot predict them, and their rows count as errors in the test accuracy")


def _is_text(labels: np.ndarray) -> bool:
    if labels.dtype.kind in "US":
        return True
    return labels.dtype.kind == "O" and any(isinstance(v, str) for v in labels.ravel()[:1000])


def _kind(labels: np.ndarray) -> str:
    return "text" if _is_text(labels) else "numbers"


def _examples(labels: np.ndarray) -> str:
    shown = [label_text(c) for c in np.unique(labels.astype(str) if _is_text(labels) else labels)[:3]]
    return ", ".join(shown) + (", ..." if len(np.unique(labels)) > 3 else "")
