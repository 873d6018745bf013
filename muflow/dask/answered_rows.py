"""The candidates' rows of X that travel once while they stay candidates.

Where the client does not hold X (a dask collection read on the workers), each partition's
answer in the Dask working-set loop carries its candidates' rows of X
(:meth:`muflow.dask.partition_column.PartitionColumn._candidates`): the client computes the
violators' kernel rows over the pool from them (second order, :mod:`muflow.dask.working_set`).
Most candidates stay candidates from one iteration to the next (the previous working set's
useful part is offered again, and the most violating variables change slowly), so most of
those rows came with the answer before.

A partition leaves out the rows of the candidates that were in one of its last
:data:`RECENT_ANSWERS` answers (:class:`SentRows`); the client keeps the rows of the
candidates of each partition's last :data:`RECENT_ANSWERS` answers and puts them back
(:class:`HeldRows`). Rows of X never change, so a row kept is right whatever happened
since; a row the client lacks (an answer lost with a failed call, whose candidates the
partition counted) is fetched from the partition. The client holds at most
:data:`RECENT_ANSWERS` answers' rows a partition, O(q d) in all: never X.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import scipy.sparse as sp

from muflow.dask.candidates import stack_rows
from muflow.solvers.working_set_loop import sorted_lookup

#: A candidate's row of X travels again once it was in none of this many of its
#: partition's last answers.
RECENT_ANSWERS = 2


class SentRows:
    """On a partition: the candidates (global indices) of its last :data:`RECENT_ANSWERS`
    answers, whose rows the client holds."""

    def __init__(self):
        self._recent = deque(maxlen=RECENT_ANSWERS)

    def held(self, ids) -> np.ndarray:
        """Which of ``ids`` (sorted) the client holds the rows of."""
        held = np.zeros(len(ids), dtype=bool)
        for recent in self._recent:
            held |= sorted_lookup(recent, ids)[1]
        return held

    def record(self, ids) -> None:
        """An answer's candidates ``ids`` (sorted) went to the client."""
        self._recent.append(np.asarray(ids, dtype=np.int64))


class HeldRows:
    """On the client: the rows of X of one partition's last :data:`RECENT_ANSWERS` answers'
    candidates, put back into the answers that leave them out."""

    def __init__(self):
        self._recent = deque(maxlen=RECENT_ANSWERS)

    def complete(self, answer, fetch):
        """The rows of X of all of ``answer``'s candidates (its "idx", sorted), in their
        order: those it carries (the candidates not marked "held") and those kept here;
        ``fetch(ids)`` gives the rows of any held one not kept here (an earlier answer
        lost)."""
        ids = np.asarray(answer["idx"], dtype=np.int64)
        held = answer.get("held")
        if held is None or not np.any(held):
            rows = answer["X"]
        else:
            pieces, where = [answer["X"]], [np.flatnonzero(~held)]
            missing = np.flatnonzero(held)
            for recent_ids, recent_rows in self._recent:
                at, found = sorted_lookup(recent_ids, ids[missing])
                if found.any():
                    pieces.append(recent_rows[at[found]])
                    where.append(missing[found])
                    missing = missing[~found]
                if not missing.size:
                    break
            if missing.size:
                pieces.append(fetch(ids[missing]))
                where.append(missing)
            rows = stack_rows(pieces)
            order = np.argsort(np.concatenate(where), kind="stable")
            rows = rows[order]
        if not sp.issparse(rows):
            rows = np.ascontiguousarray(rows)
        self._recent.append((ids, rows))
        return rows


__all__ = ["HeldRows", "RECENT_ANSWERS", "SentRows"]
