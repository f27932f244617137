"""The YAML editor: the whole config file as text; a save with errors is refused with each line and column."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, url_for

from frame.web import configfile

blueprint = Blueprint("editor", __name__)


@blueprint.get("/config")
def page():
    config = configfile.current()
    return render_template("editor.html", text=config.text, version=config.version, path=config.path,
                           current=config.problems, saved=None)


@blueprint.post("/config")
def save():
    text = request.form.get("text", "").replace("\r\n", "\n")   # browsers send CRLF line ends
    version = request.form.get("version", "")
    saved = configfile.save(text, version)
    if not saved.ok:
        return render_template("editor.html", text=text, version=version, path=configfile.current().path,
                               current=[], saved=saved), 400
    flash(saved.message + ".", "info")
    return redirect(url_for("editor.page"))
