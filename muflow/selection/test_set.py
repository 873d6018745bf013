"""The sweep's test set (``X_test``, ``y_test``): read as X was, and scored.

Its columns are X's, picked by name where both are DataFrames with named columns (as
``SVC`` reads a frame at predict), else by position; the best model's accuracy is taken
over every row, a label that is none of the classes counted as an error, warned about and
listed, as the run's ``metrics.json`` lists it (:mod:`muflow.data.test_labels`).
"""

from __future__ import annotations

import warnings

import numpy as np

from muflow.data.test_labels import unseen_classes_note
from muflow.exceptions import MuflowInputError


def columns_of(X_test, names):
    """X_test with X's columns in X's order, picked by name where both are DataFrames with
    named columns (``names``: X's, None where X has none): a test frame whose columns are
    in another order is read as X was; X_test as it is otherwise (columns by position,
    their number checked by the caller); one lacking a column of X is refused naming it
    (:func:`muflow.data.columns.matched_names`)."""
    from sklearn.utils.validation import _get_feature_names

    from muflow.data.columns import matched_names

    test_names = _get_feature_names(X_test)
    picked = matched_names(names, test_names, lacking="X_test", after=" of X",
                           fix="give a test set with X's columns (in any order)",
                           error=MuflowInputError)
    if picked is None or picked == list(test_names):
        return X_test
    return X_test[picked]


def scored_test_set(model, X_test, y_test, unseen: dict, best: dict) -> dict:
    """``test_metrics.json``: the best configuration (``best``), the model's accuracy on
    every row of the test set and its classes the model was not fitted on (``unseen``,
    :func:`muflow.data.test_labels.unseen_classes`, found when the test set was checked;
    warned about here: their rows count as errors)."""
    if unseen:
        warnings.warn(unseen_classes_note(unseen, training="the training data"), UserWarning,
                      stacklevel=4)
    return {"accuracy": float(np.mean(model.predict(X_test) == np.asarray(y_test))),
            "n_samples": int(X_test.shape[0]), "configuration": best, "unseen_classes": unseen}
