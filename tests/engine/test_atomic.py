"""engine.atomic: a file or folder appears whole or not at all, durably when asked."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from engine.atomic import atomic_folder, atomic_write, publish, temp_files, write_bytes


def record_fsyncs(monkeypatch) -> list[tuple[bool, int]]:
    """Each os.fsync as (is a folder, inode), in order; the real fsync still runs."""
    calls, real = [], os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        calls.append((stat.S_ISDIR(st.st_mode), st.st_ino))
        real(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def test_the_content_lands_whole_and_no_temporary_file_stays(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with atomic_write(target) as f:
        f.write(b"new ")
        assert target.read_bytes() == b"old", "readers see the old file until the write completes"
        f.write(b"content")
    assert target.read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["out.bin"]
    with atomic_write(tmp_path / "text.json", "w") as f:
        f.write('{"a": 1}\n')
    assert (tmp_path / "text.json").read_text() == '{"a": 1}\n'


def test_new_files_get_the_permissions_plain_open_gives(tmp_path):
    old = os.umask(0o022)
    try:
        write_bytes(tmp_path / "a", b"x")
        (tmp_path / "b").write_bytes(b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "b").stat().st_mode) == 0o644


@pytest.mark.parametrize("durable", [False, True])
def test_an_exception_mid_write_leaves_the_old_file_and_no_temporary_file(tmp_path, durable):
    target = tmp_path / "state.json"
    target.write_bytes(b"old state")
    with pytest.raises(RuntimeError):
        with atomic_write(target, durable=durable) as f:
            f.write(b"half of the new")
            raise RuntimeError("power cut")
    assert target.read_bytes() == b"old state"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_failing_fsync_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "ckpt"
    target.write_bytes(b"old")

    def broken(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError):
        write_bytes(target, b"new", durable=True)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["ckpt"]


def test_durable_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    calls = record_fsyncs(monkeypatch)
    target = tmp_path / "picture.png"
    write_bytes(target, b"png")
    assert calls == [], "without durable nothing is fsynced"
    write_bytes(target, b"png", durable=True)
    assert calls == [(False, target.stat().st_ino), (True, tmp_path.stat().st_ino)]


def test_concurrent_writers_use_unique_temporary_files(tmp_path, monkeypatch):
    names, real_replace = [], os.replace

    def replace(src, dst):
        names.append(os.path.basename(src))
        real_replace(src, dst)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "shared.bin"
    barrier = threading.Barrier(8)
    payloads = [bytes([i]) * 100_000 for i in range(8)]

    def writer(payload):
        with atomic_write(target) as f:
            barrier.wait()          # all eight temporary files are open at once
            f.write(payload)
    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(names)) == 8
    assert target.read_bytes() in payloads, "the last rename wins, whole"
    assert os.listdir(tmp_path) == ["shared.bin"]


def test_temp_files_finds_what_a_crash_leaves(tmp_path):
    (tmp_path / "step-1.ckpt").write_bytes(b"done")
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(tmp_path / "step-2.ckpt") as f:
            leftover = f.name
            raise KeyboardInterrupt
    assert temp_files(tmp_path) == []
    open(leftover, "wb").close()   # as a power cut leaves it
    assert temp_files(tmp_path, "step-*.ckpt") == [tmp_path / os.path.basename(leftover)]
    assert temp_files(tmp_path, "other") == []


def test_a_folder_appears_whole_under_its_name(tmp_path):
    dest = tmp_path / "model"
    with atomic_folder(dest) as tmp:
        (tmp / "unet").mkdir()
        (tmp / "unet" / "weights").write_bytes(b"w")
        assert not dest.exists()
    assert (dest / "unet" / "weights").read_bytes() == b"w"
    assert os.listdir(tmp_path) == ["model"]


def test_a_failed_folder_write_leaves_nothing(tmp_path):
    with pytest.raises(SystemExit):
        with atomic_folder(tmp_path / "model") as tmp:
            (tmp / "half").write_bytes(b"h")
            raise SystemExit("build failed")
    assert os.listdir(tmp_path) == []


def test_a_folder_made_meanwhile_by_someone_else_is_kept(tmp_path):
    dest = tmp_path / "model"
    with pytest.raises(FileExistsError):
        with atomic_folder(dest) as tmp:
            (tmp / "ours").write_bytes(b"o")
            dest.mkdir()
            (dest / "theirs").write_bytes(b"t")
    assert os.listdir(dest) == ["theirs"] and os.listdir(tmp_path) == ["model"]


def test_folders_left_by_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = tmp_path / ".model.partial-999999999"      # above any pid_max: no such process
    live = tmp_path / f".model.partial-{os.getppid()}"
    other = tmp_path / ".unrelated.partial-999999999"
    for folder in (dead, live, other):
        folder.mkdir()
    with atomic_folder(tmp_path / "model"):
        pass
    assert sorted(os.listdir(tmp_path)) == sorted(["model", live.name, other.name])


def test_durable_folder_publish_fsyncs_every_file_and_folder_then_the_parent(tmp_path, monkeypatch):
    tmp = tmp_path / ".model.partial"
    (tmp / "unet").mkdir(parents=True)
    (tmp / "unet" / "weights").write_bytes(b"w")
    (tmp / "model_index.json").write_bytes(b"{}")
    inodes = {p.stat().st_ino for p in (tmp, tmp / "unet", tmp / "unet" / "weights", tmp / "model_index.json")}
    calls = record_fsyncs(monkeypatch)
    publish(tmp, tmp_path / "model", durable=True)
    assert {ino for _, ino in calls[:-1]} == inodes and len(calls) == 5
    assert calls[-1] == (True, tmp_path.stat().st_ino), "the parent last, after the rename"
    assert (tmp_path / "model" / "unet" / "weights").read_bytes() == b"w" and not tmp.exists()
