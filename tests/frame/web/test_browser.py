"""End to end in headless Chromium at phone width: `slowframe run` on the built-in tiny model with the file
display, `slowframe web` beside it; pair with the code the panel shows (read from its QR code as a phone
would), sign in, break a theme and see the error, fix it, skip, upload a photo and find it on the panel.

Screenshots of every page go to $SLOWFRAME_SCREENSHOTS (default: the test's folder) as PHONE_WIDTH px wide
full pages. Needs Debian's chromium, chromium-driver and zbar-tools, and selenium; skipped without them.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from daemon_processes import ENV, Daemon

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")
pytestmark = pytest.mark.skipif(any(shutil.which(t) is None for t in ("chromium", "chromedriver", "zbarimg")),
                                reason="needs chromium, chromium-driver and zbar-tools (Debian packages)")

from selenium import webdriver  # noqa: E402  (after the skip: selenium may be missing)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

PHONE_WIDTH = 390
PASSWORD = "a frame on the wall"
PHOTOS = Path(__file__).resolve().parents[2] / "data" / "photos"


def config(model: Path) -> str:
    """Two themes of 12 steps (~40 s each on the tiny model), so a job is in progress when the test looks."""
    return f"""\
model: {{path: {model}, preset: default}}
display: {{backend: file, panel: spectra6-4.0, output: panel, min_interval: 0}}
defaults: {{steps: 12, size: 256x256, guidance: 5}}
themes:
  - {{name: boats, prompt: "a {{red|blue}} boat"}}
  - {{name: hills, prompt: "green hills"}}
order: sequential
buttons: {{enabled: false}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(predicate, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"no {what} within {timeout} s")


class Browser:
    def __init__(self, base: str, shots: Path):
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium")
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         f"--window-size={PHONE_WIDTH},844"):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(options=options,
                                       service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")))
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": PHONE_WIDTH, "height": 844, "deviceScaleFactor": 1, "mobile": True})
        self.base, self.shots = base, shots

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    @property
    def text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text

    def click(self, label: str) -> None:
        """Press a form's button and wait for the page it leads to."""
        self.driver.execute_script("window.slowframeOldPage = true")   # gone once the next page has loaded
        self.driver.find_element(By.XPATH, f"//button[normalize-space()={label!r}]").click()
        WebDriverWait(self.driver, 60).until(lambda d: d.execute_script(
            "return window.slowframeOldPage === undefined && document.readyState === 'complete'"))

    def fill(self, name: str, value: str) -> None:
        field = self.driver.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)

    def shot(self, name: str) -> Path:
        """A full-page screenshot, PHONE_WIDTH px wide."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": PHONE_WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": True})
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                    {"width": PHONE_WIDTH, "height": 844, "deviceScaleFactor": 1, "mobile": True})
        return path

    def close(self) -> None:
        self.driver.quit()


@pytest.fixture
def frame(tmp_path):
    from engine.sdxl.random_model import write_random_model

    model = write_random_model(tmp_path / "model")
    daemon = Daemon(tmp_path, config(model), generator="frame.worker:load_sdxl")
    port = free_port()
    log = open(tmp_path / "web.log", "ab")
    web = subprocess.Popen([sys.executable, "-m", "frame.cli", "web", "--listen", f"127.0.0.1:{port}",
                            "--socket", str(tmp_path / "run" / "control.sock"), "--state-dir", str(tmp_path / "web"),
                            "--cache-dir", str(tmp_path / "web-cache"), "--url", f"http://127.0.0.1:{port}/"],
                           env=ENV, stdout=log, stderr=log, cwd=tmp_path)
    shots = Path(os.environ.get("SLOWFRAME_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    wait(lambda: _listening(port), "web app listening", 30)
    browser = Browser(f"http://127.0.0.1:{port}", shots)
    try:
        yield daemon, browser, tmp_path
    finally:
        browser.close()
        web.terminate()
        web.wait(10)
        log.close()
        daemon.close()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def panel_changed(root: Path, since: float) -> bool:
    path = root / "panel" / "look.png"
    return path.exists() and path.stat().st_mtime > since


def test_pair_sign_in_edit_skip_and_upload_from_a_phone(frame):
    daemon, browser, root = frame
    daemon.wait_for(lambda m: "step" in m, "the first step", timeout=240)

    browser.open("/")
    assert browser.driver.current_url.endswith("/pair")
    browser.shot("01-pair")
    before = time.time()
    browser.click("Show a code on the frame")
    assert "The frame is showing a code" in browser.text
    wait(lambda: panel_changed(root, before), "the pairing card on the panel")
    url = subprocess.run(["zbarimg", "--raw", "-q", str(root / "panel" / "look.png")], capture_output=True,
                         text=True).stdout.strip()
    code = re.search(r"/pair\?code=([A-Z0-9]{8})$", url)[1]
    browser.open(url.removeprefix(browser.base))   # as the phone's camera app would
    browser.fill("password", PASSWORD)
    browser.fill("repeat", PASSWORD)
    assert browser.driver.find_element(By.NAME, "code").get_attribute("value") == code
    browser.click("Pair and sign in")
    assert "Paired" in browser.text and browser.driver.current_url.endswith("/")

    browser.click("Sign out")
    browser.fill("password", PASSWORD)
    browser.shot("02-login")
    browser.click("Sign in")
    assert "In progress" in browser.text
    browser.shot("03-now")

    browser.open("/themes")
    browser.shot("04-themes")
    browser.open("/themes/0")
    browser.fill("steps", "many")
    browser.click("Save")
    assert re.search(r"line 5, column \d+: .*steps", browser.text), browser.text
    browser.shot("05-theme-error")
    browser.fill("steps", "30")
    browser.click("Save")
    assert "Saved theme 'boats'" in browser.text
    assert "steps: 30" in (root / "frame.yaml").read_text()

    browser.open("/config")
    browser.shot("06-yaml")
    browser.open("/settings")
    browser.shot("07-settings")
    browser.open("/system")
    browser.shot("08-system")

    browser.open("/")
    theme = re.search(r"^(boats|hills): step", browser.text, re.M)[1]
    browser.click("Skip")
    assert "skip: queued" in browser.text
    other = {"boats": "hills", "hills": "boats"}[theme]
    wait(lambda: browser.open("/") or re.search(rf"^{other}: step", browser.text, re.M), "the next theme", 120)
    browser.shot("09-now-after-skip")

    photo = PHOTOS / "coffee.jpg"   # the panel's shape (3:2), so the fit crops nothing
    browser.open("/upload")
    browser.shot("10-upload")
    before = time.time()
    browser.driver.find_element(By.NAME, "photo").send_keys(str(photo))
    browser.driver.find_element(By.NAME, "pin").click()   # the next picture must not replace it before we look
    browser.click("Put it on the panel")
    assert "The picture goes on the panel next, pinned" in browser.text
    wait(lambda: panel_changed(root, before), "the photo on the panel")
    shown = np.asarray(Image.open(root / "panel" / "look.png").convert("L").resize((48, 32)), dtype=float)
    sent = np.asarray(Image.open(photo).convert("L").resize((48, 32)), dtype=float)
    assert np.corrcoef(shown.ravel(), sent.ravel())[0, 1] > 0.5   # the photo, dithered, is what the panel shows

    browser.open("/")
    assert "Pinned" in browser.text
    browser.click("Unpin")   # the pictures made meanwhile may go up now, and into the history
    wait(lambda: list((root / "state" / "history").glob("*.json")), "a finished picture", 600)
    browser.open("/history")
    assert "seed" in browser.text
    wait(lambda: browser.driver.execute_script(
        "return [...document.images].every(i => i.complete && i.naturalWidth > 0)"), "the thumbnails", 30)
    browser.shot("11-history")
