"""The shutdown and reboot actions make a request file in the runtime folder, which systemd acts on."""

from __future__ import annotations

from pathlib import Path

import pytest

from frame.power import PowerError, SystemPower

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"


def test_shutdown_and_reboot_make_the_request_files_systemd_watches(tmp_path):
    power = SystemPower(tmp_path)
    assert power.switch("shutdown") == tmp_path / "poweroff"
    assert power.switch("reboot") == tmp_path / "reboot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["poweroff", "reboot"]
    units = {unit: (SYSTEMD / unit).read_text() for unit in ("slowframe-power@.path", "slowframe-power@.service")}
    assert "PathExists=/run/slowframe/%i" in units["slowframe-power@.path"]
    assert "systemctl --no-block %i" in units["slowframe-power@.service"]


def test_without_a_runtime_folder_or_a_writable_one_the_error_says_why(tmp_path):
    with pytest.raises(PowerError, match="no runtime folder"):
        SystemPower(None).switch("shutdown")
    with pytest.raises(PowerError, match="cannot make"):
        SystemPower(tmp_path / "missing").switch("reboot")
    with pytest.raises(PowerError, match="no such power action"):
        SystemPower(tmp_path).switch("suspend")
