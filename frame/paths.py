"""Where the appliance keeps things: every system path of the frame, and the rules that pick its folders.

On the frame, image/build and systemd/slowframe.service make these folders (the unit's
StateDirectory=, RuntimeDirectory= and ConfigurationDirectory= are all ``slowframe``);
on a PC without them the per-user fallbacks below apply, so ``slowframe run`` and
``slowframe status`` work there too. Nothing else in engine/ or frame/ spells a system path.

- BOOT_PARTITION: the Pi's FAT boot partition, which any PC can edit when the SD card is put in.
- SEARCH_PATH: where the config file is looked for when no ``--config`` is given, first
  found wins (the boot partition first, then systemd's ConfigurationDirectory); with no
  file the frame runs on its built-in defaults.
- SYSTEM_STATE_DIR: the service's jobs, checkpoints and history (systemd's StateDirectory).
- MODELS_DIR: model folders; the image mounts its exFAT models partition here. A PC shows
  that partition as the drive MODELS_DRIVE (``on_models_drive`` says where a model goes on it).
- DEFAULT_MODEL_PATH: the model the config's ``model.path`` names by default.
- LORA_DIR: the LoRA files ``<lora:NAME:WEIGHT>`` in a prompt names (the config's ``model.lora_folder``).
- SYSTEM_RUNTIME_DIR: the folder of the daemon's control socket (systemd's RuntimeDirectory).
- CONFIG_COMMIT_UNIT: where image/build installs slowframe-config.path, the root step that alone writes
  the boot partition's config file (frame.configsave); the daemon hands an edit to it when the unit is there.
"""

from __future__ import annotations

import os
from pathlib import Path

BOOT_PARTITION = Path("/boot/firmware")
SEARCH_PATH = (BOOT_PARTITION / "slowframe.yaml", Path("/etc/slowframe/config.yaml"))
SYSTEM_STATE_DIR = Path("/var/lib/slowframe")
MODELS_DIR = SYSTEM_STATE_DIR / "models"
MODELS_DRIVE = "models"   # the exFAT partition's label (image/build), the drive's name on a PC
DEFAULT_MODEL_PATH = MODELS_DIR / "sdxl-base-1.0"
LORA_DIR = MODELS_DIR / "loras"
SYSTEM_RUNTIME_DIR = Path("/run/slowframe")
CONFIG_COMMIT_UNIT = Path("/usr/local/lib/systemd/system/slowframe-config.path")


def default_state_dir() -> Path:
    """systemd's $STATE_DIRECTORY, else SYSTEM_STATE_DIR for root, else ~/.local/state/slowframe."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    if os.geteuid() == 0:
        return SYSTEM_STATE_DIR
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "slowframe"


def default_runtime_dir() -> Path:
    """systemd's $RUNTIME_DIRECTORY, else SYSTEM_RUNTIME_DIR when it exists (`slowframe status`
    from a shell beside the service), else a per-user folder."""
    if os.environ.get("RUNTIME_DIRECTORY"):
        return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    if SYSTEM_RUNTIME_DIR.is_dir():
        return SYSTEM_RUNTIME_DIR
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "slowframe"
    return Path(f"/tmp/slowframe-{os.getuid()}")


def on_models_drive(path: Path) -> Path | None:
    """Where ``path`` is on the card's MODELS_DRIVE as a PC sees it (e.g. ``sdxl-base-1.0``), or None when the
    path is elsewhere (then only the frame itself can put a model there)."""
    try:
        inside = Path(path).relative_to(MODELS_DIR)
    except ValueError:
        return None
    return inside if inside.parts else None
