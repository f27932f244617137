"""A soak of a real `slowframe run` on the tiny random model and the file display, disturbed at random.

Used by tests/frame/test_soak.py (a short run in CI) and bench/soak.py (as long as you like, printing
the counts). The disturbances: the commands the buttons send (skip, regenerate, browse) and other
socket requests, garbage on the socket, good and bad config edits (some written in two halves, as a
slow editor saves), damaged history files, SIGKILL of the worker and of the daemon (restarted at
once, as systemd does), and a full disk for a few seconds when the state folder is a small tmpfs.

The invariants, checked by ``check``: the daemon answered `status` within 2 s at every check while
it was up, every picture in the history that was not damaged on purpose is readable, no job is in
the history twice, every job the daemon started is accounted for (in the history, skipped or
replaced, failed, set aside, or the one under way at the end), and the pictures equal what an
undisturbed pipeline makes from the same prompt and seed.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from daemon_processes import Daemon
from frame import control
from frame.pictures import PictureError, open_picture

STATUS_SECONDS = 2.0


def config_text(model: Path, variant: int) -> str:
    prompts = ["a {red|blue} boat", "a {quiet|stormy} harbour", "an old {mill|barn}"]
    return f"""\
model: {{path: {model}, preset: default}}
display: {{backend: file, panel: spectra6-4.0, output: panel, min_interval: 0}}
themes:
  - {{name: boats, prompt: "{prompts[variant % 3]}", steps: 2, size: 256x256, guidance: 5}}
  - {{name: fields, prompt: "a field of {{wheat|poppies}}", steps: 2, size: 256x256, guidance: 5}}
order: sequential
history: {{keep: 1000}}
buttons: {{enabled: false}}
"""


BAD_CONFIGS = [
    "display: {panel: [spectra6-7.3]}\n",
    "themes:\n  - name: x\n    prompt: \"a \\uD800 b\"\n",
    "model: {path: 5, preset: nope}\nthemes: [",
    "a: &a [*a]\n",
    "\x00\x01\x02",
]


@dataclass
class Counts:
    """What happened in a soak; ``failures`` lists every broken invariant."""

    seconds: float = 0.0
    status_checks: int = 0
    slowest_status: float = 0.0
    presses: int = 0
    commands: int = 0
    garbage: int = 0
    good_edits: int = 0
    bad_edits: int = 0
    damaged: int = 0
    worker_kills: int = 0
    daemon_kills: int = 0
    disk_full: int = 0
    pictures: int = 0
    compared: int = 0
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{self.seconds:.0f} s: {self.status_checks} status checks (slowest {self.slowest_status:.2f} s), "
                f"{self.presses} button commands, {self.commands} other commands, {self.garbage} garbage requests, "
                f"{self.good_edits} good and {self.bad_edits} bad config edits, {self.damaged} damaged history "
                f"files, {self.worker_kills} worker and {self.daemon_kills} daemon SIGKILLs, {self.disk_full} "
                f"disk-full periods; {self.pictures} pictures, {self.compared} compared with an undisturbed run; "
                f"{len(self.failures)} broken invariants")


def undisturbed(model: Path):
    """record -> the picture an undisturbed pipeline makes from a history record's prompt and seed."""
    from engine.sdxl import Pipeline

    pipe = Pipeline.load(model, preset="default")

    def make(record: dict):
        return pipe.generate(record["prompt"], negative_prompt=record.get("negative_prompt") or None,
                             steps=record["steps"], guidance=record["guidance"], seed=record["seed"],
                             width=record["width"], height=record["height"], sampler=record["sampler"]).image
    return make


class Soak:
    """One soak in ``root``; ``state`` may be a small filesystem of its own for the disk-full periods."""

    def __init__(self, root: Path, model: Path, state: Path, seed: int, disk_full: bool):
        self.root, self.model, self.state = root, model, state
        self.rng = random.Random(seed)
        self.can_fill_disk = disk_full
        self.counts = Counts()
        self.damaged: set[str] = set()        # history entries damaged on purpose (file stems)
        self.damaged_jobs: set[str] = set()   # and the jobs they held
        self.variant = 0
        self.daemon: Daemon | None = None

    # ------------------------------------------------------------ the daemon

    def start(self) -> None:
        (self.root / "notify.sock").unlink(missing_ok=True)
        self.daemon = Daemon(self.root, config_text(self.model, self.variant), generator="frame.worker:load_sdxl",
                             state_dir=self.state)
        self.daemon.wait_for(lambda m: "READY=1" in m, "READY=1", timeout=120)

    def status(self) -> None:
        started = time.monotonic()
        try:
            reply = control.request("status", self.root / "run" / control.SOCKET_NAME, timeout=STATUS_SECONDS)
            if not reply.get("ok"):
                self.counts.failures.append(f"status refused: {reply}")
        except control.ControlError as exc:
            self.counts.failures.append(f"status not answered within {STATUS_SECONDS} s: {exc}")
        took = time.monotonic() - started
        self.counts.status_checks += 1
        self.counts.slowest_status = max(self.counts.slowest_status, took)

    def worker_pid(self) -> int | None:
        pid = self.daemon.proc.pid
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                children = (task / "children").read_text().split()
            except OSError:
                continue
            if children:
                return int(children[0])
        return None

    # ------------------------------------------------------------ disturbances

    def disturb(self) -> None:
        action = self.rng.choices(
            ["press", "command", "garbage", "good_edit", "bad_edit", "damage", "kill_worker", "kill_daemon",
             "disk_full"], weights=[6, 3, 2, 2, 2, 2, 2, 1, 1 if self.can_fill_disk else 0])[0]
        getattr(self, f"_{action}")()

    def _send(self, **request) -> None:
        try:
            control.request(request.pop("command"), self.root / "run" / control.SOCKET_NAME, timeout=5, **request)
        except control.ControlError as exc:
            self.counts.failures.append(f"a command was not answered: {exc}")

    def _press(self) -> None:
        choice = self.rng.choice([("skip", {}), ("regenerate", {}), ("show", {"which": "previous"}),
                                  ("show", {"which": "next"}), ("show", {"which": "latest"}),
                                  ("show", {"which": "status"})])
        self._send(command=choice[0], **choice[1])
        self.counts.presses += 1

    def _command(self) -> None:
        history = sorted((self.state / "history").glob("*.png")) if (self.state / "history").exists() else []
        image = str(self.rng.choice(history)) if history else str(self.root / "missing.png")
        self._send(**self.rng.choice([{"command": "reload"}, {"command": "show", "image": image},
                                      {"command": "nonsense"}]))
        self.counts.commands += 1

    def _garbage(self) -> None:
        import socket
        payload = self.rng.choice([b"[" * 60000 + b"\n", b"\xff\xfe\n", b'{"command": 5}\n', b"x" * 70000,
                                   b'{"command": "show", "image": {"a": 1}}\n'])
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(5)
                sock.connect(str(self.root / "run" / control.SOCKET_NAME))
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                sock.recv(65536)
        except OSError:
            pass
        self.counts.garbage += 1

    def _write_config(self, text: str, halves: bool) -> None:
        path = self.root / "frame.yaml"
        if halves:   # a slow editor: the daemon may read the first half alone
            path.write_text(text[: len(text) // 2])
            time.sleep(self.rng.uniform(0.0, 1.5))
        path.write_text(text)

    def _good_edit(self) -> None:
        self.variant += 1
        self._write_config(config_text(self.model, self.variant), halves=self.rng.random() < 0.3)
        self.counts.good_edits += 1

    def _bad_edit(self) -> None:
        self._write_config(self.rng.choice(BAD_CONFIGS), halves=self.rng.random() < 0.3)
        time.sleep(self.rng.uniform(1.0, 3.0))
        self._write_config(config_text(self.model, self.variant), halves=False)   # the user fixes it
        self.counts.bad_edits += 1

    def _damage(self) -> None:
        history = sorted((self.state / "history").glob("*.png")) if (self.state / "history").exists() else []
        if not history:
            return
        picture = self.rng.choice(history)
        if picture.stem in self.damaged:
            return
        try:
            self.damaged_jobs.add(json.loads(picture.with_suffix(".json").read_text())["id"])
        except (OSError, ValueError, KeyError):
            return
        self.damaged.add(picture.stem)
        if self.rng.random() < 0.5:
            data = picture.read_bytes()
            picture.write_bytes(data[: self.rng.randrange(len(data))])
        else:
            picture.with_suffix(".json").write_text(self.rng.choice(["[1, 2]", "{", "null", "[" * 10000]))
        self.counts.damaged += 1

    def _kill_worker(self) -> None:
        pid = self.worker_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
                self.counts.worker_kills += 1
            except ProcessLookupError:
                pass

    def _kill_daemon(self) -> None:
        worker = self.worker_pid()
        self.daemon.proc.send_signal(signal.SIGKILL)
        self.daemon.proc.wait()
        self.daemon.close()
        if worker is not None:   # systemd's KillMode=control-group takes the worker with the daemon
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.counts.daemon_kills += 1
        self.start()

    def _disk_full(self) -> None:
        filler = self.state / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 65536):
                pass
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        until = time.monotonic() + self.rng.uniform(3, 8)
        while time.monotonic() < until:
            self.status()
            time.sleep(0.5)
        filler.unlink()
        self.counts.disk_full += 1

    # ------------------------------------------------------------ the run and its checks

    def run(self, seconds: float) -> Counts:
        started = time.monotonic()
        self.start()
        try:
            while time.monotonic() - started < seconds:
                self.status()
                self.disturb()
                self.status()
                time.sleep(self.rng.uniform(0.2, 1.5))
            self._write_config(config_text(self.model, self.variant), halves=False)
            self.wait_for_pictures(timeout=120)
        finally:
            if self.daemon is not None:
                self.daemon.proc.send_signal(signal.SIGTERM)
                try:
                    self.daemon.proc.wait(timeout=30)
                except Exception:
                    self.counts.failures.append("the daemon did not stop within 30 s of SIGTERM")
                self.daemon.close()
        self.counts.seconds = time.monotonic() - started
        return self.counts

    def wait_for_pictures(self, timeout: float) -> None:
        """A quiet spell at the end: at least one more picture reaches the history undisturbed."""
        before = len(list((self.state / "history").glob("*.json")))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(list((self.state / "history").glob("*.json"))) <= before:
            self.status()
            time.sleep(1.0)
        if len(list((self.state / "history").glob("*.json"))) <= before:
            self.counts.failures.append(f"no new picture within {timeout:.0f} s of quiet at the end")

    def check(self, compare: int, regenerate) -> Counts:
        """The invariants over the state folder and the daemon's log; ``regenerate(record)`` gives the
        undisturbed picture for a history record (compared for up to ``compare`` of them)."""
        history = self.state / "history"
        records = {}
        for sidecar in sorted(history.glob("*.json")):
            if sidecar.stem in self.damaged:
                continue
            try:
                record = json.loads(sidecar.read_text())
                picture = open_picture(sidecar.with_suffix(".png"))
            except (OSError, ValueError, PictureError) as exc:
                self.counts.failures.append(f"history entry {sidecar.stem} unreadable: {exc}")
                continue
            if record["id"] in records:
                self.counts.failures.append(f"job {record['id']} is in the history twice")
            records[record["id"]] = (record, picture)
        self.counts.pictures = len(records)
        log = (self.root / "daemon.log").read_text(errors="replace")
        started = set(re.findall(r"new job (\S+):", log))
        ended = set(re.findall(r"job (\S+) \(.*?\) (?:skipped|replaced by a new picture|failed)", log))
        aside = {p.name.split("~")[0] for p in (self.state / "set-aside").glob("*")} \
            if (self.state / "set-aside").exists() else set()
        current = set()
        try:
            current.add(json.loads((self.state / "job" / "job.json").read_text())["job"]["id"])
        except (OSError, ValueError, KeyError):
            pass
        if not started:
            self.counts.failures.append("no 'new job' line in the daemon's log: the accounting cannot be checked")
        lost = started - set(records) - ended - aside - current - self.damaged_jobs
        if lost:
            self.counts.failures.append(f"jobs started but found nowhere: {sorted(lost)}")
        for record, picture in list(records.values())[-compare:]:
            expected = regenerate(record)
            if not np.array_equal(np.asarray(picture), np.asarray(expected)):
                self.counts.failures.append(f"history picture {record['id']} differs from an undisturbed run")
            self.counts.compared += 1
        return self.counts
