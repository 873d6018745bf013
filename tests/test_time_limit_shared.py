"""One time limit for everything a fit does (issue 38, item 1): forked children share its
"stopped" flag, and ``probability=True``'s calibration folds stop at it too."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import muflow
import muflow.model
import muflow.probability
from muflow.forking import forked_map
from muflow.time_limit import Deadline


def test_a_deadline_stopped_in_a_forked_child_is_stopped_in_the_parent():
    deadline = Deadline(0.0)
    assert not deadline.stopped
    assert forked_map(lambda k: deadline(k, None, None), 2, 2) == [True, True]
    assert deadline.stopped  # the children's stop, not a copy lost with them


def test_a_pickled_deadline_keeps_its_flag_to_itself():
    deadline = Deadline(60.0)
    deadline.stopped = True
    copy = pickle.loads(pickle.dumps(deadline))
    assert copy.stopped and copy.end == deadline.end
    copy.stopped = False
    assert deadline.stopped


def test_probability_folds_stop_at_the_time_limit(monkeypatch):
    """The clock runs out as the calibration starts: the model itself converged, its
    folds stop at their first check, and the fit says so."""
    calibrating = []
    real = muflow.probability.fit_platt

    def fit_platt(*args, **kwargs):
        calibrating.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(muflow.probability, "fit_platt", fit_platt)
    clock = lambda: 1e9 if calibrating else 0.0  # noqa: E731
    monkeypatch.setattr(muflow.model, "start_deadline",
                        lambda seconds: Deadline(seconds, clock=clock))
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] + 0.5 * rng.normal(size=300) > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # probability=True is deprecated
        with pytest.warns(ConvergenceWarning, match="during probability=True's calibration folds"):
            model = muflow.SVC(probability=True, time_limit=30, random_state=0, tol=1e-8).fit(X, y)
    assert calibrating and model.converged_.all() and model.fit_status_ == 1
