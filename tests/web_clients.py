"""The web app against a daemon with its control socket open: Flask's test client, signed in or not."""

from __future__ import annotations

import re
from pathlib import Path

from frame.web import WebSettings, create_app
from socket_frames import SocketFrame

PASSWORD = "correct horse battery"


class WebFrame:
    """A SocketFrame and the web app talking to it; ``client`` is Flask's test client."""

    def __init__(self, tmp_path: Path):
        self.frame = SocketFrame(tmp_path)
        self.app = create_app(WebSettings(state_dir=tmp_path / "web-state", cache_dir=tmp_path / "web-cache",
                                          socket=self.frame.socket, url="http://frame.test/"))
        self.app.config["TESTING"] = True
        self.client = self.app.test_client()

    @property
    def credentials(self):
        return self.app.extensions["slowframe"]["credentials"]

    def token(self, page: str = "/login") -> str:
        """The CSRF token of the session, as a page's forms carry it."""
        html = self.client.get(page).get_data(as_text=True)
        match = re.search(r'name="csrf_token" value="([^"]+)"', html)
        assert match, html
        return match[1]

    def sign_in(self) -> str:
        if not self.credentials.is_set:
            self.credentials.set(PASSWORD)
        response = self.client.post("/login", data={"password": PASSWORD, "csrf_token": self.token("/login")})
        assert response.status_code == 302, response.get_data(as_text=True)
        return self.token("/")

    def close(self) -> None:
        self.frame.close()
