"""Prediction at scale: row blocks of bounded memory in process.

In memory, ``decision_function`` evaluates K(X, support vectors) a block of rows at a time,
each block within ``muflow.model.PREDICT_BLOCK_BYTES``; with a budget of a few rows the
results equal one unblocked K(X, SV) @ coefficients + intercepts.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import muflow
import muflow.model
from muflow.kernels import Kernel
from muflow.multiclass import pair_coefficients, vote_winner

N_FEATURES = 8


def labelled_blobs(n, n_classes, seed):
    """n points in N_FEATURES dimensions around n_classes centres, labels 3, 7, 11, ...
    (not 0..k-1, so that the classes_ mapping shows)."""
    rng = np.random.default_rng(seed)
    centres = 1.5 * rng.standard_normal((n_classes, N_FEATURES))
    index = rng.integers(0, n_classes, size=n)
    X = centres[index] + rng.standard_normal((n, N_FEATURES))
    return X, 3 + 4 * index


# -- in memory: row blocks under a byte budget ----------------------------------------
def unblocked_decisions(model, X):
    """The pair (or binary) decisions from one K(X, SV), without any row blocks."""
    K = model.kernel_.block(X, model.support_vectors_)
    if len(model.classes_) > 2:
        W = pair_coefficients(model.dual_coef_, model.n_support_)
    else:
        W = sp.csr_matrix(model.dual_coef_).toarray().T
    return K @ W + model.intercept_[None, :]


@pytest.fixture
def kernel_blocks(monkeypatch):
    """The shapes of every K block that Kernel.block evaluates while the fixture lives."""
    shapes = []
    block = Kernel.block

    def recording(self, A, B=None):
        out = block(self, A, B)
        shapes.append(out.shape)
        return out

    monkeypatch.setattr(Kernel, "block", recording)
    return shapes


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("n_classes", [2, 4], ids=["binary", "ovo"])
def test_row_blocks_under_the_budget_equal_the_unblocked_computation(
        n_classes, sparse, kernel_blocks, monkeypatch):
    X, y = labelled_blobs(240, n_classes, seed=1)
    X_test, _ = labelled_blobs(500, n_classes, seed=2)
    if sparse:  # about half the entries zero
        X, X_test = (sp.csr_matrix(np.where(np.abs(A) < 0.7, 0.0, A)) for A in (X, X_test))
    model = muflow.SVC(gamma=0.1, decision_function_shape="ovo").fit(X, y)
    assert sp.issparse(model.support_vectors_) == sparse
    expected = unblocked_decisions(model, X_test)
    expected_labels = model.classes_[(expected[:, 0] > 0).astype(int) if n_classes == 2
                                     else vote_winner(expected, n_classes)]

    n_sv = len(model.support_)
    budget = 8 * n_sv * 7  # seven rows of K(X, SV) per block
    monkeypatch.setattr(muflow.model, "PREDICT_BLOCK_BYTES", budget)
    kernel_blocks.clear()
    decision = model.decision_function(X_test)
    assert len(kernel_blocks) == -(-500 // 7)
    assert max(rows * cols * 8 for rows, cols in kernel_blocks) <= budget
    assert decision.shape == ((500,) if n_classes == 2 else (500, n_classes * (n_classes - 1) // 2))
    np.testing.assert_allclose(decision.reshape(500, -1), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(model.predict(X_test), expected_labels)


def test_a_callable_kernel_is_evaluated_in_row_blocks_against_the_training_rows(monkeypatch):
    X, y = labelled_blobs(150, 3, seed=3)
    X_test, _ = labelled_blobs(300, 3, seed=4)
    calls = []

    def kernel(A, B):
        calls.append((len(A), len(B)))
        return Kernel("rbf", gamma=0.1).block(A, B)

    model = muflow.SVC(kernel=kernel).fit(X, y)
    whole = model.decision_function(X_test)
    assert calls[-1] == (300, 150)  # the default budget: one block
    monkeypatch.setattr(muflow.model, "PREDICT_BLOCK_BYTES", 8 * 150 * 11)
    calls.clear()
    np.testing.assert_allclose(model.decision_function(X_test), whole, rtol=0, atol=1e-12)
    assert len(calls) == -(-300 // 11) and max(rows for rows, _ in calls) == 11
