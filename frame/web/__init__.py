"""The frame's web app (`slowframe web`): status, history, themes, settings and photos from a phone on the LAN.

A Flask app talking to the daemon only through its control socket (frame.web.link); the
YAML file stays the source of truth (forms edit its text in place, frame.web.yamledit).
Locked down because it is the first thing of ours a network reaches: every page but the
pairing and login pages needs the owner's session (frame.web.auth), every change carries
the session's CSRF token, bodies are bounded, headers forbid framing, sniffing and any
script or style not from this package (there are no scripts), and errors are pages.

    pages/account.py   pairing, login, logout        pages/now.py       the panel and the job
    pages/history.py   pictures: show, delete, PNG   pages/themes.py    themes and wildcard lists
    pages/settings.py  schedule, panel               pages/editor.py    the raw YAML
    pages/upload.py    a photo to the panel          pages/system.py    health, log, power
"""

from __future__ import annotations

import logging
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote_to_bytes

from flask import Flask, abort, current_app, redirect, render_template, request, session, url_for
from werkzeug.exceptions import HTTPException

from frame.web.auth import Credentials, PairingCode, Throttle, secret_key
from frame.web.link import DaemonUnavailable
from frame.web.photos import MAX_UPLOAD_BYTES

log = logging.getLogger("slowframe.web")

MAX_FORM_BYTES = 2 * 1024 * 1024   # a config of up to 1 MB (frame.userfiles) with its form encoding
OPEN_PAGES = ("account.pair", "account.pair_code", "account.pair_submit", "account.login_page", "account.login_submit",
              "static")
SAFE_METHODS = ("GET", "HEAD")
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",   # "no-referrer" would make browsers send "Origin: null" with forms
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}


@dataclass(frozen=True)
class WebSettings:
    """Where the web app keeps its files and finds the daemon."""

    state_dir: Path            # the password hash and the session key
    cache_dir: Path            # thumbnails
    socket: Path | None = None  # the daemon's control socket (default: frame.paths)
    url: str = ""              # the address printed on the pairing card (default: http://HOSTNAME.local/)


def create_app(settings: WebSettings) -> Flask:
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=secret_key(settings.state_dir),
        SESSION_COOKIE_NAME="slowframe",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=30 * 24 * 3600,
        MAX_CONTENT_LENGTH=MAX_UPLOAD_BYTES + 64 * 1024,
        MAX_FORM_MEMORY_SIZE=MAX_FORM_BYTES,
        MAX_FORM_PARTS=64,
        TEMPLATES_AUTO_RELOAD=False,
        SLOWFRAME_SOCKET=settings.socket,
        SLOWFRAME_CACHE=Path(settings.cache_dir),
        SLOWFRAME_URL=settings.url or f"http://{socket.gethostname()}.local/",
    )
    app.extensions["slowframe"] = {"credentials": Credentials(settings.state_dir), "throttle": Throttle(),
                                   "pairing": PairingCode(), "pairing_throttle": Throttle(per_key=3, overall=6)}

    from frame.web.pages import account, editor, history, now, settings as settings_page, system, themes, upload

    for blueprint in (account.blueprint, now.blueprint, history.blueprint, themes.blueprint,
                      settings_page.blueprint, editor.blueprint, upload.blueprint, system.blueprint):
        app.register_blueprint(blueprint)
    app.before_request(_gate)
    app.after_request(_headers)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(DaemonUnavailable, _daemon_down)
    app.register_error_handler(Exception, _bug)
    app.jinja_env.globals["csrf_token"] = csrf_token
    app.context_processor(lambda: {"signed_in": signed_in()})
    return app


def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def signed_in() -> bool:
    epoch = extensions()["credentials"].epoch
    return epoch is not None and session.get("auth") == epoch


def _gate():
    """Every change needs the session's CSRF token (and a same-origin Origin when the browser sends one);
    every page but pairing and login needs the owner's session."""
    if request.method not in SAFE_METHODS:
        origin = request.headers.get("Origin")
        if origin is not None and origin != request.host_url.rstrip("/"):
            return _refuse(403, "This change came from another site; it was refused.")
        if request.mimetype != "multipart/form-data":
            if (request.content_length or 0) > MAX_FORM_BYTES:
                abort(413)
            try:   # Werkzeug would keep undecodable %XX escapes as text: the bytes are checked first
                unquote_to_bytes(request.get_data(cache=True).replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                return _refuse(400, "The form held text that is not UTF-8; nothing was changed.")
        sent = request.form.get("csrf_token", "")   # a body over the limits raises 413 here: a page says so
        if not sent or "csrf" not in session or not secrets.compare_digest(sent, session["csrf"]):
            return _refuse(403, "This form has expired (or came from elsewhere). Go back, reload the page and "
                                "try again.")
        if any("\ufffd" in value for value in request.form.values()):
            return _refuse(400, "The form held text that is not UTF-8; nothing was changed.")
    if request.endpoint in OPEN_PAGES or request.endpoint is None:
        return None
    if not signed_in():
        if request.method in SAFE_METHODS:
            target = "account.login_page" if extensions()["credentials"].is_set else "account.pair"
            return redirect(url_for(target))
        return _refuse(401, "You are not signed in; sign in and try again.")
    return None


def _refuse(code: int, message: str):
    return render_template("error.html", code=code, message=message), code


def _headers(response):
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    if response.mimetype == "text/html":
        response.headers["Cache-Control"] = "no-store"
    return response


def _http_error(exc: HTTPException):
    messages = {
        404: "There is no such page or picture.",
        405: "That address does not take this kind of request.",
        413: f"What you sent is too large: uploads may be {MAX_UPLOAD_BYTES // (1024 * 1024)} MB at most, "
             f"forms {MAX_FORM_BYTES // (1024 * 1024)} MB.",
        400: "The request could not be understood (a damaged or incomplete form); nothing was changed.",
    }
    return _refuse(exc.code or 500, messages.get(exc.code, exc.description or "The request failed."))


def _daemon_down(exc: DaemonUnavailable):
    return _refuse(503, f"The frame's service is not answering: {exc}")


def _bug(exc: Exception):
    log.exception("web: %s %s failed", request.method, request.path)
    return _refuse(500, "Something went wrong inside the web app; nothing was changed. The system log has the "
                        "details.")


def login(epoch: int) -> None:
    """Start the owner's session (a new CSRF token with it)."""
    session.clear()
    session.permanent = True
    session["auth"] = epoch
    session["csrf"] = secrets.token_urlsafe(32)


def extensions() -> dict:
    """The app's credentials, throttles and pairing code."""
    return current_app.extensions["slowframe"]


def remote_address() -> str:
    return request.remote_addr or "?"

