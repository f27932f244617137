"""The Now page: what the panel shows, the picture in progress (its preview, step, time left) and the buttons."""

from __future__ import annotations

from flask import Blueprint, abort, flash, redirect, render_template, send_file, url_for

from frame.web.link import ask, ask_for_file

blueprint = Blueprint("now", __name__)
ACTIONS = {"skip": ("skip", {}), "regenerate": ("regenerate", {}), "previous": ("show", {"which": "previous"}),
           "next": ("show", {"which": "next"}), "latest": ("show", {"which": "latest"}), "unpin": ("unpin", {})}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    minutes = int(seconds // 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"


@blueprint.get("/")
def page():
    status = ask("status")
    reply, preview = ask_for_file("preview")
    if preview is not None:
        preview.close()
    return render_template("now.html", status=status, job=status.get("job"), has_preview=preview is not None,
                           duration=duration)


@blueprint.post("/action/<name>")
def action(name: str):
    if name not in ACTIONS:
        abort(404)
    command, fields = ACTIONS[name]
    reply = ask(command, **fields)
    flash(reply.get("message", "done"), "info" if reply.get("ok") else "error")
    return redirect(url_for("now.page"))


@blueprint.get("/preview.png")
def preview():
    reply, file = ask_for_file("preview")
    if file is None:
        abort(404)
    response = send_file(file, mimetype="image/png", max_age=0)
    response.headers["Cache-Control"] = "no-store"
    return response
