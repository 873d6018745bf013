"""The candidates' rows of X that travel once while they stay candidates
(muflow.dask.answered_rows): the partition's side and the client's, on a sequence of answers
made here (the logic alone; tests/test_dask_working_set.py runs it on a cluster)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from muflow.dask.answered_rows import RECENT_ANSWERS, HeldRows, SentRows


def _answers(rng, n, count):
    """Sorted candidate sets drawn from a slowly moving window, as iterations give them."""
    out, centre = [], n // 2
    for _ in range(count):
        centre += int(rng.integers(-3, 4))
        out.append(np.unique(rng.integers(centre - 20, centre + 20, size=25)))
    return out


@pytest.mark.parametrize("form", ["dense", "csr"])
def test_the_client_puts_back_every_row_left_out_and_fetches_only_what_it_lost(form):
    rng = np.random.default_rng(0)
    n, d = 200, 6
    X = rng.standard_normal((n, d))
    X = np.where(np.abs(X) > 0.7, X, 0.0)
    source = sp.csr_matrix(X) if form == "csr" else X
    sent, held = SentRows(), HeldRows()
    lost_at = 5  # this answer is lost on the way (a failed call): the client never sees it
    carried = asked = 0
    fetched = []

    def fetch(ids):
        fetched.append(ids.copy())
        return source[ids]

    for t, ids in enumerate(_answers(rng, n, 12)):
        leave_out = sent.held(ids)
        answer = {"idx": ids, "X": source[ids[~leave_out]], "held": leave_out}
        sent.record(ids)
        carried += int((~leave_out).sum())
        asked += ids.size
        if t == lost_at:
            continue
        rows = held.complete(answer, fetch)
        got = rows.toarray() if sp.issparse(rows) else rows
        np.testing.assert_array_equal(got, X[ids])
    assert carried < 0.6 * asked  # most candidates stayed candidates: their rows came once
    # only what the lost answer alone carried and later answers left out was fetched
    assert fetched and all(f.size for f in fetched)
    assert sum(f.size for f in fetched) < 25


def test_a_row_comes_again_once_it_left_the_recent_answers():
    sent = SentRows()
    sent.record(np.array([1, 2, 3]))
    assert sent.held(np.array([1, 4])).tolist() == [True, False]
    for _ in range(RECENT_ANSWERS):
        sent.record(np.array([7]))
    assert not sent.held(np.array([1, 2, 3])).any()


def test_an_answer_without_candidates_is_kept_as_one():
    """A partition whose variables were all shrunk answers no candidate: the next answers
    still find the rows of those before it."""
    X = np.arange(30.0).reshape(10, 3)
    sent, held = SentRows(), HeldRows()
    for ids in (np.array([], dtype=np.int64), np.array([2, 3]), np.array([2, 3, 4])):
        leave_out = sent.held(ids)
        answer = {"idx": ids, "X": X[ids[~leave_out]], "held": leave_out}
        sent.record(ids)
        np.testing.assert_array_equal(held.complete(answer, fetch=None), X[ids])


def test_an_answer_with_nothing_left_out_is_taken_as_it_came():
    held = HeldRows()
    X = np.arange(12.0).reshape(4, 3)
    rows = held.complete({"idx": np.arange(4), "X": X, "held": None}, fetch=None)
    np.testing.assert_array_equal(rows, X)
