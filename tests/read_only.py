"""A directory made unwritable for a test, for the process running it (root included)."""

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def read_only(directory):
    """``directory`` and everything in it unwritable: ``chmod`` where that binds this
    process, the immutable attribute for root (whom modes do not stop)."""
    if os.geteuid() == 0:
        undo = ["chattr", "-R", "-i", str(directory)]
        made = subprocess.run(["chattr", "-R", "+i", str(directory)], capture_output=True)
    else:
        modes = {p: p.stat().st_mode for p in [directory, *directory.rglob("*")]}
        made = subprocess.run(["chmod", "-R", "a-w", str(directory)], capture_output=True)
        undo = None
    try:
        if made.returncode != 0 or os.access(directory, os.W_OK):
            pytest.skip(f"cannot make {directory} read-only here")
        yield
    finally:
        if undo:
            subprocess.run(undo, capture_output=True)
        else:
            for p, mode in modes.items():
                p.chmod(mode)
