"""One outer iteration's calls to the partitions of the Dask working-set loop.

:meth:`muflow.dask.working_set.PartitionedState.solve_on` makes them here (:func:`exchange`):
the solver (:attr:`muflow.dask.partitions.DaskRowPartitions.solver`) is asked to solve the
subproblem on B (:meth:`muflow.dask.partition_column.PartitionColumn.solve`) and then to apply
the step it found (``step_solved``); every other partition to compute its rows of B
(``compute_rows``) and then to apply the step the solver answered (``iterate``).

On a channel (:mod:`muflow.dask.channels`) a call is sent before the last is answered, and
the partition starts it the moment it has answered the last: the solver's step goes with its
subproblem, and each other partition's step as soon as the solver has answered, while that
partition still computes its rows. No partition then waits for a round trip between its two
calls. An actor's call is sent once the call before it is answered. A lone partition,
whose step nobody else waits for, is sent one call (``solve_and_step``). When a call fails,
the answers of those still out are taken and let go (:func:`drain`): a channel's next
request would otherwise read an answer left behind.
"""

from __future__ import annotations

import contextlib

from muflow.solvers.working_set_loop import step_of


def exchange(parts, sent, B, subproblem, shrink_with, k):
    """The calls of one outer iteration (module notes) on ``parts``
    (:class:`~muflow.dask.partitions.DaskRowPartitions`). ``sent[i]``: X_B as partition i is
    sent it; ``subproblem``: ``(y_B, U_B, alpha_B, G_B, equality, gap, gap_tol, dtype)``;
    ``shrink_with``: the extremes to shrink with, or None; ``k``: the candidates of each
    side a partition answers. Returns ``((new, change, steps), candidates)``, the step and
    every partition's answer in partition order."""
    solver = parts.solver
    others = [i for i in range(len(parts.actors)) if i != solver]
    out = []  # calls sent and not yet answered, in the order sent

    def send(i, method, *args):
        out.append(parts.send(i, method, *args))
        return out[-1]

    def take(calls):
        for call in calls:
            out.remove(call)
        return parts.wait(calls)

    try:
        if not others:  # nobody waits for the step: one call
            step, candidates = take([send(solver, "solve_and_step", sent[solver], B,
                                          *subproblem, shrink_with, k)])[0]
            return step, [candidates]
        asked = send(solver, "solve", sent[solver], B, *subproblem)
        stepping = {}
        if parts.pipelined(solver):
            stepping[solver] = send(solver, "step_solved", shrink_with, k)
        computing = {i: send(i, "compute_rows", sent[i], B) for i in others}
        new, change, steps = take([asked])[0]
        if solver not in stepping:
            stepping[solver] = send(solver, "step_solved", shrink_with, k)
        y_B, alpha_B = subproblem[0], subproblem[2]
        moved, coef = step_of(new, alpha_B, y_B)
        for i in others:
            if not parts.pipelined(i):  # an actor: its step once its rows are done
                take([computing.pop(i)])
            stepping[i] = send(i, "iterate", B[moved], coef, B, new, shrink_with, False, k)
        take(list(computing.values()))
        candidates = take([stepping[i] for i in range(len(parts.actors))])
    except BaseException:
        drain(parts, out)
        raise
    return (new, change, steps), candidates


def drain(parts, calls) -> None:
    """Take the answers of ``calls`` and let them go, errors included."""
    for call in calls:
        with contextlib.suppress(Exception):
            parts.wait([call])
