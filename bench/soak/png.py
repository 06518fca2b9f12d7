"""Line charts as PNG with nothing but zlib and struct (matplotlib is not a dependency).

``line_chart_png(xs, panels)`` stacks one panel per ``Panel``: a frame, four grid lines,
the y axis' top and bottom values, the title and a colour legend in a 3x5 pixel font
drawn at twice its size, each ``Series`` as a polyline, an optional dashed limit line and
an optional dashed vertical marker (the end of the warm-up). The image is palette-indexed
(colour type 3), so a chart of a few panels is a few kilobytes.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

# Palette indexes: 0 white, 1 black, 2 light grey; series colours from 3 on.
PALETTE = [(255, 255, 255), (0, 0, 0), (215, 215, 215), (31, 119, 180), (214, 39, 40),
           (44, 160, 44), (255, 127, 14), (148, 103, 189), (140, 86, 75)]
WHITE, BLACK, GREY = 0, 1, 2
COLOURS = (3, 5, 6, 7, 8)  # blue, green, orange, purple, brown; red (4) is for limits
RED = 4

_FONT_ROWS = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001001010010", "8": "111101111101111",
    "9": "111101111001111", "A": "010101111101101", "B": "110101110101110",
    "C": "011100100100011", "D": "110101101101110", "E": "111100110100111",
    "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "J": "001001001101010", "K": "101101110101101",
    "L": "100100100100111", "M": "101111111101101", "N": "110101101101101",
    "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010",
    "U": "101101101101111", "V": "101101101101010", "W": "101101111111101",
    "X": "101101010101101", "Y": "101101010010010", "Z": "111001010100111",
    " ": "000000000000000", ".": "000000000000010", "-": "000000111000000",
    "/": "001001010100100", ":": "000010000010000", "%": "101001010100101",
    "(": "010100100100010", ")": "010001001001010", "=": "000111000111000",
    "<": "001010100010001", ">": "100010001010100", "+": "000010111010000",
    "_": "000000000000111",
}
SCALE = 2  # font pixels per glyph pixel
GLYPH_W, GLYPH_H = 4 * SCALE, 5 * SCALE  # advance (3 wide + 1 gap), height


@dataclass
class Series:
    label: str
    values: Sequence[float | None]


@dataclass
class Panel:
    title: str
    series: list[Series] = field(default_factory=list)
    limit: float | None = None  # a dashed red horizontal line (a goal's ceiling)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(width * height)  # palette indexes, all white

    def set(self, x: int, y: int, colour: int) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            self.pixels[y * self.width + x] = colour

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: int, dash: int = 0) -> None:
        """Bresenham; ``dash`` > 0 draws ``dash`` pixels on, ``dash`` off."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, n = dx + dy, 0
        while True:
            if not dash or (n // dash) % 2 == 0:
                self.set(x0, y0, colour)
            n += 1
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: int) -> None:
        for x, y, xe, ye in ((x0, y0, x1, y0), (x0, y1, x1, y1), (x0, y0, x0, y1),
                             (x1, y0, x1, y1)):
            self.line(x, y, xe, ye, colour)

    def fill(self, x0: int, y0: int, x1: int, y1: int, colour: int) -> None:
        for y in range(y0, y1 + 1):
            for x in range(x0, x1 + 1):
                self.set(x, y, colour)

    def text(self, x: int, y: int, text: str, colour: int = BLACK) -> int:
        """Draw ``text`` with its top-left corner at (x, y); the x after it."""
        for ch in text.upper():
            rows = _FONT_ROWS.get(ch, _FONT_ROWS["-"])
            for i, bit in enumerate(rows):
                if bit == "1":
                    gx, gy = x + (i % 3) * SCALE, y + (i // 3) * SCALE
                    self.fill(gx, gy, gx + SCALE - 1, gy + SCALE - 1, colour)
            x += GLYPH_W
        return x


def text_width(text: str) -> int:
    return len(text) * GLYPH_W


def encode_png(width: int, height: int, pixels: bytes | bytearray,
               palette: Sequence[tuple[int, int, int]] = PALETTE) -> bytes:
    """A valid 8-bit palette PNG of ``pixels`` (one palette index per pixel, row-major)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    raw = b"".join(b"\x00" + bytes(pixels[y * width:(y + 1) * width]) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0))
            + chunk(b"PLTE", b"".join(bytes(c) for c in palette))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b""))


def fmt_value(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:.0f}K"
    if abs(v) >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


def _draw_panel(c: Canvas, top: int, height: int, left: int, right: int,
                xs: Sequence[float], panel: Panel, marker_x: float | None,
                x_label: str) -> None:
    plot_top, plot_bottom = top + GLYPH_H + 8, top + height - GLYPH_H - 10
    x = c.text(left, top, panel.title) + GLYPH_W
    for i, s in enumerate(panel.series):  # the legend, after the title
        colour = COLOURS[i % len(COLOURS)]
        c.fill(x, top + 2, x + 10, top + GLYPH_H - 3, colour)
        x = c.text(x + 14, top, s.label, colour) + GLYPH_W
    values = [v for s in panel.series for v in s.values if v is not None]
    y_max = max([*values, panel.limit or 0.0, 1e-9])
    y_max *= 1.08
    x_min, x_max = (min(xs), max(xs)) if xs else (0.0, 1.0)
    x_span = (x_max - x_min) or 1.0

    def px(xv: float) -> int:
        return left + round((xv - x_min) / x_span * (right - left))

    def py(yv: float) -> int:
        return plot_bottom - round(yv / y_max * (plot_bottom - plot_top))

    for k in range(1, 4):  # grid lines at quarters
        gy = plot_bottom - round(k / 4 * (plot_bottom - plot_top))
        c.line(left + 1, gy, right - 1, gy, GREY)
    c.rect(left, plot_top, right, plot_bottom, BLACK)
    for label, yv in ((fmt_value(y_max), y_max), ("0", 0.0)):
        if panel.limit is None or abs(py(yv) - py(panel.limit)) > GLYPH_H + 2:
            c.text(left - text_width(label) - 6, py(yv) - GLYPH_H // 2, label)
    if panel.limit is not None:
        c.line(left, py(panel.limit), right, py(panel.limit), RED, dash=6)
        label = fmt_value(panel.limit)
        c.text(left - text_width(label) - 6, py(panel.limit) - GLYPH_H // 2, label, RED)
    if marker_x is not None and x_min <= marker_x <= x_max:
        c.line(px(marker_x), plot_top, px(marker_x), plot_bottom, BLACK, dash=3)
    for i, s in enumerate(panel.series):
        colour, prev = COLOURS[i % len(COLOURS)], None
        for xv, yv in zip(xs, s.values, strict=False):
            if yv is None:
                prev = None
                continue
            point = (px(xv), py(yv))
            if prev is not None:
                c.line(*prev, *point, colour)
                c.line(prev[0], prev[1] + 1, point[0], point[1] + 1, colour)  # 2 px thick
            else:
                c.fill(point[0] - 1, point[1] - 1, point[0] + 1, point[1] + 1, colour)
            prev = point
    step = x_step(x_max - x_min)
    tick = math.ceil(x_min / step) * step
    while tick <= x_max + 1e-9:
        c.line(px(tick), plot_bottom, px(tick), plot_bottom + 3, BLACK)
        label = fmt_value(round(tick, 3))
        c.text(px(tick) - text_width(label) // 2, plot_bottom + 6, label)
        tick += step
    c.text(right - text_width(x_label), top, x_label)


def x_step(span: float) -> float:
    """A round tick step giving at most 10 ticks over ``span``."""
    for step in (0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if span / step <= 10:
            return step
    return span / 10


def line_chart_png(xs: Sequence[float], panels: Sequence[Panel], *, width: int = 760,
                   panel_height: int = 150, marker_x: float | None = None,
                   x_label: str = "X: MINUTES") -> bytes:
    """One PNG of ``panels`` stacked, all over the same ``xs``."""
    height = panel_height * len(panels) + 10
    c = Canvas(width, height)
    left, right = 64, width - 12
    for i, panel in enumerate(panels):
        _draw_panel(c, 6 + i * panel_height, panel_height - 6, left, right, xs, panel,
                    marker_x, x_label)
    return encode_png(width, height, c.pixels)
