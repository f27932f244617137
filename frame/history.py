"""The pictures the frame has made: PNGs with their settings, browsable, bounded in count and size.

Each picture is two files in the history folder, named by when it finished:
``20250301-070412-harbour.png`` carries its settings in PNG text chunks (``parameters``
in the form other Stable Diffusion tools read, ``slowframe`` as JSON), and
``20250301-070412-harbour.json`` is the same record for people and scripts: theme,
prompt, negative prompt, seed, steps, sampler, guidance, size, model, preset, start and
end time, seconds per step. Both are written atomically (temporary file, fsync,
rename); the JSON goes last, so a picture is in the history exactly when its JSON is.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

from PIL import Image, PngImagePlugin

from engine.atomic import temp_files, write_bytes
from engine.png_text import one_line
from frame.userfiles import UserFileError, read_json_object

log = logging.getLogger("slowframe.history")
MAX_RECORD_BYTES = 1024 * 1024   # a record is ~2 KB


@dataclass(frozen=True)
class Entry:
    """One picture in the history."""

    id: str
    image: Path
    record: dict

    @property
    def prompt(self) -> str:
        return str(self.record.get("prompt", ""))

    @property
    def theme(self) -> str:
        return str(self.record.get("theme", ""))

    @property
    def sidecar(self) -> Path:
        return self.image.with_suffix(".json")

    def size_bytes(self) -> int:
        total = 0
        for path in (self.image, self.sidecar):
            try:
                total += path.stat().st_size
            except OSError:   # gone since it was listed
                pass
        return total


def parameters_text(record: dict) -> str:
    """The A1111-style ``parameters`` text: prompt, negative prompt, then 'Steps: 20, Sampler: ...'. The
    pipeline's own text when the worker passed it on (``record["pipeline"]["parameters"]``: the same words
    `slowframe generate` writes, e.g. "Sampler: Euler a"), else one made from the record's fields."""
    pipeline = record.get("pipeline")
    if isinstance(pipeline, dict) and isinstance(pipeline.get("parameters"), str):
        return one_line_each(pipeline["parameters"])
    lines = [one_line(record.get("prompt", ""))]
    if record.get("negative_prompt"):
        lines.append(f"Negative prompt: {one_line(record['negative_prompt'])}")
    fields = [("Steps", record.get("steps")), ("Sampler", record.get("sampler")),
              ("CFG scale", record.get("guidance")), ("Seed", record.get("seed")),
              ("Size", f"{record['width']}x{record['height']}" if "width" in record else None),
              ("Model", record.get("model")), ("Preset", record.get("preset"))]
    lines.append(", ".join(f"{k}: {v}" for k, v in fields if v is not None))
    return "\n".join(lines)


def one_line_each(text: str) -> str:
    """``text``'s lines, each made one printable line (the text came through the job's JSON)."""
    return "\n".join(one_line(line) for line in text.split("\n"))


def _order(entry: Entry) -> tuple[str, int]:
    """Finish time first (the name starts with it), then the ~N of same-second names."""
    stem, _, copy = entry.id.partition("~")
    return (stem[:15], int(copy) if copy.isdigit() else 1)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "picture"


class History:
    """The history folder: add pictures, list them oldest first, keep it within its limits."""

    def __init__(self, folder: Path, keep: int, max_mb: float):
        self.folder = Path(folder)
        self.keep = keep
        self.max_bytes = int(max_mb * 1e6)
        self._cache: tuple[int, list[Entry]] | None = None
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in temp_files(self.folder):   # left by a power cut mid-write
            tmp.unlink(missing_ok=True)
        for png in self.folder.glob("*.png"):    # written, but the power went before its JSON
            if not png.with_suffix(".json").exists():
                png.unlink(missing_ok=True)

    def entries(self) -> list[Entry]:
        """Every complete picture, oldest first (re-read only when the folder changed)."""
        try:
            stamp = self.folder.stat().st_mtime_ns
        except OSError:
            return []
        if self._cache is None or self._cache[0] != stamp:
            self._cache = (stamp, self._read_entries())
        return list(self._cache[1])

    def _read_entries(self) -> list[Entry]:
        out = []
        for sidecar in self.folder.glob("*.json"):
            image = sidecar.with_suffix(".png")
            if not image.exists():
                continue
            try:
                record = read_json_object(sidecar, MAX_RECORD_BYTES, 16)
            except FileNotFoundError:
                continue   # pruned or replaced since the glob
            except UserFileError as exc:
                log.warning("history: skipping %s: %s", sidecar.name, exc)
                continue
            out.append(Entry(sidecar.stem, image, record))
        return sorted(out, key=_order)

    def get(self, entry_id: str) -> Entry | None:
        return next((e for e in self.entries() if e.id == entry_id), None)

    def delete(self, entry_id: str) -> bool:
        """Remove the picture ``entry_id`` (its JSON first, as prune does); False when there is none."""
        entry = self.get(entry_id)
        if entry is None:
            return False
        entry.sidecar.unlink(missing_ok=True)
        entry.image.unlink(missing_ok=True)
        self._cache = None
        log.info("history: deleted %s", entry_id)
        return True

    def recent_prompts(self, n: int) -> list[str]:
        """The prompts of the last ``n`` pictures, oldest first."""
        return [e.prompt for e in self.entries()[-n:]] if n > 0 else []

    def add(self, image: Image.Image, record: dict, finished_stamp: str) -> Entry:
        """Store a picture and its record (``finished_stamp`` like '20250301-070412'), then prune."""
        base = stem = f"{finished_stamp}-{_slug(str(record.get('theme', '')))}"
        n = 1
        while (self.folder / f"{stem}.json").exists() or (self.folder / f"{stem}.png").exists():
            n += 1
            stem = f"{base}~{n}"   # two pictures finished in the same second
        info = PngImagePlugin.PngInfo()
        info.add_text("parameters", parameters_text(record))
        info.add_text("slowframe", json.dumps(record, sort_keys=True))
        png = self.folder / f"{stem}.png"
        buffer = BytesIO()
        image.save(buffer, format="PNG", pnginfo=info)
        write_bytes(png, buffer.getvalue())
        write_bytes(png.with_suffix(".json"), (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
        entry = Entry(stem, png, record)
        self._cache = None
        self.prune()
        return entry

    def prune(self) -> list[str]:
        """Delete the oldest pictures beyond ``keep`` or ``max_mb`` (never the newest); their ids."""
        entries = self.entries()
        sizes = [e.size_bytes() for e in entries]
        total = sum(sizes)
        removed = []
        while len(entries) > 1 and (len(entries) > self.keep or total > self.max_bytes):
            oldest = entries.pop(0)
            total -= sizes.pop(0)
            oldest.sidecar.unlink(missing_ok=True)   # the JSON first: the entry vanishes at once
            oldest.image.unlink(missing_ok=True)
            removed.append(oldest.id)
        self._cache = None
        if removed:
            log.info("history: removed %d old picture(s) to stay within %d pictures / %.0f MB",
                     len(removed), self.keep, self.max_bytes / 1e6)
        return removed
