"""Atomic writes (muflow.atomic) onto what a user may name as an output: a link, a FIFO."""

from __future__ import annotations

import os
import threading

from muflow.atomic import write_text


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    """The rename replaced the link by a file and left the file it named as it was."""
    target = tmp_path / "target.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    dangling = tmp_path / "to-be.csv"
    dangling.symlink_to(tmp_path / "made.csv")
    write_text(dangling, "made\n")
    assert dangling.is_symlink() and (tmp_path / "made.csv").read_text() == "made\n"


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    """A FIFO (as /dev/null or /dev/stdout, which a rename would replace by a regular file,
    as root /dev/null itself) is written into, as a shell's > does."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    write_text(fifo, "through\n")
    reader.join(10)
    assert got == ["through\n"]
    assert not fifo.is_file() and fifo.exists()  # still the FIFO


def test_a_directory_gets_the_mode_mkdir_would_give(tmp_path):
    """A directory written whole (a saved model, a run's model/) is readable by others as
    its files are: 0o777 less the umask, not the 0o700 of a temporary directory."""
    from muflow.atomic import atomic_directory

    for umask, expected in ((0o022, 0o755), (0o027, 0o750)):
        previous = os.umask(umask)
        try:
            made = atomic_directory(tmp_path / f"model-{umask:o}", lambda d: write_text(d / "f.json", "{}\n"))
        finally:
            os.umask(previous)
        assert made.stat().st_mode & 0o777 == expected
        assert (made / "f.json").stat().st_mode & 0o777 == 0o666 & ~umask
