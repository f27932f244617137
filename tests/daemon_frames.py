"""The daemon's loop for tests: a Frame in a temporary folder, with a fake clock, a runner the test drives, the
file display and mock buttons, and the config it starts with."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from gpiozero.pins.mock import MockFactory

from frame.buttons import Buttons
from frame.daemon import Daemon
from frame.display.file_backend import FileDisplay
from frame.notify import Notifier
from frame_fakes import FakeClock, ManualRunner

CONFIG = """\
model: {path: model, preset: rpi}
display: {backend: file, panel: spectra6-7.3, output: panel, min_interval: 180}
themes:
  - {name: sea, prompt: "a {calm|rough} sea"}
  - {name: hills, prompt: "green {round|steep} hills"}
  - {name: town, prompt: "an old town", size: 1024x768}
order: sequential
schedule: {times: ["07:00", "19:00"], quiet_hours: ["22:00-06:00"]}
history: {keep: 3}
buttons: {hold_time: 0.1}
"""


class Frame:
    """A daemon in a temporary folder with everything fake but the display and the buttons' logic."""

    def __init__(self, tmp_path: Path, config: str = CONFIG, start=dt.datetime(2025, 3, 1, 6, 0),
                 notifier: Notifier | None = None, display_class=FileDisplay):
        self.models = tmp_path / "models"      # the models drive; made by the tests that drop models in
        self.root = tmp_path
        (tmp_path / "model").mkdir(exist_ok=True)
        self.config_path = tmp_path / "frame.yaml"
        if not self.config_path.exists():
            self.config_path.write_text(config)
        self.clock = FakeClock(start)
        self.pins = MockFactory(revision="902120")
        self.displays: list = []
        self.closed = False

        def display_factory(cfg):
            display = display_class(cfg, clock=self.clock.monotonic, sleep=self._no_sleep)
            self.displays.append(display)
            return display

        self.daemon = Daemon(self.config_path, tmp_path / "state", None, clock=self.clock,
                             rng=__import__("random").Random(5), runner_factory=ManualRunner,
                             display_factory=display_factory,
                             buttons_factory=lambda s, pins, post: Buttons(s, pins, post, pin_factory=self.pins),
                             notifier=notifier or Notifier(env={}), models_dir=self.models)
        self.runner: ManualRunner = self.daemon.runner
        self.daemon.start(control=False)
        self.daemon.step()

    @staticmethod
    def _no_sleep(seconds: float) -> None:
        raise AssertionError(f"the daemon made the display sleep {seconds} s instead of waiting in its loop")

    @property
    def display(self):
        return self.daemon.display

    def at(self, hour: int, minute: int = 0, day: int = 1) -> None:
        self.clock.set(dt.datetime(2025, 3, day, hour, minute))
        self.daemon.step()

    def step(self) -> None:
        self.daemon.step()

    def press(self, pin: int, held: float = 0.0, expect_events: int = 1) -> None:
        before = self.daemon.events.qsize()
        p = self.pins.pin(pin)
        p.drive_low()
        time.sleep(held)
        p.drive_high()
        deadline = time.monotonic() + 5
        while self.daemon.events.qsize() < before + expect_events and time.monotonic() < deadline:
            time.sleep(0.01)

    def history(self) -> list[str]:
        return [e.theme for e in self.daemon.history.entries()]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.daemon.shutdown()
            self.pins.reset()
