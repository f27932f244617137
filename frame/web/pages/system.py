"""The System page: model, disk, temperature, under-voltage, uptime, the daemon's log; reboot and shut down."""

from __future__ import annotations

from flask import Blueprint, abort, render_template, request

from frame.web.link import ask
from frame.web.pages.now import duration

blueprint = Blueprint("system", __name__)


@blueprint.get("/system")
def page():
    info = ask("system")
    return render_template("system.html", info=info, log=info.get("log", [])[-60:], duration=duration, error=None)


@blueprint.post("/system/<any(reboot, poweroff):action>")
def power(action: str):
    if request.form.get("confirm") != "yes":
        info = ask("system")
        return render_template("system.html", info=info, log=info.get("log", [])[-60:], duration=duration,
                               error="Tick the box to confirm first."), 400
    reply = ask("power", action=action)
    if not reply.get("ok"):
        abort(500)
    return render_template("error.html", code=200, message=reply["message"][0].upper() + reply["message"][1:] + ".")
