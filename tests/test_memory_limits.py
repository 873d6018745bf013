"""Memory the process may not use (issue 38, item 4): a row cache larger than the room under
the address-space limit (``ulimit -v``; cgroups and free memory count the same way) is
capped with a warning that names ``cache_size``, and an allocation that fails names it too.
Each case runs in a subprocess that sets its own ``RLIMIT_AS``: 20,000 samples on rows on
demand solved by SMO, whose full cache (``cache_size=4000``) is 1.5 GB of float32 rows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from muflow.exceptions import CacheCappedWarning
from muflow.memory import cache_rows_that_fit

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")

SCRIPT = textwrap.dedent("""
    import resource, sys, warnings
    import numpy as np
    import muflow, muflow.memory
    if sys.argv[1] == "unknown-room":  # the limits cannot be read: the allocation fails
        muflow.memory.available_memory_bytes = lambda: None
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 10))
    y = (X[:, 0] > 0).astype(int)
    size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (size + 1500 * 2**20, resource.RLIM_INFINITY))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # SMO's cache takes all of cache_size (the working-set loop's holds a few working sets)
        muflow.SVC(cache_size=4000, gram="rows", solver="smo", max_iter=50).fit(X, y)
    print("fitted;", " ".join(str(w.message) for w in caught if w.category.__name__ == "CacheCappedWarning"))
""")


def _run(mode):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_cache_larger_than_the_address_space_left_is_capped_naming_cache_size():
    done = _run("limits-read")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("fitted;")
    assert "cache_size=4000 MB asks for a kernel row cache of" in done.stdout
    assert "capped to" in done.stdout and "lower cache_size" in done.stdout


def test_a_cache_that_cannot_be_allocated_names_cache_size():
    done = _run("unknown-room")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("MemoryError: could not allocate the kernel row cache of")
    assert "lower cache_size (--cache-size), or n_jobs" in last


def test_the_cap_keeps_what_fits_and_warns_once_per_value(monkeypatch):
    import muflow.memory

    # "unknown room" below: the machine's own free memory must not decide the test
    monkeypatch.setattr(muflow.memory, "available_memory_bytes", lambda: None)
    row = 8 * 100_000  # float64 rows of 100,000 samples
    with pytest.warns(CacheCappedWarning, match=r"cache_size=123456 MB .* capped to"):
        assert cache_rows_that_fit(10_000, row, 123456, available=2**30) == 2**29 // row
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache_rows_that_fit(10_000, row, 123456, available=2**30) == 2**29 // row
        assert cache_rows_that_fit(10_000, row, 99, available=2**40) == 10_000  # it fits
        assert cache_rows_that_fit(10_000, row, 98, available=None) == 10_000  # unknown room
    with pytest.warns(CacheCappedWarning, match="cache_size=97 MB"):
        assert cache_rows_that_fit(10_000, row, 97, available=0) == 2  # two rows at least


def test_a_child_killed_by_signal_9_is_named_as_likely_out_of_memory():
    """The kernel's OOM killer sends SIGKILL: the pool says only "terminated abruptly"."""
    import signal
    import time

    import psutil

    from muflow.exceptions import MuflowError
    from muflow.forking import forked_map

    def task(k):
        if k == 0:
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(30)  # the other child: stopped with the pool, not waited for

    before = {c.pid for c in psutil.Process().children()}  # earlier tests' (loky, a server)
    t = time.monotonic()
    with pytest.raises(MuflowError, match=r"killed by signal 9, likely out of memory .*: lower "
                                          r"cache_size or n_jobs"):
        forked_map(task, 2, 2)
    assert time.monotonic() - t < 10
    assert not [c for c in psutil.Process().children()
                if c.pid not in before and c.status() != psutil.STATUS_ZOMBIE]
