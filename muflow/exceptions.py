"""muflow's own error types.

Every error a user can trigger by bad input is a :class:`MuflowInputError`: the command
line turns it into exit code 2 and a one-line message, the library raises it as a
``ValueError`` so that scikit-learn conventions hold. A fit whose Dask scheduler went away
raises a :class:`SchedulerLostError` that names the scheduler and what to do next
(:func:`lost_scheduler_error`).
"""


class MuflowError(Exception):
    """Base class of every error muflow raises on purpose."""


class MuflowInputError(MuflowError, ValueError):
    """Bad input: data, parameters or files. The message names the problem and the fix."""


class SolverCombinationError(MuflowInputError):
    """A solver was asked for a problem it does not support (kernel sign, intercept mode)."""


class DataFileError(MuflowInputError):
    """A data file is missing or does not parse; the message names the file and line."""


class SchedulerLostError(MuflowError):
    """The Dask scheduler went away during a fit."""


class CacheCappedWarning(UserWarning):
    """``cache_size`` asked for more memory than the process may use: the cache was capped
    (a ``UserWarning``, shown by default, where a ``ResourceWarning`` is not)."""


def scheduler_address(client) -> str:
    """The scheduler's address as the client knew it (also once the client is closed)."""
    scheduler = getattr(client, "scheduler", None)
    return str(getattr(scheduler, "address", None) or getattr(client, "_start_arg", None) or "?")


#: What a caller of the library does once its scheduler is gone; the commands name the
#: command line that continues their work instead (:mod:`muflow.commands._cluster`).
RERUN_FIT = ("start the scheduler and its workers again and rerun; a fit given the same "
             "checkpoint_dir resumes from its last checkpoint")


def lost_scheduler_error(client, *, work="the fit", next_step=RERUN_FIT) -> SchedulerLostError:
    """The error of ``work`` whose scheduler went away: its address and what to do next.

    ``client`` is the Client that lost it, or the scheduler's address.
    """
    if isinstance(client, str):
        where = f"{client} is gone"
    else:
        where = (f"{scheduler_address(client)} is gone (the client is "
                 f"{getattr(client, 'status', 'closed')})")
    return SchedulerLostError(f"the Dask scheduler at {where}: {work} cannot go on; {next_step}")


def dask_input_error(client, kernel_name, solver) -> MuflowInputError:
    """The error for X given as a dask collection on a path that needs it in this process
    (:func:`muflow.routing.runs_on_workers` said no), naming the reason that applies: a
    precomputed or callable kernel, whose K is held here whatever the client (telling such
    a user to give a client and solver='auto', which they had, sent them in circles); no
    client; or a solver that does not run on the workers."""
    if kernel_name == "precomputed":
        return MuflowInputError(
            "K is a dask collection: a precomputed kernel cannot take dask input (K is held "
            "in this process); pass K as a NumPy array (K.compute())")
    if not isinstance(kernel_name, str):
        return MuflowInputError(
            "X is a dask collection: a callable kernel cannot take dask input (its K is "
            "computed and held in this process); pass X as a NumPy array, or a kernel name")
    if client is None:
        return MuflowInputError(
            "X is a dask collection: fit it on the cluster with client=... (a Client or a "
            "scheduler address), or pass a NumPy array")
    return MuflowInputError(
        f"X is a dask collection: solver={solver!r} does not run on the workers; use "
        "solver='auto' or 'working_set' (or a multiplicative solver: 'm3', 'munk', ...), or "
        "pass a NumPy array")
