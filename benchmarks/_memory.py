"""Peak resident memory of a block of code, sampled by a thread (covers C allocations)."""

from __future__ import annotations

import os
import threading
import time


class PeakMemory:
    """``with PeakMemory() as pm: ...``; ``pm.peak_mb`` is the peak RSS above the start."""

    def __init__(self, interval=0.005):
        self.interval = interval
        self.peak_mb = float("nan")

    def _rss(self):
        try:
            import psutil

            return psutil.Process(os.getpid()).memory_info().rss
        except ImportError:  # pragma: no cover
            with open(f"/proc/{os.getpid()}/statm") as fh:
                return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def _watch(self):
        while not self._stop.is_set():
            self._peak = max(self._peak, self._rss())
            time.sleep(self.interval)

    def __enter__(self):
        self._base = self._rss()
        self._peak = self._base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._rss())
        self.peak_mb = (self._peak - self._base) / 2**20
        return False
