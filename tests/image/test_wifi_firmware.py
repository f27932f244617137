"""image/wifi-firmware: the BCM43430/2 (brcmfmac43436) WiFi firmware the build adds to Debian's, from Raspberry
Pi's firmware-brcm80211 .deb or its git tree, each file checked against its pinned sha256. Local HTTP servers
stand in for archive.raspberrypi.com and GitHub; a closed port for a build machine that reaches neither."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "image" / "wifi-firmware"
BUILD = (REPO / "image" / "build").read_text()
BOARD = "raspberrypi,model-zero-2-w"
NAMES = ("brcmfmac43436-sdio.bin", "brcmfmac43436-sdio.clm_blob", "brcmfmac43436-sdio.txt",
         "brcmfmac43436s-sdio.bin", "brcmfmac43436s-sdio.txt")
FIRMWARE = {name: f"firmware {name} ".encode() * 50 for name in NAMES}
DEB = "pool/main/f/firmware-nonfree/firmware-brcm80211_20230625-2+rpt3_all.deb"


def tar_xz(entries: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for entry in entries:
            if isinstance(entry, tarfile.TarInfo):
                tar.addfile(entry)
            else:
                info = tarfile.TarInfo(entry[0])
                info.size = len(entry[1])
                tar.addfile(info, io.BytesIO(entry[1]))
    return buf.getvalue()


def ar(members: list[tuple[str, bytes]]) -> bytes:
    out = b"!<arch>\n"
    for name, data in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data
        out += b"\n" if len(data) % 2 else b""
    return out


def make_deb(files: dict[str, bytes]) -> bytes:
    """A firmware-brcm80211 .deb as Debian tools build it; brcmfmac43436-sdio.bin is a link into cypress/, as
    packages sometimes ship their firmware."""
    entries: list = []
    for name, data in files.items():
        if name == "brcmfmac43436-sdio.bin":
            entries.append(("./usr/lib/firmware/cypress/cyfmac43436-sdio.bin", data))
            link = tarfile.TarInfo(f"./usr/lib/firmware/brcm/{name}")
            link.type, link.linkname = tarfile.SYMTYPE, "../cypress/cyfmac43436-sdio.bin"
            entries.append(link)
        else:
            entries.append((f"./usr/lib/firmware/brcm/{name}", data))
    entries.append(("./usr/lib/firmware/brcm/brcmfmac43455-sdio.bin", b"another chip"))
    control = tar_xz([("./control", b"Package: firmware-brcm80211\nArchitecture: all\n")])
    return ar([("debian-binary", b"2.0\n"), ("control.tar.xz", control), ("data.tar.xz", tar_xz(entries))])


def publish_archive(root: Path, deb: bytes, indexed: bytes | None = None) -> None:
    """The archive: the .deb and a Packages.gz listing it (with `indexed`'s size and sha256 when given)."""
    (root / DEB).parent.mkdir(parents=True, exist_ok=True)
    (root / DEB).write_bytes(deb)
    listed = deb if indexed is None else indexed
    stanzas = [f"Package: firmware-atheros\nVersion: 1\nFilename: pool/x.deb\nSize: 1\nSHA256: {'0' * 64}\n",
               f"Package: firmware-brcm80211\nVersion: 1:20230625-2+rpt3\nArchitecture: all\nFilename: {DEB}\n"
               f"Size: {len(listed)}\nSHA256: {hashlib.sha256(listed).hexdigest()}\nDescription: Broadcom\n"
               " 802.11 firmware\n"]
    index = root / "dists/bookworm/main/binary-arm64/Packages.gz"
    index.parent.mkdir(parents=True, exist_ok=True)
    index.write_bytes(gzip.compress("\n".join(stanzas).encode()))


class Server:
    """A folder served over HTTP in a thread; `requests` logs the paths asked for."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.requests: list[str] = []
        requests = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                requests.append(self.path)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def sources(tmp_path):
    """An archive and a git tree with the right files, and pins for them; yields (archive, git, env)."""
    (tmp_path / "archive").mkdir()
    (tmp_path / "git").mkdir()
    publish_archive(tmp_path / "archive", make_deb(FIRMWARE))
    for name, data in FIRMWARE.items():
        (tmp_path / "git" / name).write_bytes(data)
    pins = tmp_path / "pins.sha256"
    pins.write_text("# test pins\n" + "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in FIRMWARE.items()))
    archive, git = Server(tmp_path / "archive"), Server(tmp_path / "git")
    env = {**os.environ, "SLOWFRAME_RPI_ARCHIVE": archive.url + "/", "SLOWFRAME_FIRMWARE_GIT": git.url,
           "SLOWFRAME_WIFI_PINS": str(pins)}
    env.pop("SLOWFRAME_REQUIRE_WIFI_FIRMWARE", None)
    yield archive, git, env
    archive.close()
    git.close()


def closed_port() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    server.server_close()
    return url


def run(root: Path, env: dict) -> subprocess.CompletedProcess:
    root.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, SCRIPT, root], env=env, capture_output=True, text=True, timeout=120)


def installed(root: Path) -> dict[str, bytes]:
    folder = root / "usr/lib/firmware/brcm"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def test_the_firmware_comes_from_raspberry_pis_deb_checked_with_the_driver_s_board_names(sources, tmp_path):
    archive, git, env = sources
    out = run(tmp_path / "root", env)
    assert out.returncode == 0, out.stderr
    files = installed(tmp_path / "root")
    for name, data in FIRMWARE.items():
        chip, _, ext = name.partition(".")
        assert files[name] == data
        board = tmp_path / "root/usr/lib/firmware/brcm" / f"{chip}.{BOARD}.{ext}"
        assert board.is_symlink() and os.readlink(board) == name
    assert "brcmfmac43455-sdio.bin" not in files                  # only the chips Debian lacks
    last = out.stdout.splitlines()[-1]
    assert last.startswith("wifi firmware: installed 5 files for brcmfmac43436-sdio, brcmfmac43436s-sdio from "
                           f"{archive.url}")
    assert git.requests == []
    status = (tmp_path / "root/usr/local/share/slowframe/wifi-firmware.txt").read_text()
    assert "installed 5 files" in status


def test_without_the_archive_the_git_tree_gives_them(sources, tmp_path):
    archive, git, env = sources
    env["SLOWFRAME_RPI_ARCHIVE"] = closed_port()
    out = run(tmp_path / "root", env)
    assert out.returncode == 0 and installed(tmp_path / "root")["brcmfmac43436s-sdio.txt"] == FIRMWARE[
        "brcmfmac43436s-sdio.txt"]
    assert f"{env['SLOWFRAME_RPI_ARCHIVE']}/dists/bookworm/main/binary-arm64/Packages.gz:" in out.stdout
    assert out.stdout.splitlines()[-1].endswith(f"from {git.url} (sha256 as pinned in image/wifi-firmware.sha256)")


def test_a_build_machine_that_reaches_neither_says_so_and_builds_on(sources, tmp_path):
    _, _, env = sources
    env["SLOWFRAME_RPI_ARCHIVE"], env["SLOWFRAME_FIRMWARE_GIT"] = closed_port(), closed_port()
    out = run(tmp_path / "root", env)
    assert out.returncode == 0 and installed(tmp_path / "root") == {}
    last = out.stdout.splitlines()[-1]
    assert last.startswith("wifi firmware: NOT INSTALLED for brcmfmac43436-sdio, brcmfmac43436s-sdio: Zero 2 W "
                           "boards with that WiFi chip (BCM43430/2) get no wlan0 from this card")
    assert "NOT INSTALLED" in (tmp_path / "root/usr/local/share/slowframe/wifi-firmware.txt").read_text()
    env["SLOWFRAME_REQUIRE_WIFI_FIRMWARE"] = "1"
    assert run(tmp_path / "root2", env).returncode == 1


def test_a_file_that_is_not_the_pinned_one_is_refused_and_taken_from_the_git_tree(sources, tmp_path):
    archive, git, env = sources
    changed = dict(FIRMWARE, **{"brcmfmac43436-sdio.txt": b"nvram settings from somewhere else"})
    publish_archive(archive.folder, make_deb(changed))
    out = run(tmp_path / "root", env)
    assert f"brcmfmac43436-sdio.txt has sha256 {hashlib.sha256(changed['brcmfmac43436-sdio.txt']).hexdigest()}, " \
           "not the pinned" in out.stdout
    assert installed(tmp_path / "root")["brcmfmac43436-sdio.txt"] == FIRMWARE["brcmfmac43436-sdio.txt"]
    assert git.requests == ["/brcmfmac43436-sdio.txt"]


def test_a_deb_that_is_not_the_indexed_one_is_not_opened(sources, tmp_path):
    archive, git, env = sources
    deb = make_deb(FIRMWARE)
    publish_archive(archive.folder, deb, indexed=deb + b"x")
    env["SLOWFRAME_FIRMWARE_GIT"] = closed_port()
    out = run(tmp_path / "root", env)
    assert "its size or sha256 differs from the archive's index" in out.stdout
    assert installed(tmp_path / "root") == {} and "NOT INSTALLED" in out.stdout.splitlines()[-1]


def test_the_pins_name_the_files_the_driver_asks_for():
    lines = [l for l in (REPO / "image/wifi-firmware.sha256").read_text().splitlines() if not l.startswith("#")]
    pinned = {line.split("  ")[1]: line.split("  ")[0] for line in lines}
    assert set(pinned) == set(NAMES)
    assert all(len(d) == 64 and int(d, 16) >= 0 for d in pinned.values())


def test_the_build_adds_the_firmware_before_the_initramfs_and_ends_with_its_summary():
    assert BUILD.index('python3 "$HERE/wifi-firmware" "$ROOT"') < BUILD.index("update-initramfs -c")
    assert 'tail -n 1 "$WORK/wifi-firmware.log"' in BUILD.split("\nassemble\n")[-1]
