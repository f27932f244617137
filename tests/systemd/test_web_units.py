"""systemd/: the web app's socket and service and the power requests agree with the code, and are locked down.

The verification comes from `systemd-analyze` (skipped where it is not installed); the web service's exposure
score is measured with the daemon's, in test_systemd.py.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from frame import commands
from frame.cli import build_parser
from frame.cli.web import WEB_CACHE_DIR, WEB_STATE_DIR, cmd_web
from frame.paths import SYSTEM_RUNTIME_DIR

SYSTEMD = Path(__file__).resolve().parents[2] / "systemd"
SOCKET, SERVICE = SYSTEMD / "slowframe-web.socket", SYSTEMD / "slowframe-web.service"
POWER_PATH, POWER_SERVICE = SYSTEMD / "slowframe-power@.path", SYSTEMD / "slowframe-power@.service"

_spec = importlib.util.spec_from_file_location("unit_tests", Path(__file__).with_name("test_systemd.py"))
_unit_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_unit_tests)
read_unit, one = _unit_tests.read_unit, _unit_tests.one

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (Debian package systemd)")


@needs_analyze
def test_web_and_power_units_verify(tmp_path):
    # a template is verified through an instance of it, as systemd would load it
    units = [SOCKET, SERVICE]
    for template in (POWER_PATH, POWER_SERVICE):
        instance = tmp_path / template.name.replace("@.", "@reboot.")
        instance.write_text(template.read_text())
        units.append(instance)
    out = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True,
                         check=False, cwd=tmp_path)
    problems = [line for line in (out.stdout + out.stderr).splitlines()
                if line.strip() and "is not executable" not in line]   # /usr/local/bin/slowframe on the frame
    assert problems == []


def test_the_socket_is_port_80_for_the_lan_only_and_the_service_is_unprivileged():
    socket_unit, service = read_unit(SOCKET), read_unit(SERVICE)
    assert one(socket_unit, "Socket.ListenStream") == "80"
    assert one(socket_unit, "Socket.IPAddressDeny") == "any"
    allowed = one(socket_unit, "Socket.IPAddressAllow").split()
    assert "localhost" in allowed and "192.168.0.0/16" in allowed and "0.0.0.0/0" not in allowed
    assert one(service, "Service.User") not in ("root", "0") and one(service, "Service.User") != "slowframe"
    assert one(service, "Service.CapabilityBoundingSet") == "" and one(service, "Service.NoNewPrivileges") == "yes"
    assert one(service, "Service.PrivateNetwork") == "yes"   # the only network is the socket systemd passes
    assert one(service, "Service.RestrictAddressFamilies") == "AF_UNIX"


def test_the_service_runs_slowframe_web_with_the_folders_it_reads():
    service = read_unit(SERVICE)
    argv = shlex.split(one(service, "Service.ExecStart"))
    assert Path(argv[0]).name == "slowframe" and build_parser().parse_args(argv[1:]).func is cmd_web
    assert Path("/var/lib") / one(service, "Service.StateDirectory") == WEB_STATE_DIR
    assert Path("/var/cache") / one(service, "Service.CacheDirectory") == WEB_CACHE_DIR
    assert one(service, "Service.StateDirectoryMode") == "0700"     # the password hash and the session key


def test_the_web_user_may_use_the_daemons_socket_and_nothing_more():
    service, daemon = read_unit(SERVICE), read_unit(SYSTEMD / "slowframe.service")
    assert one(daemon, "Service.Group") in one(service, "Service.SupplementaryGroups").split()
    assert int(one(daemon, "Service.RuntimeDirectoryMode"), 8) & 0o050 == 0o050   # the group may enter
    assert not int(one(daemon, "Service.RuntimeDirectoryMode"), 8) & 0o020        # but not write (power requests)
    sysusers = [line.split() for line in (SYSTEMD / "slowframe.sysusers").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    assert ["u", one(service, "Service.User")] in [f[:2] for f in sysusers]
    assert ["m", one(service, "Service.User"), one(daemon, "Service.Group")] in [f[:3] for f in sysusers]


def test_power_requests_are_the_files_the_daemon_makes():
    path, service = read_unit(POWER_PATH), read_unit(POWER_SERVICE)
    watched = one(path, "Path.PathExists")
    for action in commands.POWER_ACTIONS:
        assert Path(watched.replace("%i", action)) == SYSTEM_RUNTIME_DIR / action
    assert shlex.split(one(service, "Service.ExecStart")) == ["/usr/bin/systemctl", "--no-block", "%i"]
    assert shlex.split(one(service, "Service.ExecStartPre")) == ["/bin/rm", "-f", watched]
