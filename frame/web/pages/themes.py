"""The Themes page: add, edit, reorder and delete themes and wildcard lists with forms, in the YAML text itself.

Each save changes only the keys the form changed (frame.web.yamledit), so the file's comments
and layout stay; the daemon checks the result as `slowframe config check` would, and a
refused save shows the form again with each problem and the line it is about.
"""

from __future__ import annotations

import re

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for

from frame.web import configfile, yamledit
from frame.web.yamledit import EditError

blueprint = Blueprint("themes", __name__)
# form field -> the kind of value the YAML gets; an empty field leaves the key out (the defaults apply)
FIELDS = (("name", str), ("negative", str), ("recipe", str), ("steps", int), ("guidance", float), ("sampler", str),
          ("size", str), ("weight", float), ("lora", str), ("lora_weight", float))
WILDCARD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def _value(text: str, kind: type) -> object:
    """The form's text as the YAML value it stands for; text that is not a number stays text, for the
    checker to name (its message is the same as for the file)."""
    text = text.strip()
    if kind is str:
        return text
    try:
        return kind(text) if kind is float else int(text)
    except ValueError:
        return text


def _theme_from_form(form) -> tuple[dict, list[str]]:
    fields = {name: _value(form.get(name, ""), kind) for name, kind in FIELDS}
    prompts = [line.strip() for line in form.get("prompts", "").splitlines() if line.strip()]
    return {k: v for k, v in fields.items() if v != ""}, prompts


def _form_values(theme: dict) -> dict:
    prompts = theme.get("prompts") if isinstance(theme.get("prompts"), list) else [theme.get("prompt", "")]
    values = {name: "" if theme.get(name) is None else str(theme.get(name)) for name, _ in FIELDS}
    values["prompts"] = "\n".join(str(p) for p in prompts if p is not None)
    return values


def _themes(data: dict) -> list:
    themes = data.get("themes")
    return themes if isinstance(themes, list) else []


def _edit_theme(text: str, index: int | None, fields: dict, prompts: list[str]) -> str:
    if index is None:
        theme = {"name": fields.get("name", "")}
        theme.update({"prompt": prompts[0]} if len(prompts) == 1 else {"prompts": prompts})
        theme.update({k: v for k, v in fields.items() if k != "name"})
        return yamledit.append_item(text, ("themes",), theme)
    path = ("themes", index)
    for name, _ in FIELDS:
        text = yamledit.set_value(text, path + (name,), fields[name]) if name in fields else \
            yamledit.delete_key(text, path + (name,))
    if len(prompts) == 1:
        text = yamledit.set_value(text, path + ("prompt",), prompts[0])
        return yamledit.delete_key(text, path + ("prompts",))
    text = yamledit.set_value(text, path + ("prompts",), prompts)
    return yamledit.delete_key(text, path + ("prompt",))


def _choices(choices: dict) -> dict:
    """What the theme form's selects offer, from the daemon's choices."""
    return {"samplers": choices.get("sampler", []), "recipes": choices.get("recipe", [])}


def _problem_page(template: str, saved: configfile.Saved | None, error: str | None, status: int, **context):
    return render_template(template, saved=saved, error=error, **_choices(configfile.current().choices),
                           **context), status


@blueprint.get("/themes")
def page():
    try:
        config = configfile.current()
        data = configfile.as_data(config)
    except EditError as exc:
        return render_template("themes.html", error=str(exc), themes=[], wildcards={}, version=""), 409
    wildcards = data.get("wildcards") if isinstance(data.get("wildcards"), dict) else {}
    return render_template("themes.html", themes=_themes(data), wildcards=wildcards, version=config.version,
                           path=config.path)


@blueprint.get("/themes/new")
@blueprint.get("/themes/<int:index>")
def edit(index: int | None = None):
    config = configfile.current()
    themes = _themes(configfile.as_data(config))
    if index is not None and not 0 <= index < len(themes):
        abort(404)
    theme = themes[index] if index is not None else {}
    values = _form_values(theme if isinstance(theme, dict) else {})
    return render_template("theme.html", index=index, values=values, version=config.version,
                           **_choices(config.choices), saved=None, error=None)


@blueprint.post("/themes/new")
@blueprint.post("/themes/<int:index>")
def save(index: int | None = None):
    fields, prompts = _theme_from_form(request.form)
    values = {**{name: request.form.get(name, "") for name, _ in FIELDS}, "prompts": request.form.get("prompts", "")}
    context = {"index": index, "values": values, "version": request.form.get("version", "")}
    if not fields.get("name") or not prompts:
        return _problem_page("theme.html", None, "A theme needs a name and at least one prompt.", 400, **context)
    try:
        config = configfile.current()
        if index is not None and not 0 <= index < len(_themes(configfile.as_data(config))):
            abort(404)
        text = _edit_theme(config.text, index, fields, prompts)
    except EditError as exc:
        return _problem_page("theme.html", None, str(exc), 409, **context)
    return _save_form("theme.html", text, f"Saved theme {fields['name']!r}.", context)


def _save_form(template: str, text: str, done: str, context: dict):
    """Send the edited text to the daemon: back to the list when it is saved, else the form with the problems."""
    saved = configfile.save(text, request.form.get("version", ""))
    if not saved.ok:
        return _problem_page(template, saved, None, 400, **context)
    flash(f"{done} {saved.message[0].upper()}{saved.message[1:]}.", "info")
    return redirect(url_for("themes.page"))


def _list_change(change, done: str):
    try:
        config = configfile.current()
        configfile.as_data(config)   # a file the daemon cannot read safely is not edited by a form
        text = change(config.text)
    except EditError as exc:
        flash(str(exc), "error")
        return redirect(url_for("themes.page"))
    saved = configfile.save(text, request.form.get("version", ""))
    if saved.ok:
        flash(done, "info")
    else:
        flash(saved.message + "".join(f" {p['where']}: {p['message']}" for p in saved.problems[:3]), "error")
    return redirect(url_for("themes.page"))


@blueprint.post("/themes/<int:index>/<any(up, down, delete):change>")
def reorder(index: int, change: str):
    if change == "delete":
        return _list_change(lambda text: yamledit.delete_item(text, ("themes",), index), "Deleted the theme.")
    delta = -1 if change == "up" else 1
    return _list_change(lambda text: yamledit.move_item(text, ("themes",), index, delta), "Moved the theme.")


@blueprint.get("/wildcards/new")
@blueprint.get("/wildcards/<name>")
def wildcard(name: str | None = None):
    config = configfile.current()
    lists = configfile.as_data(config).get("wildcards")
    lists = lists if isinstance(lists, dict) else {}
    if name is not None and name not in lists:
        abort(404)
    entries = lists.get(name) if name is not None else []
    return render_template("wildcard.html", name=name, entries=entries, version=config.version, saved=None,
                           error=None, in_file=isinstance(entries, str))


@blueprint.post("/wildcards/new")
@blueprint.post("/wildcards/<name>")
def wildcard_save(name: str | None = None):
    new_name = (request.form.get("name", "") if name is None else name).strip()
    entries = [line.strip() for line in request.form.get("entries", "").splitlines() if line.strip()]
    context = {"name": name, "entries": entries, "version": request.form.get("version", ""), "in_file": False,
               "new_name": new_name}
    if not WILDCARD_NAME.fullmatch(new_name):
        return _problem_page("wildcard.html", None, "A list's name is letters, digits, _ . and - (it is used as "
                                                    "__name__ in prompts).", 400, **context)
    if not entries:
        return _problem_page("wildcard.html", None, "A list needs at least one entry.", 400, **context)
    try:
        text = yamledit.set_value(configfile.current().text, ("wildcards", new_name), entries)
    except EditError as exc:
        return _problem_page("wildcard.html", None, str(exc), 409, **context)
    return _save_form("wildcard.html", text, f"Saved the list {new_name!r}.", context)


@blueprint.post("/wildcards/<name>/delete")
def wildcard_delete(name: str):
    return _list_change(lambda text: yamledit.delete_key(text, ("wildcards", name)), f"Deleted the list {name!r}.")
