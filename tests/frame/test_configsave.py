"""The root step that saves the web app's edit on the card: only a plain file of the daemon's, only checked text,
the old file kept, written durably, an answer left for the daemon and the request always removed."""

from __future__ import annotations

import json
import os

import pytest

import engine.atomic
from frame import configsave
from frame.cli import main
from frame.configsave import REQUEST_NAME, RESULT_NAME, backup_path, commit
from frame.userfiles import MAX_FILE_BYTES

OLD = "themes:\n  - {name: sea, prompt: a calm sea}\n"
NEW = "themes:\n  - {name: sea, prompt: a rough sea}\norder: shuffle\n"


@pytest.fixture
def run(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


@pytest.fixture
def card(tmp_path):
    folder = tmp_path / "firmware"
    folder.mkdir()
    (folder / "slowframe.yaml").write_text(OLD)
    return folder / "slowframe.yaml"


def answer(run) -> dict:
    return json.loads((run / RESULT_NAME).read_text())


def left_alone(card) -> bool:
    return card.read_text() == OLD and not backup_path(card).exists() and \
        [p.name for p in card.parent.iterdir()] == [card.name]


def test_good_text_lands_durably_with_the_old_file_kept_and_the_daemon_is_answered(run, card, monkeypatch):
    synced = []
    real_fsync = engine.atomic._fsync
    monkeypatch.setattr(engine.atomic, "_fsync", lambda path: (synced.append(path), real_fsync(path)))
    (run / REQUEST_NAME).write_text(NEW)
    result = commit(run, card)
    assert result["ok"] and result["request"] == configsave.request_id(NEW.encode())
    assert card.read_text() == NEW and backup_path(card).read_text() == OLD
    assert answer(run) == result and not (run / REQUEST_NAME).exists()
    assert sorted(p.name for p in card.parent.iterdir()) == ["slowframe.yaml", "slowframe.yaml.bak"]
    # each of the two files fsynced under its temporary name before the rename, and the folder after it
    assert [p == card.parent for p in synced] == [False, True, False, True]


def test_a_first_config_is_saved_with_no_backup(run, tmp_path):
    card = tmp_path / "slowframe.yaml"
    (run / REQUEST_NAME).write_text(NEW)
    assert commit(run, card)["ok"] and card.read_text() == NEW and not backup_path(card).exists()


def test_text_with_errors_is_refused_with_line_and_column_and_the_file_is_unchanged(run, card):
    (run / REQUEST_NAME).write_text(NEW.replace("shuffle", "shufle"))
    result = commit(run, card)
    assert not result["ok"] and "1 error(s); nothing was saved" in result["message"]
    [problem] = result["problems"]
    assert (problem["line"], problem["column"], problem["file"]) == (3, 8, str(card))
    assert answer(run) == result and left_alone(card) and not (run / REQUEST_NAME).exists()


def test_what_the_checker_finds_in_files_the_text_names_goes_to_the_journal_only(run, card, tmp_path):
    # as root the checker may read files the daemon may not: nothing of theirs goes back to the daemon
    secret = tmp_path / "secret" / "token.txt"
    secret.parent.mkdir()
    secret.write_text("s3cret-value {never closed\n")
    (run / REQUEST_NAME).write_text(f"wildcard_folder: {secret.parent}\n"
                                    "themes:\n  - {name: sea, prompt: a __token__ sea}\n")
    journal = []
    result = commit(run, card, report=journal.append)
    assert not result["ok"] and result["problems"] == [] and "in the root step's journal" in result["message"]
    assert str(secret) not in (run / RESULT_NAME).read_text() and left_alone(card)
    assert [line.split(":")[0] for line in journal] == [str(secret)]


@pytest.mark.parametrize("data, says", [
    (b"a" * (MAX_FILE_BYTES + 1), f"over {MAX_FILE_BYTES:,} bytes"),
    (b"themes: []\n\xff\xfe\n", "not UTF-8 text (line 2)"),
    (b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n".encode()
        for p, n in zip("abcdefgh", "bcdefghi")), "error(s)"),
], ids=["oversized", "not-utf8", "yaml-bomb"])
def test_text_that_is_no_config_is_refused(run, card, data, says):
    (run / REQUEST_NAME).write_bytes(data)
    result = commit(run, card)
    assert not result["ok"] and says in result["message"] and "nothing was saved" in result["message"]
    assert left_alone(card) and not (run / REQUEST_NAME).exists()


def test_a_symbolic_link_is_removed_unread(run, card, tmp_path):
    secret = tmp_path / "secret.yaml"   # a file of root's that is a valid config: it must not reach the card
    secret.write_text(NEW)
    (run / REQUEST_NAME).symlink_to(secret)
    result = commit(run, card)
    assert not result["ok"] and "is not a plain file" in result["message"] and result["request"] is None
    assert left_alone(card) and secret.read_text() == NEW and not os.path.lexists(run / REQUEST_NAME)


def test_a_hard_link_to_another_file_is_refused(run, card, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(NEW)
    os.link(other, run / REQUEST_NAME)
    result = commit(run, card)
    assert not result["ok"] and "hard link" in result["message"]
    assert left_alone(card) and other.read_text() == NEW and not (run / REQUEST_NAME).exists()


def test_a_fifo_or_a_folder_is_refused_and_removed(run, card):
    os.mkfifo(run / REQUEST_NAME)
    assert "not a regular file" in commit(run, card)["message"]   # opened without blocking, never read
    assert left_alone(card) and not os.path.lexists(run / REQUEST_NAME)
    (run / REQUEST_NAME).mkdir()
    (run / REQUEST_NAME / "slowframe.yaml").write_text(NEW)
    assert "is a folder" in commit(run, card)["message"]
    assert left_alone(card) and not os.path.lexists(run / REQUEST_NAME)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_file_of_another_user_is_refused(run, card):
    (run / REQUEST_NAME).write_text(NEW)
    os.chown(run / REQUEST_NAME, os.stat(run).st_uid + 1, -1)
    result = commit(run, card)
    assert not result["ok"] and "does not belong to the owner" in result["message"] and left_alone(card)


def test_a_withdrawn_request_is_no_work_and_gets_no_answer(run, card):
    assert commit(run, card) is None
    assert left_alone(card) and not (run / RESULT_NAME).exists()


def test_the_command_saves_refuses_and_reports(run, card, capsys):
    argv = ["config", "commit", "--folder", str(run), "--file", str(card)]
    (run / REQUEST_NAME).write_text(NEW)
    assert main(argv) == 0 and card.read_text() == NEW
    assert capsys.readouterr().out.strip() == f"saved {card}"
    (run / REQUEST_NAME).write_text("order: [")
    assert main(argv) == 0 and card.read_text() == NEW      # a refusal is an answer, not a failed unit
    assert "nothing was saved" in capsys.readouterr().err
    assert main(argv) == 0 and "withdrew" in capsys.readouterr().out
