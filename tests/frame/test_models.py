"""Single-file models on the models drive: which are whole and waiting to be imported, and where they go."""

from __future__ import annotations

import os

from frame.models import SETTLE_SECONDS, DropIns, imported_folder, model_folder


def grow(path, data: bytes = b"x" * 100) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_a_single_file_model_is_imported_into_the_folder_named_after_it(tmp_path):
    file = tmp_path / "Juggernaut-XL.v9.safetensors"
    assert imported_folder(file) == tmp_path / "Juggernaut-XL.v9"
    assert model_folder(file) == tmp_path / "Juggernaut-XL.v9"
    (tmp_path / "folder").mkdir()
    assert model_folder(tmp_path / "folder") == tmp_path / "folder"


def test_a_file_being_copied_is_ready_only_once_it_stopped_changing(tmp_path):
    drop = DropIns(tmp_path)
    file = tmp_path / "model.safetensors"
    grow(file)
    drop.look(0.0)
    assert drop.ready(SETTLE_SECONDS - 1) == []
    grow(file)                                  # the copy goes on
    drop.look(SETTLE_SECONDS - 1)
    assert drop.ready(SETTLE_SECONDS + 1) == []
    drop.look(2 * SETTLE_SECONDS)
    assert drop.ready(2 * SETTLE_SECONDS - 1) == [file]


def test_a_rewritten_file_of_the_same_size_starts_its_wait_again(tmp_path):
    drop = DropIns(tmp_path)
    file = tmp_path / "model.safetensors"
    grow(file)
    drop.look(0.0)
    os.utime(file, ns=(0, file.stat().st_mtime_ns + 10**9))
    drop.look(SETTLE_SECONDS)
    assert drop.ready(SETTLE_SECONDS + 1) == []
    assert drop.ready(2 * SETTLE_SECONDS) == [file]


def test_imported_hidden_and_other_files_are_not_offered(tmp_path):
    for name in ("done.safetensors", ".partial.safetensors", "notes.txt", "model.ckpt"):
        grow(tmp_path / name)
    (tmp_path / "done").mkdir()
    (tmp_path / "folder.safetensors").mkdir()
    drop = DropIns(tmp_path)
    drop.look(0.0)
    assert drop.ready(SETTLE_SECONDS) == []


def test_a_failed_import_is_offered_again_only_once_the_file_changes(tmp_path):
    drop = DropIns(tmp_path)
    file = tmp_path / "model.safetensors"
    grow(file)
    drop.look(0.0)
    assert drop.ready(SETTLE_SECONDS) == [file]
    drop.failed(file)
    drop.look(SETTLE_SECONDS)
    assert drop.ready(10 * SETTLE_SECONDS) == []
    grow(file)                                  # copied again
    drop.look(10 * SETTLE_SECONDS)
    assert drop.ready(11 * SETTLE_SECONDS) == [file]


def test_the_configs_single_file_counts_wherever_it_is_and_a_missing_drive_is_no_error(tmp_path):
    drop = DropIns(tmp_path / "no-such-drive")
    file = tmp_path / "elsewhere" / "mine.safetensors"
    file.parent.mkdir()
    grow(file)
    drop.extra = file
    drop.look(0.0)
    assert drop.ready(SETTLE_SECONDS) == [file]
