"""Prediction at scale: row blocks of bounded memory in process, lazy blockwise on Dask.

- In memory, ``decision_function`` evaluates K(X, support vectors) a block of rows at a
  time, each block within ``muflow.prediction.PREDICT_BLOCK_BYTES``; with a budget of a few rows
  the results equal one unblocked K(X, SV) @ coefficients + intercepts.
- On Dask input (:mod:`muflow.dask.predict`) the methods return lazy Dask arrays whose
  blocks are the in-memory results of the same rows; the model enters the graph once; on a
  LocalCluster of worker processes a million rows generated on the workers are predicted
  without passing through the client; bad input is refused from the metadata, with the
  error NumPy input gets, before anything is computed.
"""

from __future__ import annotations

import pickle
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp


import muflow
import muflow.model
import muflow.prediction
from muflow.exceptions import MuflowInputError
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


@pytest.fixture(scope="module")
def binary_model():
    """An rbf SVC on 200 points of two classes (3 and 7), 8 features."""
    X, y = labelled_blobs(200, 2, seed=0)
    return muflow.SVC(gamma=0.1).fit(X, y)


@pytest.fixture
def no_compute():
    """Any compute inside the block fails the test: the checks read metadata only."""
    import dask

    def refuse(*args, **kwargs):
        pytest.fail("the input was computed")

    with dask.config.set(scheduler=refuse):
        yield


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
    """(shape, bytes) of every block of K(X, SV) that the prepared model evaluates while the
    fixture lives (Predictor._shifted_block, or _sparse_block for sparse support vectors)."""
    from muflow.prediction import Predictor

    blocks = []

    def recording(method):
        def record(self, A, *args):
            dtype = np.dtype(args[0]) if args else np.dtype(np.float64)
            blocks.append(((A.shape[0], len(self.weights)),
                           A.shape[0] * len(self.weights) * dtype.itemsize))
            return method(self, A, *args)
        return record

    for name in ("_shifted_block", "_sparse_block"):
        monkeypatch.setattr(Predictor, name, recording(getattr(Predictor, name)))
    return blocks


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
    monkeypatch.setattr(muflow.prediction, "PREDICT_BLOCK_BYTES", budget)
    kernel_blocks.clear()
    decision = model.decision_function(X_test)
    assert len(kernel_blocks) == -(-500 // 7)
    assert max(nbytes for _, nbytes in kernel_blocks) <= budget
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
    monkeypatch.setattr(muflow.prediction, "PREDICT_BLOCK_BYTES", 8 * 150 * 11)
    calls.clear()
    np.testing.assert_allclose(model.decision_function(X_test), whole, rtol=0, atol=1e-12)
    assert len(calls) == -(-300 // 11) and max(rows for rows, _ in calls) == 11


# -- Dask input: lazy, blockwise, the model in the graph once -------------------------
def test_the_model_enters_the_graph_once(binary_model):
    import dask.array as da

    X = da.random.default_rng(0).standard_normal((10_000, N_FEATURES), chunks=(1_000, 4))
    labels = binary_model.predict(X)
    graph = dict(labels.__dask_graph__())
    support = binary_model.support_vectors_.tobytes()
    carriers = [key for key, value in graph.items() if support in pickle.dumps(value)]
    assert len(carriers) == 1
    tasks = [value for key, value in graph.items() if key[0] == labels.name]
    assert len(tasks) == 10
    assert all(len(pickle.dumps(task)) < len(support) / 4 for task in tasks)


@pytest.mark.parametrize("n_classes, params", [
    (2, {}),
    (3, {}),
    (3, {"decision_function_shape": "ovo"}),
    (3, {"break_ties": True}),
    (3, {"multiclass": "ovr"}),
], ids=["binary", "ovo", "ovo-shape", "break-ties", "one-vs-rest"])
def test_every_method_on_dask_equals_numpy(n_classes, params):
    import dask
    import dask.array as da

    X, y = labelled_blobs(150, n_classes, seed=5)
    X_test, _ = labelled_blobs(1_000, n_classes, seed=6)
    methods = ["decision_function", "predict"]
    if params.get("multiclass") != "ovr":  # Platt's sigmoids need the one-vs-one pairs
        params = {**params, "probability": True, "random_state": 0}
        methods += ["predict_proba", "predict_log_proba"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # probability's deprecation
        model = muflow.SVC(gamma=0.1, **params).fit(X, y)
    Xd = da.from_array(X_test, chunks=(300, 5))
    for method in methods:
        lazy = getattr(model, method)(Xd)
        expected = getattr(model, method)(X_test)
        assert isinstance(lazy, da.Array), method
        assert (lazy.shape, lazy.dtype) == (expected.shape, expected.dtype), method
        with dask.config.set(scheduler="sync"):
            computed = lazy.compute()
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(computed, expected, rtol=1e-12, atol=1e-12, err_msg=method)
        else:
            np.testing.assert_array_equal(computed, expected, err_msg=method)


def test_a_million_rows_on_the_cluster_never_pass_through_the_client(client, binary_model):
    import dask.array as da

    n, chunk = 10**6, 100_000
    X = da.random.default_rng(42).standard_normal((n, N_FEATURES), chunks=(chunk, N_FEATURES))
    labels = binary_model.predict(X)
    assert isinstance(labels, da.Array)
    assert labels.shape == (n,) and labels.dtype == binary_model.classes_.dtype
    assert labels.chunks == ((chunk,) * 10,)

    tracemalloc.start()
    try:
        computed = labels.compute()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert computed.nbytes == 8 * n
    assert peak < X.nbytes  # 64 MB of rows; the client held about the 8 MB of labels
    assert set(np.unique(computed)) == {3, 7}

    # the same rows, brought to the client a block at a time and predicted in memory
    scores = binary_model.decision_function(X)
    for i in range(X.numblocks[0]):
        rows = X.blocks[i].compute()
        np.testing.assert_array_equal(computed[i * chunk:(i + 1) * chunk],
                                      binary_model.predict(rows))
        if i in (0, 9):
            np.testing.assert_allclose(scores.blocks[i].compute(),
                                       binary_model.decision_function(rows), rtol=0, atol=1e-12)


def test_a_dask_dataframe_gives_the_same_predictions(client):
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd

    names = [f"f{j}" for j in range(N_FEATURES)]
    X, y = labelled_blobs(200, 3, seed=7)
    model = muflow.SVC(gamma=0.1).fit(pd.DataFrame(X, columns=names), y)
    X_test = da.random.default_rng(8).standard_normal((20_000, N_FEATURES), chunks=(5_000, 8))
    frame = dd.from_dask_array(X_test, columns=names)
    labels, scores = model.predict(frame), model.decision_function(frame)
    assert isinstance(labels, da.Array) and labels.ndim == 1
    assert scores.ndim == 2 and scores.shape[1] == 3
    rows = pd.DataFrame(X_test.compute(), columns=names)
    expected = model.predict(rows)
    np.testing.assert_array_equal(labels.compute(), expected)
    np.testing.assert_allclose(scores.compute(), model.decision_function(rows), rtol=0, atol=1e-12)
    # from pandas, with more partitions than workers
    frame = dd.from_pandas(rows[:3_000], npartitions=5)
    np.testing.assert_array_equal(model.predict(frame).compute(), expected[:3_000])


# -- errors from the metadata, before any compute --------------------------------------
def numpy_error(call, X):
    with pytest.raises(ValueError) as info:
        call(X)
    return str(info.value)


def test_the_wrong_number_of_features_is_refused_lazily_with_the_numpy_error(binary_model,
                                                                             no_compute):
    import dask.array as da
    import dask.dataframe as dd

    wrong = np.zeros((10, 5))
    message = numpy_error(binary_model.predict, wrong)
    assert "X has 5 features, but SVC is expecting 8 features as input" in message
    X = da.random.default_rng(0).standard_normal((10**6, 5), chunks=(100_000, 5))
    for method in (binary_model.predict, binary_model.decision_function):
        with pytest.raises(ValueError) as info:
            method(X)
        assert str(info.value) == message
        with pytest.raises(ValueError) as info:
            method(dd.from_dask_array(X))
        assert str(info.value) == message


def test_other_bad_dask_input_is_refused_lazily(binary_model, no_compute):
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd

    names = [f"f{j}" for j in range(N_FEATURES)]
    X, y = labelled_blobs(100, 2, seed=9)
    named = muflow.SVC(gamma=0.1).fit(pd.DataFrame(X, columns=names), y)
    frame = dd.from_pandas(pd.DataFrame(X, columns=names), npartitions=2)
    shuffled = names[1:] + names[:1]
    message = numpy_error(named.predict, pd.DataFrame(X, columns=names)[shuffled])
    with pytest.raises(ValueError, match="Feature names must be in the same order") as info:
        named.predict(frame[shuffled])
    assert str(info.value) == message
    with pytest.raises(MuflowInputError, match="2-D"):
        binary_model.predict(da.zeros(10, chunks=5))
    with pytest.raises(MuflowInputError, match="to_frame"):
        named.predict(frame["f0"])
    with pytest.raises(ValueError, match="sparse input"):
        binary_model.predict(da.from_array(sp.csr_matrix(X), chunks=(50, 8), asarray=False))

    K = Kernel("rbf", gamma=0.1).block(X)
    precomputed = muflow.SVC(kernel="precomputed").fit(K, y)
    message = numpy_error(precomputed.predict, K[:, :99])
    with pytest.raises(MuflowInputError) as info:
        precomputed.predict(da.from_array(K[:, :99], chunks=(50, 99)))
    assert str(info.value) == message
