"""The History page: thumbnails with prompt and seed; show one on the panel, make its theme again, delete it,
download its PNG (its parameters inside)."""

from __future__ import annotations

import re

from flask import Blueprint, abort, current_app, flash, redirect, render_template, request, send_file, url_for

from frame.web.link import ask, ask_for_file
from frame.web.photos import PhotoError, thumbnail

blueprint = Blueprint("history", __name__)
PER_PAGE = 24
# the history's names (frame.history): finish time, theme slug, ~N for a second picture in the same second
ENTRY_ID = re.compile(r"^\d{8}-\d{6}-[a-z0-9-]{1,40}(~\d{1,6})?$")


def _checked(entry_id: str) -> str:
    """``entry_id`` when it can be a history name; 404 for anything else (a path, dots, slashes)."""
    if not ENTRY_ID.fullmatch(entry_id):
        abort(404)
    return entry_id


@blueprint.get("/history")
def page():
    reply = ask("history")
    entries = list(reversed(reply.get("entries", [])))
    _forget_thumbnails({e.get("id") for e in entries})
    try:
        number = max(1, int(request.args.get("page", "1")))
    except ValueError:
        number = 1
    pages = max(1, -(-len(entries) // PER_PAGE))
    number = min(number, pages)
    shown = entries[(number - 1) * PER_PAGE:number * PER_PAGE]
    return render_template("history.html", entries=shown, total=len(entries), page=number, pages=pages,
                           on_panel=reply.get("shown"))


def _forget_thumbnails(kept: set) -> None:
    """Remove the thumbnails of pictures the history no longer has (pruned by the daemon, deleted on the card)."""
    folder = current_app.config["SLOWFRAME_CACHE"] / "thumbs"
    if folder.is_dir():
        for thumb in folder.glob("*.jpg"):
            if thumb.stem not in kept:
                thumb.unlink(missing_ok=True)


@blueprint.get("/history/<entry_id>/thumb.jpg")
def thumb(entry_id: str):
    entry_id = _checked(entry_id)
    target = current_app.config["SLOWFRAME_CACHE"] / "thumbs" / f"{entry_id}.jpg"
    if not target.exists():
        reply, file = ask_for_file("history_file", id=entry_id)
        if file is None:
            abort(404)
        with file:
            try:
                thumbnail(file, target)
            except PhotoError:
                abort(404)
    return send_file(target, mimetype="image/jpeg", max_age=86400)


@blueprint.get("/history/<entry_id>.png")
def download(entry_id: str):
    reply, file = ask_for_file("history_file", id=_checked(entry_id))
    if file is None:
        abort(404)
    return send_file(file, mimetype="image/png", as_attachment=request.args.get("view") is None,
                     download_name=reply.get("name", f"{entry_id}.png"))


@blueprint.post("/history/<entry_id>/<any(show, again):what>")
def show(entry_id: str, what: str):
    """Show the picture on the panel, or make a new picture of its theme."""
    reply = ask(what, id=_checked(entry_id))
    flash(reply.get("message", ""), "info" if reply.get("ok") else "error")
    return redirect(url_for("history.page"))


@blueprint.post("/history/<entry_id>/delete")
def delete(entry_id: str):
    reply = ask("history_delete", id=_checked(entry_id))
    (current_app.config["SLOWFRAME_CACHE"] / "thumbs" / f"{entry_id}.jpg").unlink(missing_ok=True)
    flash(reply.get("message", ""), "info" if reply.get("ok") else "error")
    return redirect(url_for("history.page"))
