"""Checkpoint files: atomic, verified, and the previous one kept until the next is durable."""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.checkpoint import MAGIC, CheckpointDir, CorruptCheckpoint, read_file, write_file
from engine.errors import StorageError
from small_disk import small_disk as mounted_disk


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
    with pytest.raises(StorageError, match="Input/output error. The last checkpoint is intact"):
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


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KB filesystem of its own, so the disk really fills."""
    with mounted_disk(tmp_path / "disk", "256k") as mounted:
        if not mounted:
            pytest.skip("mounting a small tmpfs needs root and the mount command")
        yield tmp_path / "disk"


def test_a_full_disk_is_a_clear_error_and_the_run_resumes_when_space_returns(small_disk):
    ckpts = CheckpointDir(small_disk / "ckpt")
    latents = {"latents": np.arange(8 * 1024, dtype=np.float32)}    # 32 KB per checkpoint
    ckpts.save({"step": 1}, latents)
    ckpts.save({"step": 2}, latents)
    filler = small_disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    with pytest.raises(StorageError, match=r"step-00000003\.ckpt: No space left on device\. It needs 0\.0 MB and "
                                           r"0\.0 MB are free; free some space and run again"):
        ckpts.save({"step": 3}, latents)
    assert sorted(p.name for p in (small_disk / "ckpt").iterdir()) == ["step-00000001.ckpt", "step-00000002.ckpt"]
    assert ckpts.latest().meta == {"step": 2}
    filler.unlink()
    ckpts.save({"step": 3}, latents)
    assert ckpts.latest().meta == {"step": 3}


def test_a_folder_where_a_checkpoint_belongs_is_an_error_not_a_traceback(tmp_path):
    ckpts = CheckpointDir(tmp_path)
    (tmp_path / "step-00000001.ckpt").mkdir()
    assert ckpts.latest() is None                         # unusable, said in the log, not raised
    ckpts.save({"step": 2}, {"x": np.zeros(3)})           # numbering goes past it; the old "checkpoint" is left
    assert ckpts.latest().meta == {"step": 2}
    (tmp_path / "step-00000003.ckpt").mkdir()
    with pytest.raises(StorageError, match="A folder has that name; remove it"):
        write_file(tmp_path / "step-00000003.ckpt", {}, {"x": np.zeros(3)})
    ckpts.clear()


def test_a_deeply_nested_header_is_a_corrupt_checkpoint(tmp_path):
    header = b"[" * 100_000 + b"]" * 100_000
    body = MAGIC + struct.pack("<Q", len(header)) + header
    (tmp_path / "x.ckpt").write_bytes(body + hashlib.sha256(body).digest())
    with pytest.raises(CorruptCheckpoint, match="bad header"):
        read_file(tmp_path / "x.ckpt")


def _valid_checkpoint_bytes(tmp_path) -> bytes:
    write_file(tmp_path / "good.ckpt", {"step": 3, "job": {"prompt": "a sea"}}, arrays(3))
    return (tmp_path / "good.ckpt").read_bytes()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=4000), flips=st.lists(
    st.tuples(st.integers(min_value=0, max_value=4000), st.integers(min_value=0, max_value=255)), max_size=4),
    header=st.none() | st.binary(max_size=300), rehash=st.booleans())
def test_damaged_or_forged_checkpoints_are_only_ever_corrupt_checkpoints(tmp_path, cut, flips, header, rehash):
    """Bytes a power cut or a bad card may leave, and forged ones with a valid checksum over a bad header."""
    data = bytearray(_valid_checkpoint_bytes(tmp_path))[:-32]
    if header is not None:   # a header of any bytes, then the arrays as they were
        (n,) = struct.unpack_from("<Q", data, len(MAGIC))
        data = bytearray(MAGIC + struct.pack("<Q", len(header)) + header) + data[len(MAGIC) + 8 + n:]
    for where, value in flips:
        data[where % len(data)] = value
    data = data[: max(cut, 1)] if cut < len(data) else data
    body = bytes(data)
    path = tmp_path / "x.ckpt"
    path.write_bytes(body + (hashlib.sha256(body).digest() if rehash else b"\0" * 32))
    try:
        checkpoint = read_file(path)
    except CorruptCheckpoint:
        return
    assert isinstance(checkpoint.meta, dict)
    assert all(isinstance(a, np.ndarray) for a in checkpoint.arrays.values())
