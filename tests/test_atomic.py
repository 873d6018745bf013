"""The shared counter of compiled loops that deal work to threads
(:func:`muflow._atomic_compiled.take_next`)."""

import numpy as np
from numba import njit

from muflow._atomic_compiled import take_next
from muflow.thread_pool import run_on_threads


@njit(nogil=True)
def _take_all(counter, owner, worker):
    """Take values until there are none below ``owner.size``, marking each with ``worker``
    and counting how often it was taken."""
    while True:
        t = take_next(counter)
        if t >= owner.shape[0]:
            return
        owner[t, 0] = worker
        owner[t, 1] += 1


def test_each_value_goes_to_exactly_one_thread():
    """Threads taking from one counter at once get every value once: none lost, none
    twice, and the counter ends at the values plus one attempt a thread."""
    for threads in (1, 2, 4):
        counter = np.zeros(1, dtype=np.int64)
        owner = np.zeros((200_000, 2), dtype=np.int64)
        run_on_threads(lambda w: _take_all(counter, owner, w), threads)
        assert np.all(owner[:, 1] == 1)
        assert set(np.unique(owner[:, 0])) <= set(range(threads))
        assert counter[0] == owner.shape[0] + threads


def test_the_counter_refuses_what_is_not_one_int64_array():
    """take_next types only for an int64 array (a float counter would not be atomic)."""
    import pytest
    from numba.core.errors import TypingError

    @njit
    def take(c):
        return take_next(c)

    assert take(np.zeros(1, dtype=np.int64)) == 0
    with pytest.raises(TypingError):
        take(np.zeros(1, dtype=np.float64))
