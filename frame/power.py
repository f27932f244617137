"""Switching the frame off and restarting it (the ``shutdown`` and ``reboot`` actions): logind, through systemctl.

The daemon runs as the ``slowframe`` service user. ``systemctl poweroff`` (or ``reboot``) from a
user that is not root asks systemd-logind over D-Bus, and logind asks polkit; the image installs
systemd/60-slowframe-power.rules in /etc/polkit-1/rules.d/, which lets user slowframe power off and
reboot (also while someone is logged in over ssh) and nothing else. The service unit's sandbox
allows it: the system bus is an AF_UNIX socket, and nothing on disk is written. systemd then stops
the service first, so the job is checkpointed as on any stop and resumes at the next start.

Elsewhere (``slowframe run`` on a PC) polkit decides as for any user; a refusal is a PowerError
whose message says what systemctl said.
"""

from __future__ import annotations

import subprocess

SYSTEMCTL_VERBS = {"shutdown": "poweroff", "reboot": "reboot"}


class PowerError(Exception):
    """The system would not shut down or restart (the message says why)."""


class SystemPower:
    """``switch("shutdown" | "reboot")`` through ``systemctl``; PowerError when it is refused."""

    def __init__(self, systemctl: str = "systemctl", timeout: float = 30.0):
        self.systemctl = systemctl
        self.timeout = timeout

    def switch(self, action: str) -> None:
        verb = SYSTEMCTL_VERBS[action]
        command = [self.systemctl, "--no-ask-password", verb]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PowerError(f"`{' '.join(command)}` could not run: {exc}") from None
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout).split()) or f"exit status {done.returncode}"
            raise PowerError(f"`{' '.join(command)}` was refused: {said}")
