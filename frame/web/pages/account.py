"""Pairing a phone (a code from the panel, then a password), signing in and out."""

from __future__ import annotations

from flask import Blueprint, current_app, flash, redirect, render_template, request, session, url_for

from frame.web import extensions, login, remote_address
from frame.web.auth import CODE_SECONDS, PasswordRefused, check_new_password
from frame.web.link import ask

blueprint = Blueprint("account", __name__)


def _wait_page(template: str, seconds: float, **context):
    minutes = max(1, round(seconds / 60))
    return render_template(template, error=f"Too many tries; wait {minutes} minute(s) and try again.",
                           **context), 429


@blueprint.get("/pair")
def pair():
    return render_template("pair.html", code=request.args.get("code", "")[:16],
                           replacing=extensions()["credentials"].is_set, shown=extensions()["pairing"].active)


@blueprint.post("/pair/code")
def pair_code():
    throttle = extensions()["pairing_throttle"]
    wait = throttle.wait_seconds(remote_address())
    if wait:
        return _wait_page("pair.html", wait, code="", replacing=extensions()["credentials"].is_set, shown=True)
    throttle.failed(remote_address())   # every code shown counts: the panel is not a toy for the LAN
    code = extensions()["pairing"].new()
    reply = ask("pairing", url=current_app.config["SLOWFRAME_URL"], code=code)
    if not reply.get("ok"):
        flash(f"The frame could not show the code: {reply.get('message')}", "error")
    else:
        flash(f"The frame is showing a code (the panel takes about half a minute). It works for "
              f"{CODE_SECONDS // 60} minutes.", "info")
    return redirect(url_for("account.pair"))


@blueprint.post("/pair")
def pair_submit():
    throttle = extensions()["throttle"]
    key = "pair " + remote_address()
    context = {"code": request.form.get("code", "")[:16], "replacing": extensions()["credentials"].is_set,
               "shown": extensions()["pairing"].active}
    wait = throttle.wait_seconds(key)
    if wait:
        return _wait_page("pair.html", wait, **context)
    password, repeated = request.form.get("password", ""), request.form.get("repeat", "")
    try:
        check_new_password(password, repeated)
    except PasswordRefused as exc:
        return render_template("pair.html", error=str(exc).capitalize() + ".", **context), 400
    if not extensions()["pairing"].use(request.form.get("code", "")):
        throttle.failed(key)
        return render_template("pair.html", error="That code is wrong, used or expired; ask the frame for a new "
                                                  "one.", **context), 400
    login(extensions()["credentials"].set(password))
    flash("Paired: this phone is signed in. Any other phone was signed out.", "info")
    return redirect(url_for("now.page"))


@blueprint.get("/login")
def login_page():
    if not extensions()["credentials"].is_set:
        return redirect(url_for("account.pair"))
    return render_template("login.html")


@blueprint.post("/login")
def login_submit():
    throttle = extensions()["throttle"]
    key = "login " + remote_address()
    wait = throttle.wait_seconds(key)
    if wait:
        return _wait_page("login.html", wait)
    credentials = extensions()["credentials"]
    if not credentials.verify(request.form.get("password", "")):
        throttle.failed(key)
        return render_template("login.html", error="Wrong password."), 401
    login(credentials.epoch)
    return redirect(url_for("now.page"))


@blueprint.post("/logout")
def logout():
    session.clear()
    return redirect(url_for("account.login_page"))
