"""Inline SVG plots (scatter, lines, grouped bars) with no plotting library.

Every text drawn comes from the caller, already formatted, and is escaped here; an axis's tick
labels are returned with the plot so the report can list them in its CSV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PLOT_WIDTH, HEIGHT = 480, 440
LEFT, TOP, BOTTOM = 72, 36, 110
RIGHT = LEFT + PLOT_WIDTH  # the plot area's right edge; the legend lies beyond it
LEGEND_CHAR = 6  # rough width of one legend character, for sizing the legend
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
MUTED = "#888888"


@dataclass(frozen=True)
class Axis:
    """A linear or logarithmic axis from `low` to `high`, with (value, label) ticks."""

    label: str
    low: float
    high: float
    ticks: tuple[tuple[float, str], ...]
    log: bool = False

    def fraction(self, value: float) -> float:
        if self.log:
            return (math.log(value) - math.log(self.low)) / (math.log(self.high) - math.log(self.low))
        return (value - self.low) / (self.high - self.low)


def log_axis(label: str, values: Sequence[float]) -> Axis:
    """A log axis over powers of two that covers `values` (all > 0) and 1; ticks at every power, or
    every other one (keeping 1) when there would be more than nine."""
    low = math.floor(math.log2(min(min(values), 1.0)))
    high = math.ceil(math.log2(max(max(values), 1.0)))
    high = max(high, low + 1)
    step = 1 if high - low <= 8 else 2
    ticks = tuple((2.0 ** k, f"{2.0 ** k:g}") for k in range(low, high + 1) if k % step == 0)
    return Axis(label, 2.0 ** low, 2.0 ** high, ticks, log=True)


def linear_axis(label: str, ticks: Sequence[tuple[float, str]]) -> Axis:
    values = [v for v, _ in ticks]
    return Axis(label, min(values), max(values), tuple(ticks))


def category_axis(label: str, names: Sequence[str]) -> Axis:
    """Categories at 0..n-1, with half a step of margin on either side."""
    return Axis(label, -0.5, len(names) - 0.5, tuple((float(i), n) for i, n in enumerate(names)))


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    tip: str


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[Point, ...]
    dashed: bool = False


@dataclass(frozen=True)
class Plot:
    name: str
    title: str
    svg: str
    ticks: tuple[tuple[str, str], ...] = field(default=())  # (axis label, tick label)


def _x(axis: Axis, value: float) -> float:
    return LEFT + axis.fraction(value) * PLOT_WIDTH


def _y(axis: Axis, value: float) -> float:
    return HEIGHT - BOTTOM - axis.fraction(value) * (HEIGHT - TOP - BOTTOM)


def _text(x: float, y: float, text: str, anchor: str = "middle", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(text)}</text>'


def _frame(title: str, x: Axis, y: Axis, x_ticks_rotated: bool = False) -> list[str]:
    parts = [_text(LEFT + PLOT_WIDTH / 2, 20, title, extra=' font-size="13" font-weight="bold"')]
    x0, x1, y0, y1 = LEFT, RIGHT, HEIGHT - BOTTOM, TOP
    parts.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="#444"/>')
    for value, label in y.ticks:
        py = _y(y, value)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{py:.1f}" y2="{py:.1f}" stroke="#e4e4e4"/>')
        parts.append(_text(x0 - 6, py + 4, label, "end"))
    for value, label in x.ticks:
        px = _x(x, value)
        parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{y0}" y2="{y0 + 5}" stroke="#444"/>')
        if x_ticks_rotated:
            parts.append(_text(px, y0 + 14, label, "end", f' transform="rotate(-30 {px:.1f} {y0 + 14})"'))
        else:
            parts.append(_text(px, y0 + 18, label))
    parts.append(_text((x0 + x1) / 2, HEIGHT - 8 if x_ticks_rotated else y0 + 40, x.label))
    parts.append(_text(14, (y0 + y1) / 2, y.label, extra=f' transform="rotate(-90 14 {(y0 + y1) / 2:.1f})"'))
    return parts


def _legend(labels: Sequence[str]) -> list[str]:
    parts = []
    for i, label in enumerate(labels):
        y = TOP + 12 + 18 * i
        parts.append(f'<rect x="{RIGHT + 14}" y="{y - 9}" width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/>')
        parts.append(_text(RIGHT + 30, y, label, "start"))
    return parts


def _svg(name: str, title: str, parts: list[str], x: Axis, y: Axis, legend: Sequence[str]) -> Plot:
    """The SVG element, wide enough for the longest legend label, and its axis ticks."""
    body = "\n".join(parts + _legend(legend))
    width = RIGHT + 40 + LEGEND_CHAR * max((len(label) for label in legend), default=0)
    svg = (f'<svg class="plot" id="plot-{escape(name)}" role="img" '
           f'viewBox="0 0 {width} {HEIGHT}" width="{width}" height="{HEIGHT}" font-family="sans-serif" font-size="11" '
           f'aria-label="{escape(title)}">\n'
           f"{body}\n</svg>")
    ticks = tuple((x.label, t) for _, t in x.ticks) + tuple((y.label, t) for _, t in y.ticks)
    return Plot(name, title, svg, ticks)


def _marker(px: float, py: float, color: str, tip: str) -> str:
    return f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{color}"><title>{escape(tip)}</title></circle>'


def scatter_plot(name: str, title: str, x: Axis, y: Axis, series: Sequence[Series], diagonal: bool = True) -> Plot:
    """Points per series; with `diagonal`, the line y = x (no change) drawn over the shared range."""
    parts = _frame(title, x, y)
    if diagonal:
        low, high = max(x.low, y.low), min(x.high, y.high)
        parts.append(f'<line x1="{_x(x, low):.1f}" y1="{_y(y, low):.1f}" x2="{_x(x, high):.1f}" '
                     f'y2="{_y(y, high):.1f}" stroke="{MUTED}" stroke-dasharray="4 3"/>')
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        parts += [_marker(_x(x, p.x), _y(y, p.y), color, p.tip) for p in s.points]
    return _svg(name, title, parts, x, y, [s.label for s in series])


def line_plot(name: str, title: str, x: Axis, y: Axis, series: Sequence[Series], x_ticks_rotated: bool = False) -> Plot:
    """One polyline with markers per series."""
    parts = _frame(title, x, y, x_ticks_rotated)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{_x(x, p.x):.1f},{_y(y, p.y):.1f}" for p in s.points)
        dash = ' stroke-dasharray="6 3"' if s.dashed else ""
        parts.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        parts += [_marker(_x(x, p.x), _y(y, p.y), color, p.tip) for p in s.points]
    return _svg(name, title, parts, x, y, [s.label for s in series])


def bar_plot(name: str, title: str, groups: Sequence[str], series: Sequence[Series], y: Axis) -> Plot:
    """Grouped bars: one group per name in `groups`, one bar per series; a point's x is its group's
    index. Bars rise from the axis' bottom; a reference line marks y = 1 on a log axis."""
    x = category_axis("task", groups)
    parts = _frame(title, x, y, x_ticks_rotated=True)
    slot = PLOT_WIDTH / max(len(groups), 1)
    width = 0.8 * slot / max(len(series), 1)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        for p in s.points:
            left = _x(x, p.x) - 0.4 * slot + i * width
            top, bottom = _y(y, p.y), _y(y, y.low)
            parts.append(f'<rect x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" height="{bottom - top:.1f}" '
                         f'fill="{color}"><title>{escape(p.tip)}</title></rect>')
    if y.log and y.low < 1 < y.high:
        parts.append(f'<line x1="{LEFT}" x2="{RIGHT}" y1="{_y(y, 1):.1f}" y2="{_y(y, 1):.1f}" '
                     f'stroke="#444" stroke-dasharray="2 2"/>')
    return _svg(name, title, parts, x, y, [s.label for s in series])
