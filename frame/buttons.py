"""The panel's buttons: short and long presses turned into actions queued for the daemon.

gpiozero runs button callbacks on its own pin thread, so the callbacks here only post
a ``ButtonEvent`` (to the daemon's queue) and return; the daemon acts on it in its main
loop. A press during a 30-45 s refresh therefore waits in the queue instead of being
lost, and nothing slow ever runs on the pin thread.

Short and long presses follow gpiozero's held-flag pattern: ``when_held`` marks the
press as long (and posts the hold action); ``when_released`` posts the press action
only when no hold happened. A button whose hold action is "none" has no ``when_held``,
so however long it is held it counts as a press.

gpiozero is imported when buttons are created, so the rest of the frame (and machines
without it) never needs it. Pass ``pin_factory`` (e.g. gpiozero's MockFactory) to drive
the buttons without hardware.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from frame.config import ButtonSettings

log = logging.getLogger("slowframe.buttons")


@dataclass(frozen=True)
class ButtonEvent:
    """A finished press of ``button``: ``kind`` is "press" or "hold"; ``action`` what to do."""

    button: str
    kind: str
    action: str


class ButtonsUnavailable(Exception):
    """gpiozero is missing or the GPIO pins cannot be claimed (the message says which)."""


class Buttons:
    """gpiozero Buttons on the configured pins, posting ButtonEvents; ``close()`` frees the pins."""

    def __init__(self, settings: ButtonSettings, pins: Mapping[str, int], post: Callable[[ButtonEvent], None],
                 pin_factory=None):
        try:
            from gpiozero import Button
            from gpiozero.exc import GPIOZeroError
        except ImportError as exc:
            raise ButtonsUnavailable(f"gpiozero is not installed ({exc}); install it with "
                                     "`pip install gpiozero` or Debian's python3-gpiozero") from exc
        self._post = post
        self._devices = []
        try:
            for spec in settings.buttons:
                if spec.press == "none" and spec.hold == "none":
                    continue
                pin = pins[spec.name]
                button = Button(pin, pull_up=True, hold_time=settings.hold_time, pin_factory=pin_factory)
                self._wire(button, spec.name, spec.press, spec.hold)
                self._devices.append(button)
                log.debug("button %s on GPIO %d: press=%s hold=%s", spec.name, pin, spec.press, spec.hold)
        except (GPIOZeroError, OSError, RuntimeError) as exc:
            self.close()
            raise ButtonsUnavailable(f"cannot use the buttons' GPIO pins: {exc}") from exc

    def _wire(self, button, name: str, press: str, hold: str) -> None:
        held = threading.Event()   # per button: set by when_held, read and cleared by when_released

        def on_held() -> None:
            held.set()
            self._post(ButtonEvent(name, "hold", hold))

        def on_released() -> None:
            if not held.is_set() and press != "none":
                self._post(ButtonEvent(name, "press", press))
            held.clear()

        if hold != "none":
            button.when_held = on_held
        button.when_released = on_released

    def close(self) -> None:
        for device in self._devices:
            device.close()
        self._devices.clear()
