"""The ``file`` display: each refresh writes PNGs instead of driving a panel (PCs, tests, demos).

In ``output``: ``panel.png`` is exactly what the inky backend would hand the panel (mode
"P", the panel's native orientation, index i = ink i in native order, palette = the
measured inks) and ``look.png`` is what the mounted panel will look like.
Both are replaced atomically, so a viewer never sees half a file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from engine.atomic import atomic_write
from frame.display.base import Display
from frame.display.config import DisplayConfig
from frame.display.errors import DisplayError
from frame.display.panels import get_panel


class FileDisplay(Display):
    """A Display writing ``panel.png`` and ``look.png`` into ``config.output``."""

    def __init__(self, config: DisplayConfig, **kwargs):
        super().__init__(get_panel(config.panel), config, **kwargs)
        self.folder = Path(config.output)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DisplayError(f"display.output: cannot create {self.folder}: {exc.strerror}") from exc

    @property
    def panel_path(self) -> Path:
        return self.folder / "panel.png"

    @property
    def look_path(self) -> Path:
        return self.folder / "look.png"

    def _refresh(self, panel_indices: np.ndarray) -> None:
        native = Image.fromarray(panel_indices, "P")
        native.putpalette(self.palette.flat())
        viewer = self._to_viewer(panel_indices)
        look = Image.fromarray(self.palette.render(viewer), "RGB")
        for image, path in ((native, self.panel_path), (look, self.look_path)):
            try:
                with atomic_write(path) as f:
                    image.save(f, format="PNG")
            except OSError as exc:
                raise DisplayError(f"display.output: cannot write {path}: {exc.strerror}") from exc

    def _to_viewer(self, panel_indices: np.ndarray) -> np.ndarray:
        out = np.rot90(panel_indices, k=-(self.config.rotation // 90))
        if self.config.flip_vertical:
            out = out[::-1, :]
        if self.config.flip_horizontal:
            out = out[:, ::-1]
        return np.ascontiguousarray(out)
