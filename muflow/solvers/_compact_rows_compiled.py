"""The compact-row cache of SMO's pair steps (numba, cached on disk): rows of K restricted to
the active set, stored contiguously at a common stride, as libsvm caches its kernel rows
over the active set only.

:func:`muflow.solvers._pairs_compiled.smo_pairs` reads a row with :func:`_compact_row`,
finds the rows of its layout again on resuming (:func:`_compact_rows_for`), and after a
shrink moves their columns as the active set's (:func:`_shrink_rows`). The arrays are the
solver's (:func:`muflow.solvers.smo.compact_rows`): ``cbuf`` the values, ``crow_of`` the
cached row of each variable (-1: none), ``cowner`` the variable of each cached row,
``cstamp`` its last use, ``cidx`` the layout, and ``cstate`` the counters below.
"""

from __future__ import annotations

from numba import njit

# compact-row cache state, an int64 array: clock, rows used, layout length, row stride
CR_CLOCK = 0
CR_USED = 1
CR_LAYOUT = 2
CR_STRIDE = 3
CR_SIZE = 4


@njit(cache=True, inline="always")
def _compact_row(i, Krow, idx, n_act, cbuf, rows, crow_of, cowner, cstamp, cstate):
    """K[i, idx[:n_act]] as a contiguous vector, from the compact-row cache (``rows`` rows of
    ``cstate[CR_STRIDE]`` values each in ``cbuf``).

    libsvm caches its kernel rows over the active set only; the sweeps of a step then read
    n_act contiguous values instead of gathering them from a full row of K (which, for K
    much larger than the cache and a small active set, reads most of the row's cache lines
    from memory). Least-recently-used rows are replaced.
    """
    cstate[CR_CLOCK] += 1
    s = crow_of[i]
    start = 0
    if s < 0:
        if cstate[CR_USED] < rows:
            s = cstate[CR_USED]
            cstate[CR_USED] += 1
        else:
            s = 0
            for r in range(1, rows):
                if cstamp[r] < cstamp[s]:
                    s = r
            crow_of[cowner[s]] = -1
        cowner[s] = i
        crow_of[i] = s
        start = s * cstate[CR_STRIDE]
        for k in range(n_act):
            cbuf[start + k] = Krow[idx[k]]
    else:
        start = s * cstate[CR_STRIDE]
    cstamp[s] = cstate[CR_CLOCK]
    return cbuf[start:start + n_act]


@njit(cache=True)
def _compact_rows_for(idx, n_act, cbuf, crow_of, cowner, cidx, cstate):
    """Rows the compact-row cache holds (see :func:`_rows_capacity`), emptied unless they were
    built for exactly this layout ``idx[:n_act]`` (a call that resumes after a cache miss or a
    full objective buffer finds its rows again; a layout the driver changed starts empty)."""
    same = cstate[CR_LAYOUT] == n_act and cstate[CR_STRIDE] > 0
    if same:
        for k in range(n_act):
            if cidx[k] != idx[k]:
                same = False
                break
    if not same:
        for r in range(cstate[CR_USED]):
            crow_of[cowner[r]] = -1
        cstate[CR_USED] = 0
        cstate[CR_STRIDE] = max(n_act, 1)
        _record_layout(idx, n_act, cidx, cstate)
    return _rows_capacity(cbuf, cowner, cstate[CR_STRIDE])


@njit(cache=True, inline="always")
def _record_layout(idx, n_act, cidx, cstate):
    """The layout the cached rows are built on: ``idx[:n_act]``."""
    for k in range(n_act):  # a loop: a slice assignment costs numba seconds to compile
        cidx[k] = idx[k]
    cstate[CR_LAYOUT] = n_act


@njit(cache=True)
def _shrink_rows(cbuf, cowner, cidx, cstate, idx, kept, holes, sources, moves):
    """The cached rows follow a shrink of the active set to ``kept`` positions: the moves
    of :func:`shrink_compact` applied to them, packed at the new stride when it pays
    (:func:`_restride`), and the new layout recorded. Returns the rows the cache holds."""
    _move_columns(cbuf, cstate[CR_STRIDE], cstate[CR_USED], holes, sources, moves)
    rows = _restride(cbuf, cowner, cstate, kept)
    _record_layout(idx, kept, cidx, cstate)
    return rows


@njit(cache=True, inline="always")
def _rows_capacity(cbuf, cowner, stride):
    return max(1, min(cowner.shape[0], cbuf.shape[0] // stride))


@njit(cache=True)
def _restride(cbuf, cowner, cstate, n_act):
    """After shrinking to ``n_act`` positions, pack the cached rows at that stride once it is
    a quarter below the old one, so that the cache holds as many rows as the budget allows
    (rows kept at the full set's stride would leave room for a fraction of the active set).
    Rows move to lower addresses in order, so no value is overwritten before it is read.
    Returns the rows the cache now holds."""
    old = cstate[CR_STRIDE]
    if 4 * n_act > 3 * old or n_act < 1:
        return _rows_capacity(cbuf, cowner, old)
    for r in range(cstate[CR_USED]):
        for k in range(n_act):
            cbuf[r * n_act + k] = cbuf[r * old + k]
    cstate[CR_STRIDE] = n_act
    return _rows_capacity(cbuf, cowner, n_act)


@njit(cache=True)
def _move_columns(cbuf, stride, rows, holes, sources, moves):
    """Apply the moves of :func:`shrink_compact` to the first ``rows`` compact rows, as
    libsvm's cache swaps the columns of its rows when it shrinks."""
    for r in range(rows):
        start = r * stride
        for m in range(moves):
            cbuf[start + holes[m]] = cbuf[start + sources[m]]
