"""image/: the SD-card recipe, checked without building it.

The overlay compiles and applies to a device tree shaped like the Zero 2 W's; genimage
assembles a miniature card from the real config; the first-boot and device-tree scripts
pass shellcheck and do their jobs on a scratch tree; the partitions, labels, mount points
and packages agree with each other and with what slowframe reads. Tools that CI lacks
(dtc, genimage, shellcheck) skip their tests with the package to install.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from frame.paths import CONFIG_COMMIT_UNIT, DEFAULT_MODEL_PATH, SEARCH_PATH
from frame.web.auth import PASSWORD_FILE, Credentials

REPO = Path(__file__).resolve().parents[2]
IMAGE = REPO / "image"
FILES = IMAGE / "files"
BUILD = (IMAGE / "build").read_text()
SCRIPTS = [IMAGE / "build", IMAGE / "debian-root.sh", IMAGE / "test", FILES / "slowframe-firstboot",
           FILES / "slowframe-dtb"]


def needs(*tools: str, package: str):
    missing = [t for t in tools if shutil.which(t) is None]
    return pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} not installed (Debian package {package})")


# A stand-in for Debian's bcm2837-rpi-zero-2-w.dtb: the labels and node the overlay uses, SPI disabled.
BASE_DTS = """/dts-v1/;
/ {
	model = "Raspberry Pi Zero 2 W";
	#address-cells = <1>;
	#size-cells = <1>;
	soc {
		#address-cells = <1>;
		#size-cells = <1>;
		gpio: gpio@7e200000 { compatible = "brcm,bcm2835-gpio"; reg = <0x7e200000 0xb4>; gpio-controller;
		                      #gpio-cells = <2>; };
		spi: spi@7e204000 { compatible = "brcm,bcm2835-spi"; reg = <0x7e204000 0x200>;
		                    #address-cells = <1>; #size-cells = <0>; status = "disabled"; };
	};
};
"""


@pytest.fixture
def dtbs(tmp_path) -> tuple[Path, Path]:
    (tmp_path / "base.dts").write_text(BASE_DTS)
    base, overlay = tmp_path / "base.dtb", tmp_path / "slowframe-spi0.dtbo"
    subprocess.run(["dtc", "-q", "-@", "-I", "dts", "-O", "dtb", "-o", base, tmp_path / "base.dts"], check=True)
    subprocess.run(["dtc", "-q", "-@", "-I", "dts", "-O", "dtb", "-o", overlay, FILES / "slowframe-spi0.dts"],
                   check=True)
    return base, overlay


def fdtget(dtb: Path, node: str, prop: str, *flags: str) -> str:
    return subprocess.run(["fdtget", *flags, dtb, node, prop], capture_output=True, text=True,
                          check=True).stdout.strip()


@needs("dtc", "fdtoverlay", "fdtget", package="device-tree-compiler")
def test_overlay_enables_spidev_with_chip_select_on_gpio7(dtbs, tmp_path):
    base, overlay = dtbs
    merged = tmp_path / "merged.dtb"
    subprocess.run(["fdtoverlay", "-i", base, "-o", merged, overlay], check=True)
    assert fdtget(base, "/soc/spi@7e204000", "status") == "disabled"
    assert fdtget(merged, "/soc/spi@7e204000", "status") == "okay"
    gpio_phandle = fdtget(merged, "/soc/gpio@7e200000", "phandle")
    assert fdtget(merged, "/soc/spi@7e204000", "cs-gpios").split() == [gpio_phandle, "7", "1"]   # GPIO8 left free
    assert fdtget(merged, "/soc/spi@7e204000/spidev@0", "compatible") == "rohm,dh2228fv"
    assert fdtget(merged, "/soc/spi@7e204000/spidev@0", "reg") == "0"


@needs("dtc", "fdtoverlay", "fdtget", package="device-tree-compiler")
def test_dtb_hook_merges_from_the_pristine_tree_every_time(dtbs, tmp_path):
    base, overlay = dtbs
    firmware = tmp_path / "firmware"
    firmware.mkdir()
    env = {**os.environ, "SLOWFRAME_DTBO": str(overlay), "SLOWFRAME_FIRMWARE": str(firmware),
           "SLOWFRAME_DTB_SOURCE": str(base)}
    out = firmware / "bcm2837-rpi-zero-2-w.dtb"
    subprocess.run(["sh", FILES / "slowframe-dtb", "6.12.0-test"], env=env, check=True, capture_output=True)
    first = out.read_bytes()
    subprocess.run(["sh", FILES / "slowframe-dtb", "6.12.0-test"], env=env, check=True, capture_output=True)
    assert out.read_bytes() == first   # a kernel update re-running it changes nothing
    assert fdtget(out, "/soc/spi@7e204000", "status") == "okay"
    # where the kernel ships no Zero 2 W tree the hook must not break the kernel's installation
    env["SLOWFRAME_DTB_SOURCE"] = str(tmp_path / "missing.dtb")
    assert subprocess.run(["sh", FILES / "slowframe-dtb", "6.12.0-test"], env=env, capture_output=True).returncode == 0


def test_build_installs_the_hook_for_kernel_and_initramfs_updates():
    assert "/etc/kernel/postinst.d/zz-slowframe-dtb" in BUILD        # after raspi-firmware's z50 hook
    assert "/etc/initramfs/post-update.d/zz-slowframe-dtb" in BUILD
    assert "device-tree-compiler" in packages()                      # fdtoverlay on the Pi itself


@needs("shellcheck", package="shellcheck")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_pass_shellcheck(script):
    out = subprocess.run(["shellcheck", "-x", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


# ------------------------------------------------------------------ first boot


def firstboot(tmp_path: Path, settings: str, **environment: str) -> tuple[Path, str]:
    root = tmp_path / "root"
    for folder in ("etc/ssh", "usr/share/zoneinfo/Europe", "boot/firmware"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "usr/share/zoneinfo/Europe/Berlin").write_bytes(b"TZif")
    if not (root / "etc/hosts").exists():
        (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n127.0.1.1\tslowframe\n")
    setup = root / "boot/firmware/setup.txt"
    setup.write_bytes(settings.encode())
    env = {**os.environ, "SLOWFRAME_ROOT": str(root), "SLOWFRAME_SETTINGS": str(setup), **environment}
    out = subprocess.run(["sh", FILES / "slowframe-firstboot", "settings"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return root, out.stdout + out.stderr


SETTINGS = ("hostname=frame-1\r\n"                       # a file saved on Windows
            "timezone=Europe/Berlin\n"
            "wifi_country=DE\n"
            'wifi_ssid=Caf\u00e9 "net"\n'
            "wifi_password=pass \"word\" 1\n"
            "ssh_key=ssh-ed25519 AAAAC3Nza me@laptop\n")


def test_settings_are_applied_and_passwords_removed(tmp_path):
    root, _ = firstboot(tmp_path, SETTINGS)
    assert (root / "etc/hostname").read_text() == "frame-1\n"
    assert "127.0.1.1\tframe-1" in (root / "etc/hosts").read_text()
    assert "slowframe" not in (root / "etc/hosts").read_text()
    assert os.readlink(root / "etc/localtime") == "/usr/share/zoneinfo/Europe/Berlin"
    wifi = (root / "etc/wpa_supplicant/wpa_supplicant-wlan0.conf").read_text()
    assert "country=DE" in wifi
    ssid = 'Caf\u00e9 "net"'.encode().hex()
    assert f"ssid={ssid}\n" in wifi                                   # any characters, as hex
    assert 'psk="pass "word" 1"\n' in wifi                           # verbatim up to the last quote
    assert oct((root / "etc/wpa_supplicant/wpa_supplicant-wlan0.conf").stat().st_mode & 0o777) == "0o600"
    assert (root / "root/.ssh/authorized_keys").read_text() == "ssh-ed25519 AAAAC3Nza me@laptop\n"
    applied = (root / "boot/firmware/setup-applied.txt").read_text()
    assert not (root / "boot/firmware/setup.txt").exists()
    assert 'pass "word"' not in applied and "wifi_password=(applied, removed from this file)" in applied
    assert "hostname=frame-1" in applied


def test_settings_twice_keep_one_ssh_key(tmp_path):
    firstboot(tmp_path, SETTINGS)
    root, _ = firstboot(tmp_path, SETTINGS)
    assert (root / "root/.ssh/authorized_keys").read_text().count("me@laptop") == 1
    assert (root / "etc/hosts").read_text().count("127.0.1.1") == 1


def test_the_web_password_is_set_hashed_and_removed_from_the_card(tmp_path):
    command = tmp_path / "slowframe"
    command.write_text(f"#!/bin/sh\ncd {REPO} && exec {sys.executable} -m frame.cli \"$@\"\n")
    command.chmod(0o755)
    root, _ = firstboot(tmp_path, "web_password=a long web secret\n", SLOWFRAME_COMMAND=str(command))
    assert Credentials(root / "var/lib/slowframe-web").verify("a long web secret")
    assert "a long web secret" not in (root / "var/lib/slowframe-web" / PASSWORD_FILE).read_text()
    applied = (root / "boot/firmware/setup-applied.txt").read_text()
    assert "web_password=(applied, removed from this file)" in applied and "secret" not in applied


def test_bad_settings_are_reported_and_skipped(tmp_path):
    root, messages = firstboot(tmp_path, "hostname=my frame!\ntimezone=Mars/Olympus\n"
                                         "wifi_ssid=net\nwifi_password=short\n")
    assert "hostname 'my frame!' is not valid" in messages
    assert "time zone 'Mars/Olympus' is unknown" in messages
    assert "wifi_password must be 8 to 63 characters" in messages
    assert not (root / "etc/hostname").exists()
    assert not (root / "etc/localtime").exists()
    assert not (root / "etc/wpa_supplicant").exists()


def test_shipped_setup_file_changes_nothing_until_edited(tmp_path):
    root, _ = firstboot(tmp_path, (FILES / "setup.txt").read_text())
    assert not (root / "etc/hostname").exists() and not (root / "root").exists()
    shipped = set(re.findall(r"^#(\w+)=", (FILES / "setup.txt").read_text(), re.M))
    handled = set(re.findall(r"\$\(value (\w+)\)", (FILES / "slowframe-firstboot").read_text()))
    assert shipped == handled   # every documented key is read, and every key read is documented


# ------------------------------------------------------------------ the card's layout


def genimage_partitions() -> list[tuple[str, str, str]]:
    """(name, partition-type, image) of the card's partitions, in order."""
    text = (IMAGE / "genimage.cfg").read_text()
    return re.findall(r'partition (\w+) \{\s*partition-type = (0x[0-9A-Fa-f]+)\s*(?:bootable = true\s*)?'
                      r'image = "([^"]+)"', text)


def fstab() -> dict[str, tuple[str, str, str]]:
    """mount point -> (source, type, options) from the fstab image/build writes."""
    block = BUILD.split('cat > "$ROOT/etc/fstab" <<EOF', 1)[1].split("\nEOF", 1)[0]
    return {f[1]: (f[0], f[2], f[3]) for f in (line.split() for line in block.splitlines())
            if f and not f[0].startswith("#")}


def test_partitions_labels_and_mounts_agree():
    names = [name for name, _, _ in genimage_partitions()]
    assert names == ["boot", "models", "root"]        # root last: first boot grows it to the card's end
    types = {name: kind.lower() for name, kind, _ in genimage_partitions()}
    assert types == {"boot": "0x0c", "models": "0x07", "root": "0x83"}   # FAT32 LBA, exFAT, Linux
    cfg = (IMAGE / "genimage.cfg").read_text()
    boot_label = re.search(r'image boot.vfat \{.*?label = "(\w+)"', cfg, re.S)[1]
    root_label = re.search(r'image root.ext4 \{.*?label = "(\w+)"', cfg, re.S)[1]
    mounts = fstab()
    assert mounts["/"][:2] == (f"LABEL={root_label}", "ext4")
    assert mounts["/boot/firmware"][:2] == (f"LABEL={boot_label}", "vfat")
    # the boot files are root's to write, anyone's to read (the daemon reads slowframe.yaml); the web app's
    # config edits are written by the root step slowframe-config.service, never by a process of ours
    options = mounts[str(SEARCH_PATH[0].parent)][2].split(",")
    assert not [o for o in options if o.startswith(("uid=", "gid="))]
    assert "fmask=0133" in options and "dmask=0022" in options
    assert re.search(r"mkfs.exfat -L (\w+)", BUILD)[1] == mounts[str(DEFAULT_MODEL_PATH.parent)][0][6:]
    assert mounts[str(DEFAULT_MODEL_PATH.parent)][1] == "exfat"            # where slowframe looks for models
    assert "nofail" in mounts[str(DEFAULT_MODEL_PATH.parent)][2]           # a frame boots without it
    assert "x-systemd.before=slowframe.service" in mounts[str(DEFAULT_MODEL_PATH.parent)][2]
    assert f"ROOTPART=LABEL={root_label}" in (FILES / "raspi-firmware").read_text()
    assert "/boot/firmware/slowframe.yaml" in BUILD and SEARCH_PATH[0] == Path("/boot/firmware/slowframe.yaml")


@needs("genimage", "mkdosfs", "mcopy", "mke2fs", "mkfs.exfat", package="genimage dosfstools mtools e2fsprogs exfatprogs")
def test_genimage_assembles_a_miniature_card(tmp_path):
    root = tmp_path / "root"
    (root / "boot/firmware").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "boot/firmware/config.txt").write_text("arm_64bit=1\n")
    (root / "etc/hostname").write_text("slowframe\n")
    for folder in ("input", "out", "tmp"):
        (tmp_path / folder).mkdir()
    models = tmp_path / "input/models.exfat"
    with open(models, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.exfat", "-L", "models", models], check=True, capture_output=True)
    env = {**os.environ, "SLOWFRAME_BOOT_SIZE": "40M", "SLOWFRAME_ROOT_SIZE": "16M", "SLOWFRAME_IMAGE": "card.img"}
    subprocess.run(["genimage", "--config", IMAGE / "genimage.cfg", "--rootpath", root, "--inputpath",
                    tmp_path / "input", "--outputpath", tmp_path / "out", "--tmppath", tmp_path / "tmp"],
                   env=env, check=True, capture_output=True)
    card = (tmp_path / "out/card.img").read_bytes()
    assert card[510:512] == b"\x55\xaa"
    entries = [struct.unpack_from("<B3xB3xII", card, 446 + 16 * i) for i in range(4)]
    assert [(flag, kind) for flag, kind, _, _ in entries[:3]] == [(0x80, 0x0C), (0, 0x07), (0, 0x83)]
    (_, _, boot_start, _), (_, _, models_start, _), (_, _, root_start, root_sectors) = entries[:3]
    assert len(card) == (root_start + root_sectors) * 512                     # root is the card's end
    boot = card[boot_start * 512:]
    assert boot[82:90] == b"FAT32   " and boot[71:82] == b"RASPIFIRM  "
    assert b"CONFIG  TXT" in card[boot_start * 512:models_start * 512]       # the firmware's files are on it
    assert card[models_start * 512 + 3:models_start * 512 + 11] == b"EXFAT   "
    superblock = card[root_start * 512 + 1024:]
    assert superblock[0x38:0x3A] == b"\x53\xef" and superblock[0x78:0x78 + 9] == b"RASPIROOT"


# ------------------------------------------------------------------ what goes into the image


def packages() -> set[str]:
    block = re.search(r"^PACKAGES=\((.*?)^\)", BUILD, re.S | re.M)[1]
    return {word for line in block.splitlines() for word in line.split("#")[0].split()}


def wheels() -> set[str]:
    """What image/build installs from PyPI (wheels and source packages)."""
    return {w.split("==")[0] for name in ("WHEELS", "SDISTS")
            for w in re.search(rf"^{name}=\((.*?)\)", BUILD, re.M)[1].split()}


DEBIAN_NAMES = {"numpy": "python3-numpy", "pillow": "python3-pil", "pyyaml": "python3-yaml",
                "cffi": "python3-cffi-backend", "systemd-python": "python3-systemd",
                "spidev": "python3-spidev", "smbus2": "python3-smbus2", "gpiod": "python3-libgpiod",
                "flask": "python3-flask", "waitress": "python3-waitress", "segno": "python3-segno"}


def test_every_runtime_dependency_is_in_the_image():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["pi"]]
    names = {re.match(r"[A-Za-z0-9_.-]+", spec)[0].lower() for spec in wanted}
    names |= {"spidev", "smbus2", "gpiod", "gpiodevice"}     # inky's own dependencies
    names |= {"lgpio", "colorzero"}                          # gpiozero's pin library on gpiochip0, its colours
    provided = packages()
    for name in names:
        assert DEBIAN_NAMES.get(name) in provided or name in wheels(), f"{name} is not installed by image/build"
    assert "libopenblas0-pthread" in provided          # numpy's OpenBLAS, which engine/blas.py drives


def test_service_files_are_installed_and_enabled():
    for name in ("slowframe.service", "slowframe-devices.service", "slowframe.sysusers", "60-slowframe.rules",
                 "slowframe-web.socket", "slowframe-web.service", "slowframe-power@.path",
                 "slowframe-power@.service", "slowframe-config.path", "slowframe-config.service"):
        assert f"$REPO/systemd/{name}" in BUILD
    unitdir = re.search(r'local unitdir=\$ROOT(\S+)', BUILD)[1]
    assert CONFIG_COMMIT_UNIT == Path(unitdir) / "slowframe-config.path"   # where the daemon looks for it
    enabled = re.search(r"systemctl enable ((?:[^\n]*\\\n)*[^\n]*)", BUILD)[1]   # with its continued lines
    assert "slowframe.service" in enabled and "slowframe-firstboot.service" in enabled
    # the web app on port 80, found as slowframe.local, the frame's two power requests and its config saves
    for unit in ("slowframe-web.socket", "avahi-daemon.service", "slowframe-power@reboot.path",
                 "slowframe-power@poweroff.path", "slowframe-config.path"):
        assert unit in enabled
    assert {"avahi-daemon", "libnss-mdns"} <= packages()
    assert re.search(r'echo slowframe > "\$ROOT/etc/hostname"', BUILD)   # avahi announces HOSTNAME.local
    assert 'echo uninitialized > "$ROOT/etc/machine-id"' in BUILD   # systemd's first boot makes the id
    assert 'rm -f "$ROOT"/etc/ssh/ssh_host_*' in BUILD                 # every card gets its own keys


def test_no_polkit_daemon_takes_the_pis_memory():
    # shutdown and reboot go through a request file and slowframe-power@.path (frame/power.py)
    assert "polkit" not in BUILD and "polkitd" not in packages()


def test_raspi_firmware_settings_are_ones_it_reads():
    # trixie's /etc/kernel/postinst.d/z50-raspi-firmware reads only these; anything else (GPU_MEM, say)
    # is silently ignored, so config.txt settings go in raspi-firmware-custom
    settings = re.findall(r"^([A-Z_]+)=", (FILES / "raspi-firmware").read_text(), re.M)
    assert settings and set(settings) <= {"ROOTPART", "CONSOLES", "CMA", "KERNEL_ARCH"}
    custom = (FILES / "raspi-firmware-custom").read_text()
    assert re.search(r"^gpu_mem=16$", custom, re.M)   # headless: the most memory for SDXL
