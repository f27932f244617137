"""The Settings page: when new pictures come, quiet hours, the panel, its orientation, the theme order."""

from __future__ import annotations

from flask import Blueprint, flash, redirect, render_template, request, url_for

from frame.web import configfile, yamledit
from frame.web.yamledit import EditError

blueprint = Blueprint("settings", __name__)
# field -> its path in the file
SETTINGS = {"times": ("schedule", "times"), "quiet_hours": ("schedule", "quiet_hours"), "panel": ("display", "panel"),
            "orientation": ("display", "orientation"), "caption": ("display", "caption"), "preview": ("display", "preview"), "order": ("order",),
            "keep": ("history", "keep")}


def _current(config: configfile.ConfigFile) -> dict:
    """Each field's value in the file, else what the frame uses without it."""
    data = configfile.as_data(config)
    values = {}
    for field, path in SETTINGS.items():
        node = data
        for step in path:
            node = node.get(step) if isinstance(node, dict) else None
        values[field] = config.defaults.get(".".join(path)) if node is None else node
    return values


def _submitted(form) -> dict:
    def items(name: str) -> list[str]:
        return [part.strip() for part in form.get(name, "").replace(",", " ").split() if part.strip()]

    keep = form.get("keep", "").strip()
    return {"times": items("times"), "quiet_hours": items("quiet_hours"), "panel": form.get("panel", ""),
            "orientation": form.get("orientation", ""), "caption": form.get("caption") == "on",
            "preview": _preview(form.get("preview", "").strip()),
            "order": form.get("order", ""), "keep": int(keep) if keep.isdigit() else keep}


def _preview(text: str) -> str | float:
    """The preview cadence as the config holds it: auto (also for an empty field), off, or minutes."""
    if not text:
        return "auto"
    try:
        return float(text) if text not in ("auto", "off") else text
    except ValueError:
        return text      # the config's checker says what is wrong with it


def _render(config: configfile.ConfigFile, values: dict, version: str, saved=None, error=None, status=200):
    return render_template("settings.html", values=values, version=version, choices=config.choices, saved=saved,
                           error=error), status


@blueprint.get("/settings")
def page():
    config = configfile.current()
    try:
        values = _current(config)
    except EditError as exc:
        return _render(config, {}, config.version, error=str(exc), status=409)
    return _render(config, values, config.version)


@blueprint.post("/settings")
def save():
    new = _submitted(request.form)
    version = request.form.get("version", "")
    config = configfile.current()
    try:
        old = _current(config)
        text = config.text
        for field, value in new.items():
            if value != old[field]:   # only what the form changed is written: the rest of the file stays as it is
                text = yamledit.set_value(text, SETTINGS[field], value)
    except EditError as exc:
        return _render(config, new, version, error=str(exc), status=409)
    if text == config.text:
        flash("Nothing changed.", "info")
        return redirect(url_for("settings.page"))
    saved = configfile.save(text, version)
    if not saved.ok:
        return _render(config, new, version, saved=saved, status=400)
    flash(saved.message + ".", "info")
    return redirect(url_for("settings.page"))
