"""muflow's own error types.

Every error a user can trigger by bad input is a :class:`MuflowInputError`: the command
line turns it into exit code 2 and a one-line message, the library raises it as a
``ValueError`` so that scikit-learn conventions hold.
"""


class MuflowError(Exception):
    """Base class of every error muflow raises on purpose."""


class MuflowInputError(MuflowError, ValueError):
    """Bad input: data, parameters or files. The message names the problem and the fix."""


class SolverCombinationError(MuflowInputError):
    """A solver was asked for a problem it does not support (kernel sign, intercept mode)."""


class DataFileError(MuflowInputError):
    """A data file is missing or does not parse; the message names the file and line."""


class CacheCappedWarning(UserWarning):
    """``cache_size`` asked for more memory than the process may use: the cache was capped
    (a ``UserWarning``, shown by default, where a ``ResourceWarning`` is not)."""
