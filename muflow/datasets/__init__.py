"""Data sets bundled with muflow (copied from the UCI originals; CC BY 4.0).

- :func:`load_breast_cancer`: Breast Cancer Wisconsin (Original), the 683 rows left after
  dropping the 16 with missing values, 9 features, labels 2 (benign) and 4 (malignant):
  the set of the MUNK and M3 papers.
- :func:`load_sonar`: Connectionist Bench (Sonar, Mines vs. Rocks), 208 rows, 60 features,
  labels "M" (mine) and "R" (rock).
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from muflow.data import load_data


def data_path(name: str):
    """Path of a bundled CSV file, for the CLI (``--data``) and the default pipeline."""
    return resources.files("muflow.datasets") / "data" / name


def load_breast_cancer():
    """Breast cancer: ``(X, y)`` with X of shape (683, 9) and y in {2, 4}."""
    return load_data(data_path("breast_cancer.csv"), label_column="class")


def load_sonar():
    """Sonar: ``(X, y)`` with X of shape (208, 60) and y in {"M", "R"}."""
    X, y = load_data(data_path("sonar.csv"))
    return X, np.asarray(y, dtype=str)


__all__ = ["data_path", "load_breast_cancer", "load_sonar"]
