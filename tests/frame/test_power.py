"""The shutdown and reboot actions run `systemctl poweroff|reboot`, here a fake systemctl that records its calls."""

from __future__ import annotations

import pytest

from frame.power import PowerError, SystemPower


def fake_systemctl(tmp_path, exit_status: int = 0, said: str = ""):
    script = tmp_path / "systemctl"
    script.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path}/calls"\necho "{said}" >&2\nexit {exit_status}\n')
    script.chmod(0o755)
    return script


def calls(tmp_path) -> list[str]:
    return (tmp_path / "calls").read_text().splitlines()


def test_shutdown_and_reboot_ask_logind_through_systemctl_without_a_password_prompt(tmp_path):
    power = SystemPower(str(fake_systemctl(tmp_path)))
    power.switch("shutdown")
    power.switch("reboot")
    assert calls(tmp_path) == ["--no-ask-password poweroff", "--no-ask-password reboot"]


def test_a_refusal_says_what_systemctl_said(tmp_path):
    power = SystemPower(str(fake_systemctl(tmp_path, 1, "Call to PowerOff failed: Access denied")))
    with pytest.raises(PowerError, match="was refused: Call to PowerOff failed: Access denied"):
        power.switch("shutdown")
    with pytest.raises(PowerError, match="could not run"):
        SystemPower(str(tmp_path / "no-such-systemctl")).switch("reboot")
