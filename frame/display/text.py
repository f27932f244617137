"""Text on the panel: the caption strip under a picture, the status strip under a picture being made, the
error screen and the notice screen (what the frame is doing, or what it needs).

Text is drawn without anti-aliasing in pure black on pure white (and an ``accent`` ink's
pure colour): those map exactly onto the panel's inks, so letters come out crisp instead
of dithered.
"""

from __future__ import annotations

import functools
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

FONT_PATHS = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",  # Debian / Raspberry Pi OS fonts-dejavu-core
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
)
INK = (0, 0, 0)
PAPER = (255, 255, 255)
RGB = tuple[int, int, int]


@functools.lru_cache(maxsize=8)
def font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """DejaVu Sans at ``size`` pixels when installed, else Pillow's built-in font."""
    for path in FONT_PATHS:
        if Path(path).exists():
            return ImageFont.truetype(path, size)
    return ImageFont.load_default(size)


def caption_height(panel_height: int) -> int:
    """Height of the caption strip on a panel ``panel_height`` pixels tall."""
    return max(20, round(panel_height * 0.05))


def _fit_line(draw: ImageDraw.ImageDraw, text: str, face, width: int) -> str:
    """``text`` cut at a word boundary with an ellipsis so it fits ``width`` pixels."""
    if draw.textlength(text, font=face) <= width:
        return text
    words = text.split()
    while words and draw.textlength(" ".join(words) + " …", font=face) > width:
        words.pop()
    line = " ".join(words) + " …" if words else "…"
    while draw.textlength(line, font=face) > width and len(line) > 1:
        line = line[:-2] + "…"
    return line


def caption_strip(text: str, width: int, height: int) -> Image.Image:
    """A white strip with ``text`` (e.g. the prompt) on one line, shortened to fit."""
    strip = Image.new("RGB", (width, height), PAPER)
    draw = ImageDraw.Draw(strip)
    draw.fontmode = "1"
    face = font(max(10, round(height * 0.6)))
    margin = round(height * 0.4)
    line = _fit_line(draw, " ".join(text.split()), face, width - 2 * margin)
    draw.text((margin, height / 2), line, fill=INK, font=face, anchor="lm")
    return strip


def _wrap(draw: ImageDraw.ImageDraw, text: str, face, width: int) -> list[str]:
    """Greedy word wrap by rendered width; a word wider than a line is cut with an ellipsis."""
    lines = []
    for paragraph in text.splitlines() or [""]:
        line = ""
        for word in paragraph.split():
            candidate = f"{line} {word}" if line else word
            if line and draw.textlength(candidate, font=face) > width:
                lines.append(_fit_line(draw, line, face, width))
                line = word
            else:
                line = candidate
        lines.append(_fit_line(draw, line, face, width))
    return lines


def _bold(draw: ImageDraw.ImageDraw, xy: tuple[int, int], text: str, face, fill: RGB, weight: int) -> None:
    """``text`` drawn ``weight`` times a pixel apart: bold with any font, and still crisp (a stroke would be
    anti-aliased, leaving colours between the inks)."""
    for dx in range(weight):
        draw.text((xy[0] + dx, xy[1]), text, fill=fill, font=face)


def _canvas(size: tuple[int, int]) -> tuple[Image.Image, ImageDraw.ImageDraw, int, int]:
    """A white screen to draw crisp text on, its drawing context, its shorter side and its margin."""
    screen = Image.new("RGB", size, PAPER)
    draw = ImageDraw.Draw(screen)
    draw.fontmode = "1"
    unit = min(size)
    return screen, draw, unit, round(unit * 0.06)


def error_screen(message: str, size: tuple[int, int], title: str = "slowframe could not make a picture",
                 footer: str = "") -> Image.Image:
    """A white screen with a title, the word-wrapped ``message`` and an optional footer line."""
    width, height = size
    screen, draw, unit, margin = _canvas(size)
    text_width = width - 2 * margin
    title_face = font(max(12, round(unit * 0.065)))
    body_face = font(max(10, round(unit * 0.042)))
    title_lines = _wrap(draw, title, title_face, text_width)[:2]
    y = margin
    for line in title_lines:
        draw.text((margin, y), line, fill=INK, font=title_face)
        y += round(title_face.size * 1.25)
    y += round(unit * 0.02)
    draw.line((margin, y, width - margin, y), fill=INK, width=max(1, round(unit * 0.005)))
    y += round(unit * 0.04)
    line_height = round(body_face.size * 1.35)
    bottom = height - margin - (2 * line_height if footer else 0)
    for line in _wrap(draw, message, body_face, text_width):
        if y + line_height > bottom:
            break
        draw.text((margin, y), line, fill=INK, font=body_face)
        y += line_height
    if footer:
        draw.text((margin, height - margin - line_height), _fit_line(draw, footer, body_face, text_width),
                  fill=INK, font=body_face)
    return screen


def status_height(panel_height: int) -> int:
    """Height of the status strip under a picture being made: a line readable across a room."""
    return max(24, round(panel_height * 0.08))


def status_strip(text: str, width: int, height: int, progress: float, accent: RGB) -> Image.Image:
    """A white strip with ``text`` (theme, step, ready time) on one line over a bar in ``accent`` filled to
    ``progress`` (0..1) of the width."""
    strip = Image.new("RGB", (width, height), PAPER)
    draw = ImageDraw.Draw(strip)
    draw.fontmode = "1"
    bar = max(3, round(height * 0.14))
    draw.rectangle((0, 0, width - 1, bar - 1), fill=INK)
    done = round(width * min(1.0, max(0.0, progress)))
    if done:
        draw.rectangle((0, 0, done - 1, bar - 1), fill=accent)
    face = font(max(10, round((height - bar) * 0.62)))
    margin = round(height * 0.3)
    line = _fit_line(draw, " ".join(text.split()), face, width - 2 * margin)
    draw.text((margin, bar + (height - bar) / 2), line, fill=INK, font=face, anchor="lm")
    return strip


def notice_screen(title: str, lines: list[str], size: tuple[int, int], accent: RGB, footer: str = "") -> Image.Image:
    """A screen readable at a distance: ``title`` in white on an ``accent`` band, then ``lines`` in large
    type (each word-wrapped; what does not fit is left off), and a small ``footer``."""
    width, height = size
    screen, draw, unit, margin = _canvas(size)
    text_width = width - 2 * margin
    title_face = font(max(14, round(unit * 0.1)))
    body_face = font(max(12, round(unit * 0.066)))
    footer_face = font(max(10, round(unit * 0.04)))
    title_lines = _wrap(draw, title, title_face, text_width)[:2]
    title_step = round(title_face.size * 1.2)
    band = 2 * margin + title_step * len(title_lines) - round(title_face.size * 0.2)
    draw.rectangle((0, 0, width - 1, band - 1), fill=accent)
    y = margin
    for line in title_lines:
        _bold(draw, (margin, y), line, title_face, PAPER, max(2, title_face.size // 20))
        y += title_step
    y = band + margin
    line_height = round(body_face.size * 1.3)
    footer_height = round(footer_face.size * 1.6) if footer else 0
    bottom = height - margin - footer_height
    for paragraph in lines:
        for line in _wrap(draw, paragraph, body_face, text_width):
            if y + line_height > bottom:
                break
            _bold(draw, (margin, y), line, body_face, INK, max(1, body_face.size // 16))
            y += line_height
        y += round(line_height * 0.25)
    if footer:
        draw.text((margin, height - margin - footer_face.size), _fit_line(draw, footer, footer_face, text_width),
                  fill=INK, font=footer_face)
    return screen
