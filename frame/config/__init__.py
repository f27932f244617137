"""The frame's YAML config: finding the file, reading it into a Config, and reporting every problem in it.

``load_config(path)`` reads the file node by node (frame.config.reader keeps each value's
line and column) and collects every problem as a ``Problem`` printed
``FILE:LINE:COLUMN: error: message``, each saying what is allowed (unknown keys get the
closest valid name). It returns the Config when there are no errors (warnings allowed),
else raises ConfigError holding all of them; ``check_config`` is the same reading for
``slowframe config check``, so one run shows everything the daemon would reject. Relative
paths in the file are relative to the file's folder.

The file is looked for at ``--config``, then SEARCH_PATH (frame.paths); with no
file at all the frame runs on ``default_config()``.

    reader.py     YAML with positions: Problem, ConfigError, the value kinds (knows no keys)
    settings.py   the settings dataclasses (Config and one per section), their defaults
    sections.py   model, display, schedule, history, buttons and top-level keys: a table each
    prompts.py    themes, defaults and wildcards: templates kept with their places in the file
    document.py   a whole file read section by section into a Config; the built-in config
"""

from __future__ import annotations

from pathlib import Path

from frame.config.reader import ConfigError, Problem, read_text
from frame.config.document import default_config, read_document
from frame.config.settings import (ButtonSettings, ButtonSpec, Config, HistorySettings, ModelSettings, QuietHours,
                                   ScheduleSettings, Theme)
from frame.paths import SEARCH_PATH

__all__ = [
    "ButtonSettings", "ButtonSpec", "Config", "ConfigError", "HistorySettings",
    "ModelSettings", "Problem", "QuietHours", "ScheduleSettings", "Theme", "check_config", "check_text", "default_config",
    "find_config", "load_config",
]


def find_config(explicit: str | Path | None = None) -> Path | None:
    """The config file to use: ``explicit`` (which must exist), else the first of SEARCH_PATH, else None."""
    if explicit is not None:
        path = Path(explicit)
        if not path.exists():
            raise ConfigError([Problem(str(path), 1, 1, "no such config file (check the path given to --config)")])
        if not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file (a FIFO or a device?)"
            raise ConfigError([Problem(str(path), 1, 1, f"this is {what}; give --config the YAML file")])
        return path
    return next((p for p in SEARCH_PATH if p.is_file()), None)


def load_config(path: str | Path) -> Config:
    """Read and check ``path``; ConfigError listing every problem when it has errors."""
    path = Path(path)
    return read_document(read_text(path), str(path), path.resolve().parent, source=path)


def check_config(path: str | Path) -> list[Problem]:
    """Every problem in ``path`` (errors and warnings) without raising: ``load_config``'s, as the daemon sees them."""
    try:
        return list(load_config(path).warnings)
    except ConfigError as exc:
        return exc.problems


def check_text(text: str, path: str | Path) -> list[Problem]:
    """Every problem ``text`` would have as the contents of ``path`` (an edit not saved yet): ``check_config``'s."""
    path = Path(path)
    try:
        return list(read_document(text, str(path), path.resolve().parent, source=path).warnings)
    except ConfigError as exc:
        return exc.problems
