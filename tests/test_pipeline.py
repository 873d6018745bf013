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
