"""A full disk leaves nothing behind (issue 22): a checkpoint or a store write that fails
with ENOSPC removes its temporary file and keeps the previous complete file."""

from __future__ import annotations

import errno

import numpy as np
import pytest

import muflow.checkpoint as checkpoint


def test_a_checkpoint_that_hits_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    run_dir = tmp_path / "ckpt"
    checkpoint.save_checkpoint(run_dir, np.ones(5), 0.5, 10, -1.0)
    before = sorted(p.name for p in run_dir.iterdir())

    def full_disk(fh, **arrays):
        fh.write(b"PK\x03\x04 partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.np, "savez", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save_checkpoint(run_dir, np.zeros(5), 0.0, 20, -2.0)
    monkeypatch.undo()
    assert sorted(p.name for p in run_dir.iterdir()) == before  # no .tmp left
    assert checkpoint.load_checkpoint(run_dir).iteration == 10  # the previous one intact


def test_a_full_disk_is_one_line_with_what_to_do(tmp_path, monkeypatch, capsys):
    from muflow.cli import main

    X = np.random.default_rng(0).normal(size=(40, 3))
    data = tmp_path / "train.npz"
    np.savez(data, X=X, y=(X[:, 0] > 0).astype(int))

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    import muflow.persistence

    monkeypatch.setattr(muflow.persistence, "atomic_directory", full_disk)
    assert main(["fit", "--data", str(data), "--quiet", "--out", str(tmp_path / "model")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "free space" in err[0]
    assert not (tmp_path / "model").exists()
