"""Progress of a long fit, one line at a time on stderr.

A solver that knows more than its iteration count (the working-set solver: KKT gap, kernel
rows computed, cache hits) calls a :class:`FitProgress` after every outer iteration with
what it knows; every other solver reaches it through the common callback
``callback(iteration, alpha, objective)`` (:meth:`FitProgress.callback`). The reporter
throttles itself by the clock, so calling it every iteration costs a clock read: a fit that
ends within ``delay`` seconds prints nothing, a longer one a line every ``every`` seconds.
"""

from __future__ import annotations

import sys
import time


class FitProgress:
    """Throttled one-line progress reports of a fit.

    Parameters
    ----------
    stream : file-like, optional
        Where the lines go; default ``sys.stderr`` (read when a line is written, so pytest's
        capture and redirections see them).
    every : float, default=2.0
        Seconds between two lines at most one of which is printed.
    delay : float, default=2.0
        Seconds of quiet before the first line: short fits print nothing.
    prefix : str, default="[muflow]"
    """

    def __init__(self, stream=None, *, every: float = 2.0, delay: float = 2.0,
                 prefix: str = "[muflow]"):
        self.stream = stream
        self.every = float(every)
        self.delay = float(delay)
        self.prefix = prefix
        self.start = time.perf_counter()
        self.last_printed = None
        self.lines = 0

    def _due(self) -> bool:
        """Whether a line is due now (and, if so, it counts as printed now)."""
        now = time.perf_counter()
        if now - self.start < self.delay:
            return False
        if self.last_printed is not None and now - self.last_printed < self.every:
            return False
        self.last_printed = now
        return True

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"{self.prefix} {self.last_printed - self.start:7.1f} s  {text}", file=stream, flush=True)
        self.lines += 1

    def __call__(self, *, iteration: int, gap: float, target: float, n: int,
                 rows_computed: int | None = None, rows_requested: int | None = None,
                 cache_hits: int | None = None, active: int | None = None,
                 round_trips: int | None = None, column: int = 0, columns: int = 1) -> None:
        """One outer iteration of a decomposition solver.

        ``gap`` is the maximal violating pair's gap (libsvm's stopping measure, Fan, Chen &
        Lin 2005, eq. 9), ``target`` the gap it stops at; ``rows_computed`` counts the kernel
        rows the operator computed, ``rows_requested`` and ``cache_hits`` the rows the
        working sets asked of the row cache and how many it held; ``active`` the variables
        not shrunk out of ``n``; ``round_trips`` the exchanges with a cluster's workers. A
        home that does not know one of them (the workers keep the row caches of a fit on a
        cluster) leaves it out, and so does the line.
        """
        if not self._due():
            return
        parts = [f"problem {column + 1}/{columns}"] if columns > 1 else []
        parts.append(f"outer iteration {iteration:6d}  KKT gap {gap:9.3e} (stops at {target:.1e})")
        if rows_computed is not None:
            parts.append(f"rows computed {rows_computed:,} ({rows_computed / max(n, 1):.2f} n)")
        if rows_requested is not None and cache_hits is not None:
            hit_rate = cache_hits / rows_requested if rows_requested else 0.0
            parts.append(f"cache hits {hit_rate:6.1%}")
        if round_trips is not None:
            parts.append(f"round trips {round_trips:,}")
        if active is not None:
            parts.append(f"active {active:,}/{n:,}")
        self._write("  ".join(parts))

    def callback(self, iteration, alpha, objective) -> bool:
        """The common solver callback: iteration and objective (never stops the solve)."""
        if self._due():
            values = ", ".join(f"{float(v):.6g}" for v in _as_list(objective))
            self._write(f"iteration {int(iteration):6d}  objective {values}")
        return False


def _as_list(objective):
    try:
        return list(objective)
    except TypeError:
        return [objective]
