"""Checkpoint files: atomic, verified, and the previous one kept until the next is durable."""

from __future__ import annotations

import numpy as np
import pytest

from engine.checkpoint import CheckpointDir, CorruptCheckpoint, read_file, write_file


def arrays(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"latents": rng.standard_normal((1, 4, 5, 7), dtype=np.float32),
            "count": np.arange(3, dtype=np.int64), "empty": np.zeros((0, 2), dtype=np.float32)}


def test_a_checkpoint_round_trips_metadata_and_arrays_exactly(tmp_path):
    meta = {"step": 3, "rng": {"state": 2 ** 100 + 7, "inc": 5}, "prompt": "a café at night"}
    write_file(tmp_path / "x.ckpt", meta, arrays(0))
    back = read_file(tmp_path / "x.ckpt")
    assert back.meta == meta
    for name, a in arrays(0).items():
        assert back.arrays[name].dtype == a.dtype and back.arrays[name].shape == a.shape
        np.testing.assert_array_equal(back.arrays[name], a)


def test_only_the_newest_two_are_kept_and_the_newest_is_returned(tmp_path):
    store = CheckpointDir(tmp_path)
    for step in range(5):
        store.save({"step": step}, arrays(step))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000004.ckpt", "step-00000005.ckpt"]
    assert store.latest().meta == {"step": 4}


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, damage):
    logs = []
    store = CheckpointDir(tmp_path, log=logs.append)
    store.save({"step": 1}, arrays(1))
    newest = store.save({"step": 2}, arrays(2))
    data = newest.read_bytes()
    newest.write_bytes({"truncate": data[:len(data) // 2], "flip": data[:100] + bytes([data[100] ^ 1]) + data[101:],
                        "empty": b"", "garbage": b"x" * 500}[damage])
    got = store.latest()
    assert got.meta == {"step": 1}
    np.testing.assert_array_equal(got.arrays["latents"], arrays(1)["latents"])
    assert len(logs) == 1 and newest.name in logs[0] and "trying the one before it" in logs[0]


def test_no_usable_checkpoint_means_none(tmp_path):
    logs = []
    store = CheckpointDir(tmp_path, log=logs.append)
    assert store.latest() is None
    store.save({"step": 1}, arrays(1)).write_bytes(b"broken")
    assert store.latest() is None and len(logs) == 1


def test_a_write_cut_off_midway_leaves_the_last_good_checkpoint(tmp_path, monkeypatch):
    store = CheckpointDir(tmp_path)
    store.save({"step": 1}, arrays(1))

    def power_cut(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr("engine.checkpoint.os.fsync", power_cut)
    with pytest.raises(OSError):
        store.save({"step": 2}, arrays(2))
    monkeypatch.undo()
    assert store.latest().meta == {"step": 1}
    store.save({"step": 2}, arrays(2))
    assert not list(tmp_path.glob(".*.tmp")), "the stray temporary file is cleaned up by the next write"


def test_corrupt_checkpoint_reasons_are_specific(tmp_path):
    p = tmp_path / "x.ckpt"
    p.write_bytes(b"SLOWFRAME-CKPT\n" + b"\0" * 60)
    with pytest.raises(CorruptCheckpoint, match="checksum"):
        read_file(p)
    with pytest.raises(CorruptCheckpoint, match="cannot read"):
        read_file(tmp_path / "absent.ckpt")


def test_clear_removes_every_checkpoint_of_the_job(tmp_path):
    store = CheckpointDir(tmp_path)
    store.save({"step": 1}, arrays(1))
    store.save({"step": 2}, arrays(2))
    (tmp_path / "notes.txt").write_text("not ours")
    store.clear()
    assert store.latest() is None
    assert (tmp_path / "notes.txt").exists()
