"""The one rule that matches a test or prediction set's columns to the training data's
(:func:`muflow.data.columns.matched_names`), which the CLI's predict and sweep --test-data,
the run's ``data.test_path`` and the sweep's ``X_test`` all follow: by name where both sides
have names, in the training order, among other columns in any order; a missing training
column refused with the missing names in the training order; else by position (None)."""

from __future__ import annotations

import pytest

from muflow.data.columns import matched_names
from muflow.exceptions import DataFileError, MuflowInputError

WORDS = dict(lacking="X_test", after=" of X", fix="give a test set with X's columns",
             error=MuflowInputError)


def test_the_training_names_are_picked_in_the_training_order_among_others():
    assert matched_names(("a", "b", "c"), ["x", "c", "a", "b"], **WORDS) == ["a", "b", "c"]
    assert matched_names(("a", "b"), ("label", "b", "a"), label="label",
                         **WORDS) == ["a", "b", "label"]


def test_missing_training_columns_are_refused_in_the_training_order_in_the_callers_words():
    with pytest.raises(MuflowInputError) as raised:
        matched_names(["a", "b", "c", "d"], ["d", "b", "x"], **WORDS)
    assert str(raised.value) == "X_test lacks the columns a, c of X; give a test set with X's columns"
    with pytest.raises(DataFileError, match=r"^t.csv lacks the model's feature columns label "
                                            r"\(the model has a\); give data with those$"):
        matched_names(["a"], ["a"], label="label", lacking="t.csv",
                      columns="the model's feature columns", after=" (the model has a)",
                      fix="give data with those", error=DataFileError)


def test_without_names_on_either_side_the_columns_are_matched_by_position():
    assert matched_names(None, ["a", "b"], **WORDS) is None
    assert matched_names(["a", "b"], None, **WORDS) is None
    assert matched_names(None, None, label="label", **WORDS) is None
