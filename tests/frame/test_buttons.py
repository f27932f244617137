"""Buttons through gpiozero's MockFactory: short and long presses, queued events, pins."""

from __future__ import annotations

import queue
import time

import pytest

from gpiozero.pins.mock import MockFactory   # a test dependency: .ci/run installs it

from frame.buttons import ButtonEvent, Buttons, ButtonsUnavailable
from frame.config import ButtonSettings, ButtonSpec


@pytest.fixture
def factory():
    f = MockFactory(revision="902120")   # a Raspberry Pi Zero 2 W
    yield f
    f.reset()


def settings(hold_time=0.05, **overrides) -> ButtonSettings:
    specs = {"A": ButtonSpec("A", None, "previous", "latest"), "C": ButtonSpec("C", None, "skip", "regenerate"),
             "D": ButtonSpec("D", None, "status", "none")}
    specs.update(overrides)
    return ButtonSettings(True, hold_time, tuple(specs.values()))


def wait_for(events: queue.Queue, n: int, timeout: float = 5.0) -> list[ButtonEvent]:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        try:
            out.append(events.get(timeout=0.05))
        except queue.Empty:
            pass
    return out


def press(factory, pin: int, held: float = 0.0) -> None:
    p = factory.pin(pin)
    p.drive_low()
    time.sleep(held)
    p.drive_high()


def test_a_short_press_posts_the_press_action(factory):
    events = queue.Queue()
    buttons = Buttons(settings(), {"A": 5, "C": 16, "D": 24}, events.put, pin_factory=factory)
    press(factory, 16)
    assert wait_for(events, 1) == [ButtonEvent("C", "press", "skip")]
    buttons.close()


def test_a_long_press_posts_only_the_hold_action(factory):
    events = queue.Queue()
    buttons = Buttons(settings(), {"A": 5, "C": 16, "D": 24}, events.put, pin_factory=factory)
    press(factory, 16, held=0.3)
    assert wait_for(events, 2, timeout=0.8) == [ButtonEvent("C", "hold", "regenerate")]
    press(factory, 16)   # the held flag was cleared: the next short press is a press again
    assert wait_for(events, 1) == [ButtonEvent("C", "press", "skip")]
    buttons.close()


def test_a_button_without_a_hold_action_counts_long_presses_as_presses(factory):
    events = queue.Queue()
    buttons = Buttons(settings(), {"A": 5, "C": 16, "D": 24}, events.put, pin_factory=factory)
    press(factory, 24, held=0.3)
    assert wait_for(events, 2, timeout=0.8) == [ButtonEvent("D", "press", "status")]
    buttons.close()


def test_presses_queue_up_while_nobody_reads_them(factory):
    """The daemon reads the queue only between refreshes: nothing is lost meanwhile, order kept."""
    events = queue.Queue()
    buttons = Buttons(settings(), {"A": 5, "C": 16, "D": 24}, events.put, pin_factory=factory)
    for pin in (5, 5, 24, 16):
        press(factory, pin)
    time.sleep(0.2)
    assert [e.button for e in wait_for(events, 4)] == ["A", "A", "D", "C"]
    buttons.close()


def test_buttons_with_no_actions_claim_no_pin_and_close_frees_the_pins(factory):
    events = queue.Queue()
    quiet = settings(D=ButtonSpec("D", None, "none", "none"))
    buttons = Buttons(quiet, {"A": 5, "C": 16, "D": 24}, events.put, pin_factory=factory)
    assert len(buttons._devices) == 2
    buttons.close()
    again = Buttons(quiet, {"A": 5, "C": 16, "D": 24}, events.put, pin_factory=factory)   # pins free again
    again.close()


def test_a_pin_in_use_is_a_clear_error(factory):
    from gpiozero import LED

    led = LED(16, pin_factory=factory)
    with pytest.raises(ButtonsUnavailable, match="GPIO pins"):
        Buttons(settings(), {"A": 5, "C": 16, "D": 24}, lambda e: None, pin_factory=factory)
    led.close()
    Buttons(settings(), {"A": 5, "C": 16, "D": 24}, lambda e: None, pin_factory=factory).close()
