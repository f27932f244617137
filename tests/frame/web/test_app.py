"""The web app with Flask's test client against a real daemon's control socket: the gate on every route,
config edits, uploads, history files and bad input of every kind a browser can send."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image

from frame import commands
from frame.web import HEADERS
from frame.web.photos import MAX_UPLOAD_BYTES
from socket_frames import CONFIG
from web_clients import PASSWORD, WebFrame

ENTRY = "20250301-060000-sea"   # the name the first finished picture gets in these tests
ARGS = {"entry_id": ENTRY, "index": 0, "name": "time", "change": "up", "action": "reboot", "what": "show"}
OPEN = {"/pair", "/pair/code", "/login", "/static/<path:filename>"}


@pytest.fixture
def web(tmp_path):
    w = WebFrame(tmp_path)
    yield w
    w.close()


def routes(app, method: str) -> list[str]:
    urls = []
    for rule in app.url_map.iter_rules():
        if method in rule.methods and rule.rule not in OPEN:
            with app.test_request_context():
                from flask import url_for

                urls.append(url_for(rule.endpoint, **{k: ARGS[k] for k in rule.arguments}))
    return sorted(set(urls))


def text(response) -> str:
    return response.get_data(as_text=True)


def test_every_page_needs_the_owner_and_every_change_a_session(web):
    gets, posts = routes(web.app, "GET"), routes(web.app, "POST")
    assert len(gets) >= 12 and len(posts) >= 14
    for url in gets:
        response = web.client.get(url)
        assert response.status_code == 302 and response.headers["Location"] in ("/pair", "/login"), url
    token = web.token("/pair")   # a session of its own, but not signed in
    for url in posts:
        assert web.client.post(url, data={"csrf_token": token}).status_code == 401, url
    web.credentials.set(PASSWORD)
    assert web.client.get("/").headers["Location"] == "/login"


def test_every_change_without_the_right_csrf_token_is_refused_and_changes_nothing(web):
    token = web.sign_in()
    wrong = ("y" if token[0] == "x" else "x") + token[1:]   # one character off, whatever the token's first is
    for url in routes(web.app, "POST"):
        for data in ({}, {"csrf_token": wrong}):
            response = web.client.post(url, data={**data, "text": "broken: [", "confirm": "yes"})
            assert response.status_code == 403 and "expired" in text(response), url
    assert web.frame.config_path.read_text() == CONFIG and not (web.frame.root / "run" / "reboot").exists()
    other_site = web.client.post("/action/skip", data={"csrf_token": token}, headers={"Origin": "http://evil.test"})
    assert other_site.status_code == 403


def test_pages_carry_the_security_headers_and_the_cookie_is_locked(web):
    token = web.token("/pair")
    response = web.client.post("/login", data={"password": "wrong", "csrf_token": token})
    assert response.status_code == 401
    for name, value in HEADERS.items():
        assert response.headers[name] == value
    web.credentials.set(PASSWORD)
    response = web.client.post("/login", data={"password": PASSWORD, "csrf_token": token})
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert web.client.get("/").headers["Cache-Control"] == "no-store"


def test_logins_are_throttled_even_with_the_right_password_then(web):
    web.credentials.set(PASSWORD)
    token = web.token("/login")
    for _ in range(5):
        assert web.client.post("/login", data={"password": "guess", "csrf_token": token}).status_code == 401
    response = web.client.post("/login", data={"password": PASSWORD, "csrf_token": token})
    assert response.status_code == 429 and "wait 15 minute" in text(response)


def test_pairing_shows_a_code_on_the_panel_and_sets_the_password(web, monkeypatch):
    token = web.token("/pair")
    codes = []
    pairing = web.app.extensions["slowframe"]["pairing"]
    original = pairing.new
    monkeypatch.setattr(pairing, "new", lambda: codes.append(original()) or codes[-1])
    web.frame.clock.advance(seconds=200)
    assert web.client.post("/pair/code", data={"csrf_token": token}).status_code == 302
    web.frame.step()
    card = Image.open(web.frame.display.look_path).convert("L")
    assert card.size == web.frame.display.size and sum(card.histogram()[:64]) > card.width * card.height // 50
    short = {"code": codes[0], "password": "short", "repeat": "short", "csrf_token": token}
    assert "at least 8" in text(web.client.post("/pair", data=short))
    wrong = {"code": "ZZZZZZZZ", "password": PASSWORD, "repeat": PASSWORD, "csrf_token": token}
    assert web.client.post("/pair", data=wrong).status_code == 400
    good = {**wrong, "code": codes[0].lower()[:4] + " " + codes[0].lower()[4:]}
    assert web.client.post("/pair", data=good).headers["Location"] == "/"
    assert web.credentials.verify(PASSWORD) and web.client.get("/").status_code == 200
    token = web.token("/")   # signing in gave the session a new CSRF token
    assert web.client.post("/pair", data={**good, "csrf_token": token}).status_code == 400   # the code works once


def test_a_config_edit_with_an_error_is_refused_with_line_and_column_and_the_file_is_unchanged(web):
    token = web.sign_in()
    page = text(web.client.get("/config"))
    version = re.search(r'name="version" value="([^"]+)"', page)[1]
    broken = CONFIG.replace("order: sequential", "order: sequentail")
    response = web.client.post("/config", data={"csrf_token": token, "version": version, "text": broken})
    assert response.status_code == 400
    assert "line 7, column 8" in text(response) and "order: sequentail" in text(response)
    assert web.frame.config_path.read_text() == CONFIG


def test_a_good_edit_lands_atomically_with_the_backup_kept(web):
    token = web.sign_in()
    version = commands.text_version(CONFIG)
    edited = CONFIG.replace("keep: 3", "keep: 4")
    response = web.client.post("/config", data={"csrf_token": token, "version": version,
                                                "text": edited.replace("\n", "\r\n")})
    assert response.status_code == 302
    assert web.frame.config_path.read_text() == edited
    assert commands.backup_path(web.frame.config_path).read_text() == CONFIG
    assert [p.name for p in web.frame.root.iterdir() if p.name.endswith(".tmp")] == []


def test_a_yaml_bomb_in_the_editor_is_refused_and_the_daemon_lives_on(web):
    token = web.sign_in()
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    response = web.client.post("/config", data={"csrf_token": token, "version": commands.text_version(CONFIG),
                                                "text": bomb})
    assert response.status_code == 400 and "nothing was saved" in text(response).lower()
    assert web.frame.config_path.read_text() == CONFIG and web.frame.ask("status")["ok"]


def test_themes_are_edited_in_the_yaml_text_keeping_its_comments(web):
    web.frame.config_path.write_text(CONFIG.replace("themes:\n", "themes:   # my themes\n"))
    token = web.sign_in()
    version = commands.text_version(web.frame.config_path.read_text())
    form = {"csrf_token": token, "version": version, "name": "sea", "prompts": "a calm sea\na grey sea",
            "steps": "12", "guidance": "", "sampler": "euler_a", "size": "", "weight": "", "lora": "",
            "lora_weight": "", "negative": ""}
    assert web.client.post("/themes/0", data=form).status_code == 302
    saved = web.frame.config_path.read_text()
    assert "themes:   # my themes" in saved and "history: {keep: 3}" in saved
    web.frame.step()
    sea = web.frame.daemon.config.theme("sea")
    assert sea.steps == 12 and sea.sampler == "euler_a" and len(sea.templates) == 2
    version = commands.text_version(saved)
    assert web.client.post("/themes/2/up", data={"csrf_token": token, "version": version}).status_code == 302
    web.frame.step()
    assert [t.name for t in web.frame.daemon.config.themes] == ["sea", "town", "hills"]


def test_a_bad_theme_form_is_refused_with_the_checkers_message(web):
    token = web.sign_in()
    form = {"csrf_token": token, "version": commands.text_version(CONFIG), "name": "sea", "prompts": "a sea",
            "steps": "lots"}
    response = web.client.post("/themes/0", data=form)
    assert response.status_code == 400 and "steps" in text(response) and "line 4" in text(response)
    assert web.frame.config_path.read_text() == CONFIG
    response = web.client.post("/themes/0", data={**form, "prompts": "", "steps": "3"})
    assert response.status_code == 400 and "at least one prompt" in text(response)
    assert web.client.post("/themes/7", data={**form, "steps": "3"}).status_code == 404


def test_a_themes_recipe_is_chosen_in_its_form_and_an_unknown_one_refused(web):
    token = web.sign_in()
    page = text(web.client.get("/themes/0"))
    assert "lightning-4" in page and "dmd2" in page
    form = {"csrf_token": token, "version": commands.text_version(CONFIG), "name": "sea", "prompts": "a sea",
            "recipe": "turbo"}
    assert web.client.post("/themes/0", data=form).status_code == 302
    web.frame.step()
    assert web.frame.daemon.config.theme("sea").recipe == "turbo"
    assert "recipe: turbo" in web.frame.config_path.read_text()
    saved = web.frame.config_path.read_text()
    response = web.client.post("/themes/0", data={**form, "version": commands.text_version(saved),
                                                   "recipe": "lightnin-4"})
    assert response.status_code == 400 and "unknown recipe" in text(response)
    assert web.frame.config_path.read_text() == saved


def test_settings_change_only_what_the_form_changed(web):
    token = web.sign_in()
    form = {"csrf_token": token, "version": commands.text_version(CONFIG), "times": "07:00, 19:00",
            "quiet_hours": "22:00-06:00", "order": "sequential", "panel": "spectra6-7.3",
            "orientation": "portrait", "keep": "3"}
    assert web.client.post("/settings", data=form).status_code == 302
    assert web.frame.config_path.read_text() == CONFIG.replace("min_interval: 180}", "min_interval: 180, "
                                                                "orientation: portrait}")
    response = web.client.post("/settings", data={**form, "version": commands.text_version(
        web.frame.config_path.read_text()), "keep": "-2", "orientation": "portrait"})
    assert response.status_code == 400 and "keep" in text(response)


def test_the_preview_cadence_is_a_setting_checked_like_the_file(web):
    token = web.sign_in()
    assert 'name="preview" value="auto"' in text(web.client.get("/settings"))
    form = {"csrf_token": token, "times": "07:00, 19:00", "quiet_hours": "22:00-06:00", "order": "sequential",
            "panel": "spectra6-7.3", "orientation": "landscape", "keep": "3"}
    before = web.frame.config_path.read_text()
    response = web.client.post("/settings", data={**form, "version": commands.text_version(before), "preview": "soon"})
    assert response.status_code == 400 and "preview" in text(response)
    assert web.frame.config_path.read_text() == before
    assert web.client.post("/settings", data={**form, "version": commands.text_version(before),
                                              "preview": "30"}).status_code == 302
    assert "preview: 30" in web.frame.config_path.read_text()


def test_history_files_are_reached_by_their_names_only(web):
    web.frame.finish_one()
    token = web.sign_in()
    [entry] = web.frame.ask("history")["entries"]
    assert entry["id"] == ENTRY
    assert ENTRY in text(web.client.get("/history"))
    thumb = web.client.get(f"/history/{ENTRY}/thumb.jpg")
    assert thumb.status_code == 200 and Image.open(io.BytesIO(thumb.data)).format == "JPEG"
    png = web.client.get(f"/history/{ENTRY}.png")
    assert png.data == web.frame.daemon.history.get(ENTRY).image.read_bytes()
    assert "attachment" in png.headers["Content-Disposition"]
    for bad in ("..%2Fstate", "../../state", "%2e%2e", "20250301-060000-sea~1", "20250301-060000-SEA",
                "20250301-060000-sea/..", "..%2F..%2Fetc%2Fpasswd"):
        assert web.client.get(f"/history/{bad}.png").status_code == 404, bad
        assert web.client.get(f"/history/{bad}/thumb.jpg").status_code == 404, bad
        assert web.client.post(f"/history/{bad}/delete", data={"csrf_token": token}).status_code in (302, 404)
    assert web.frame.ask("history")["entries"]   # nothing above deleted it
    assert web.client.post(f"/history/{ENTRY}/again", data={"csrf_token": token}).status_code == 302
    web.frame.step()
    assert web.frame.daemon.current.job.theme == "sea" and web.frame.daemon.current.job.requested
    assert web.client.post(f"/history/{ENTRY}/delete", data={"csrf_token": token}).status_code == 302
    assert web.frame.ask("history")["entries"] == []
    stale = web.frame.root / "web-cache" / "thumbs" / "20250101-000000-gone.jpg"   # a picture pruned meanwhile
    stale.write_bytes(thumb.data)
    web.client.get("/history")
    assert list((web.frame.root / "web-cache" / "thumbs").iterdir()) == []


def png_bytes(size: tuple[int, int], colour=(0, 0, 255)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_uploaded_photo_goes_to_the_panel(web):
    token = web.sign_in()
    web.frame.clock.advance(seconds=200)
    response = web.client.post("/upload", data={"csrf_token": token, "pin": "on",
                                                "photo": (io.BytesIO(png_bytes((400, 300))), "blue.png")})
    assert response.status_code == 302
    web.frame.step()
    assert web.frame.daemon.pinned and "Pinned" in text(web.client.get("/"))
    blue = Image.open(web.frame.display.look_path).convert("RGB").resize((1, 1)).getpixel((0, 0))
    assert blue[2] > 2 * blue[0]


def test_a_100_megapixel_png_is_refused_before_it_is_decoded(web):
    token = web.sign_in()
    buffer = io.BytesIO()
    Image.new("1", (10_000, 10_000)).save(buffer, format="PNG")   # ~12 KB of file, 100 megapixels
    assert len(buffer.getvalue()) < 100_000
    response = web.client.post("/upload", data={"csrf_token": token,
                                                "photo": (io.BytesIO(buffer.getvalue()), "bomb.png")})
    assert response.status_code == 400 and "megapixels" in text(response)
    assert not (web.frame.daemon.state_dir / "uploads").exists()


@pytest.mark.parametrize("payload,name", [(b"GIF89a not really", "x.gif"), (b"", "empty.png"),
                                          (png_bytes((64, 64))[:80], "cut.png")])
def test_files_that_are_not_pictures_are_refused_with_a_message(web, payload, name):
    token = web.sign_in()
    response = web.client.post("/upload", data={"csrf_token": token, "photo": (io.BytesIO(payload), name)})
    assert response.status_code == 400 and "<h1>" in text(response) and "Traceback" not in text(response)


def test_an_oversized_body_is_refused_with_a_readable_page(web):
    token = web.sign_in()
    big = io.BytesIO(b"\0" * (MAX_UPLOAD_BYTES + 200_000))
    response = web.client.post("/upload", data={"csrf_token": token, "photo": (big, "big.png")})
    assert response.status_code == 413 and "too large" in text(response)
    response = web.client.post("/config", data={"csrf_token": token, "version": "x", "text": "a" * 3_000_000})
    assert response.status_code == 413 and "too large" in text(response)


def test_non_utf8_forms_and_junk_are_refused_without_a_traceback(web):
    token = web.sign_in()
    body = b"csrf_token=" + token.encode() + b"&version=x&text=themes%3A+%FF%FE"
    response = web.client.post("/config", data=body, content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400 and "not UTF-8" in text(response)
    assert web.frame.config_path.read_text() == CONFIG
    response = web.client.post("/upload", data=b"--x\r\nrubbish", content_type="multipart/form-data; boundary=x")
    assert response.status_code in (400, 403) and "Traceback" not in text(response)
    assert web.client.get("/history?page=abc").status_code == 200
    assert web.client.post("/action/explode", data={"csrf_token": token}).status_code == 404


def test_when_the_daemon_is_down_pages_say_so(web):
    web.sign_in()
    web.frame.daemon._control.close()
    response = web.client.get("/")
    assert response.status_code == 503 and "not running" in text(response)


def test_now_page_buttons_reach_the_daemon(web):
    token = web.sign_in()
    first = web.frame.runner.started[-1][0].id
    assert "step 0/20" in text(web.client.get("/"))
    assert web.client.post("/action/skip", data={"csrf_token": token}).status_code == 302
    web.frame.step()
    assert web.frame.runner.started[-1][0].id != first
    assert "skip: queued" in text(web.client.get("/"))


def test_power_needs_a_confirmation(web):
    token = web.sign_in()
    assert web.client.post("/system/reboot", data={"csrf_token": token}).status_code == 400
    assert not (web.frame.root / "run" / "reboot").exists()
    assert web.client.post("/system/reboot", data={"csrf_token": token, "confirm": "yes"}).status_code == 200
    web.frame.step()                               # the daemon's main loop takes it, as it takes a button's
    assert (web.frame.root / "run" / "reboot").exists()
