"""The Upload page: a photo for the panel (dithered by the daemon's display), until the next picture or pinned."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, url_for

from frame.web.link import ask_for_file
from frame.web.photos import PhotoError, prepare_photo

blueprint = Blueprint("upload", __name__)


@blueprint.get("/upload")
def page():
    return render_template("upload.html", error=None)


@blueprint.post("/upload")
def send():
    photo = request.files.get("photo")
    if photo is None or not photo.filename:
        return render_template("upload.html", error="Choose a photo first."), 400
    try:
        with prepare_photo(photo.stream) as ready:
            reply, _ = ask_for_file("upload", send=ready, pin=request.form.get("pin") == "on")
    except PhotoError as exc:
        return render_template("upload.html", error=str(exc).capitalize() + "."), 400
    if not reply.get("ok"):
        return render_template("upload.html", error=reply.get("message")), 400
    flash(reply["message"][0].upper() + reply["message"][1:] + ".", "info")
    return redirect(url_for("now.page"))
