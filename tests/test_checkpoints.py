"""Checkpoints are all or nothing, and a file that does not load is named, never half-used."""

import errno
from pathlib import Path

import pytest
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from ablate.training.evaluation import average_checkpoints
from ablate.training.fit import AtomicCheckpointIO, CheckpointError


def test_a_full_disk_leaves_no_half_written_checkpoint(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    target = tmp_path / "step0000020.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, target)
    before = target.read_bytes()

    def full_disk(self, checkpoint, path, storage_options=None):
        Path(path).write_bytes(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TorchCheckpointIO, "save_checkpoint", full_disk)
    with pytest.raises(
        CheckpointError, match=r"step0000020\.ckpt: could not write the checkpoint \(No space left"
    ):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, target)
    assert target.read_bytes() == before  # the previous file as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step0000020.ckpt"]  # no temporary left


def test_averaging_refuses_an_unreadable_checkpoint_by_name(tmp_path):
    good, bad = tmp_path / "step0000010.ckpt", tmp_path / "step0000020.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}}, good)
    torch.save({"state_dict": {"w": torch.full((2,), 3.0)}}, bad)
    assert torch.equal(average_checkpoints([good, bad])["w"], torch.full((2,), 2.0))
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"step0000020\.ckpt: unreadable checkpoint"):
        average_checkpoints([good, bad])
