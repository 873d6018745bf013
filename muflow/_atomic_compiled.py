"""An atomic counter for compiled loops that share work out among threads (numba).

Threads that run one compiled loop each take the next piece of a batch from a shared
counter (:func:`take_next`) without returning to Python between pieces: a piece dealt
through Python costs each thread the GIL, and on two cores the thread that waits for it
sleeps and wakes again (tens of microseconds a piece), where the compiled loop costs one
atomic add. Which thread computes which piece never changes what a piece writes.
"""

from __future__ import annotations

from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def take_next(typingctx, counter):
    """``counter[0]`` before one is added to it, in one atomic step (sequentially
    consistent): each value goes to exactly one caller, whatever the threads. ``counter``
    is a one-entry int64 array that the threads share."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None
    sig = types.int64(counter)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        first = cgutils.get_item_pointer(context, builder, signature.args[0], array,
                                         [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", first, context.get_constant(types.int64, 1), "seq_cst")

    return sig, codegen


__all__ = ["take_next"]
