"""A load that races a save (issue 38, smaller items): :func:`muflow.save` replaces the model
directory by renaming a complete new one over it and removing the old; a load caught in
between starts again, and says "being replaced, retry" when it cannot, where it said "the
model directory is incomplete"."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import muflow
from muflow.persistence import ModelBeingReplaced, _ModelDirectory, load


@pytest.fixture(scope="module")
def models():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    return muflow.SVC(C=1.0).fit(X, y), muflow.SVC(C=10.0).fit(X, y)


def test_a_directory_replaced_while_open_says_being_replaced(models, tmp_path):
    path = tmp_path / "model"
    muflow.save(models[0], path)
    with _ModelDirectory(path) as directory:
        muflow.save(models[1], path)  # the open directory is now the removed old one
        with pytest.raises(ModelBeingReplaced, match="is being replaced by a save .* retry the load"):
            directory.read("arrays.npz", 10**8, missing="the model directory is incomplete")


def test_a_directory_truly_missing_a_file_is_still_incomplete(models, tmp_path):
    path = tmp_path / "model"
    muflow.save(models[0], path)
    (path / "arrays.npz").unlink()
    with pytest.raises(muflow.exceptions.MuflowInputError, match="the model directory is incomplete"):
        load(path)


def test_loads_during_repeated_saves_all_succeed(models, tmp_path):
    path = tmp_path / "model"
    muflow.save(models[0], path)
    stop = threading.Event()

    def saver():
        k = 0
        while not stop.is_set():
            muflow.save(models[k % 2], path)
            k += 1

    thread = threading.Thread(target=saver)
    thread.start()
    try:
        Cs = {load(path).C for _ in range(150)}
    finally:
        stop.set()
        thread.join()
    assert Cs <= {1.0, 10.0}
