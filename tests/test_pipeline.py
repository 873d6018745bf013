"""The pipeline's stages read back what earlier stages wrote, checked (issue 33, item 1)."""

from __future__ import annotations

import numpy as np
import pytest

from muflow.exceptions import MuflowInputError
from muflow.pipeline import load_split


def test_a_split_holding_nan_is_refused_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    X_train, X_test = rng.normal(size=(10, 3)), rng.normal(size=(4, 3))
    X_test[2, 1] = np.inf
    np.savez(tmp_path / "data.npz", X_train=X_train, X_test=X_test, y_train=np.arange(10) % 2,
             y_test=np.arange(4) % 2)
    with pytest.raises(MuflowInputError, match=rf"{tmp_path}/data.npz is damaged \(X_test holds "
                                               "NaN or inf\\); delete it and data.json"):
        load_split(tmp_path)


def test_the_refit_reports_iterations_in_the_unit_of_n_iter(tmp_path):
    """refit.json and the summary count as SVC's n_iter_ does, and name the unit: SMO's pair
    steps (libsvm's), where the solver's own sweeps of n steps read 1 on a whole fit."""
    import dataclasses

    import muflow
    from muflow.config import default_config
    from muflow.pipeline import refit_best, summary_rows

    X, y = muflow.datasets.load_breast_cancer()
    idx = np.random.default_rng(0).choice(len(y), 250, replace=False)
    X, y = X[idx] / 10.0, y[idx]
    np.savez(tmp_path / "data.npz", X_train=X[:200], X_test=X[200:], y_train=y[:200],
             y_test=y[200:])
    cfg = default_config()
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, solver="smo"))
    info = refit_best(cfg, tmp_path, {"kernel": "rbf", "gamma": 0.5, "C": 10.0})
    model = muflow.load(tmp_path / "model")
    assert info["iterations"] == int(model.n_iter_.max()) > 1
    assert info["iteration_unit"] == "pair step"
    (tmp_path / "data.json").write_text(
        '{"source": "bc", "n_samples": 250, "n_features": 30, "n_train": 200, "n_test": 50}')
    rows = dict(summary_rows(tmp_path))
    assert rows["iterations"] == f"{info['iterations']} (pair step)"
