"""Inline SVG charts for the static report, drawn from plain numbers.

Every chart is a pure function from data to an SVG string with no external resources.
All text that reaches the SVG (titles, labels, legend entries) goes through `esc`, so a
run or model name cannot inject markup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)


def esc(text: object) -> str:
    """Text safe inside HTML/SVG element content and double- or single-quoted attributes."""
    return escape(str(text), quote=True)


def color(k: int) -> str:
    return PALETTE[k % len(PALETTE)]


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]
    color: str


@dataclass(frozen=True)
class Frame:
    """Plot area geometry and data ranges; maps data coordinates to pixels."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x_min: float
    x_max: float
    y_min: float
    y_max: float

    def x(self, value: float) -> float:
        span = (self.x_max - self.x_min) or 1.0
        return self.left + (value - self.x_min) / span * (self.width - self.left - self.right)

    def y(self, value: float) -> float:
        span = (self.y_max - self.y_min) or 1.0
        return self.height - self.bottom - (value - self.y_min) / span * (self.height - self.top - self.bottom)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (steps of 1, 2 or 5 times a power of ten)."""
    if high <= low:
        return [low]
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _fmt_tick(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _axes(
    frame: Frame, x_ticks: Sequence[tuple[float, str]], y_ticks: Sequence[float], x_label: str, y_label: str
) -> list[str]:
    parts = []
    for value in y_ticks:
        y = frame.y(value)
        right = frame.width - frame.right
        parts.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" class="grid"/>')
        parts.append(
            f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{esc(_fmt_tick(value))}</text>'
        )
    base = frame.height - frame.bottom
    for value, text in x_ticks:
        x = frame.x(value)
        parts.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" class="axis"/>')
        parts.append(f'<text x="{x:.1f}" y="{base + 17}" text-anchor="middle" class="tick">{esc(text)}</text>')
    parts.append(f'<line x1="{frame.left}" y1="{base}" x2="{frame.width - frame.right}" y2="{base}" class="axis"/>')
    parts.append(f'<line x1="{frame.left}" y1="{frame.top}" x2="{frame.left}" y2="{base}" class="axis"/>')
    mid_x = (frame.left + frame.width - frame.right) / 2
    parts.append(
        f'<text x="{mid_x:.1f}" y="{frame.height - 6}" text-anchor="middle" class="label">{esc(x_label)}</text>'
    )
    mid_y = (frame.top + base) / 2
    parts.append(
        f'<text x="14" y="{mid_y:.1f}" text-anchor="middle" class="label" '
        f'transform="rotate(-90 14 {mid_y:.1f})">{esc(y_label)}</text>'
    )
    return parts


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{esc(title)}"><title>{esc(title)}</title>' + "".join(body) + "</svg>"
    )


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] = (0.0, 1.0),
    x_ticks: Sequence[tuple[float, str]] | None = None,
    width: int = 460,
    height: int = 280,
    markers: bool = False,
) -> str:
    """Lines through each series' points; `x_ticks` gives positions and labels of x ticks."""
    xs = [x for s in series for x, _ in s.points] or [0.0, 1.0]
    frame = Frame(width, height, 48, 12, 12, 40, min(xs), max(xs), *y_range)
    if x_ticks is None:
        x_ticks = [(v, _fmt_tick(v)) for v in nice_ticks(frame.x_min, frame.x_max, 6)]
    body = _axes(frame, x_ticks, nice_ticks(*y_range, 5), x_label, y_label)
    for s in series:
        if not s.points:
            continue
        path = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in s.points)
        body.append(
            f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2">'
            f"<title>{esc(s.label)}</title></polyline>"
        )
        if markers:
            for x, y in s.points:
                body.append(
                    f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="3.5" fill="{s.color}">'
                    f"<title>{esc(s.label)}: {y:.3f}</title></circle>"
                )
    return _svg(width, height, title, body)


def scatter_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 460,
    height: int = 280,
    highlights: Sequence[Series] = (),
) -> str:
    """Points in [0, 1] x [0, 1]; `highlights` are drawn larger on top (e.g. run means)."""
    frame = Frame(width, height, 48, 12, 12, 40, 0.0, 1.0, 0.0, 1.0)
    ticks = nice_ticks(0.0, 1.0, 5)
    body = _axes(frame, [(t, _fmt_tick(t)) for t in ticks], ticks, x_label, y_label)
    for s in series:
        for x, y in s.points:
            cx, cy = frame.x(x), frame.y(y)
            body.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.6" fill="{s.color}" fill-opacity="0.45"/>')
    for s in highlights:
        for x, y in s.points:
            body.append(
                f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="6" fill="{s.color}" '
                f'stroke="#222" stroke-width="1.2">'
                f"<title>{esc(s.label)}: LR {x:.3f}, AUV {y:.3f}</title></circle>"
            )
    return _svg(width, height, title, body)


def radar_chart(
    axes: Sequence[str], series: Sequence[tuple[str, Sequence[float], str]], *, title: str, size: int = 320,
    floor: float = 0.08,
) -> str:
    """One polygon per series over the axes; values in [0, 1] map to radius floor..1.

    The floor keeps a zero value visible as a small polygon instead of collapsing it
    onto the centre.
    """
    width = size + 150  # room for axis names on the left and right
    cx, cy = width / 2, size / 2
    radius = size / 2 - 40
    n = len(axes)

    def point(k: int, value: float) -> tuple[float, float]:
        angle = -math.pi / 2 + 2 * math.pi * k / n
        r = radius * (floor + (1 - floor) * min(max(value, 0.0), 1.0))
        return cx + r * math.cos(angle), cy + r * math.sin(angle)

    def label_at(k: int) -> tuple[float, float]:
        angle = -math.pi / 2 + 2 * math.pi * k / n
        r = radius + 14
        return cx + r * math.cos(angle), cy + r * math.sin(angle)

    body = []
    for level in (0.25, 0.5, 0.75, 1.0):
        ring = " ".join(f"{x:.1f},{y:.1f}" for x, y in (point(k, level) for k in range(n)))
        body.append(f'<polygon points="{ring}" class="ring"/>')
    for k, name in enumerate(axes):
        x, y = point(k, 1.0)
        body.append(f'<line x1="{cx:.1f}" y1="{cy:.1f}" x2="{x:.1f}" y2="{y:.1f}" class="grid"/>')
        lx, ly = label_at(k)
        anchor = "middle" if abs(lx - cx) < 10 else ("start" if lx > cx else "end")
        # Names above the centre sit on their baseline; names below hang from it.
        dy = -2 if ly < cy - 10 else (12 if ly > cy + 10 else 4)
        body.append(f'<text x="{lx:.1f}" y="{ly + dy:.1f}" text-anchor="{anchor}" class="label">{esc(name)}</text>')
    for label, values, stroke in series:
        poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in (point(k, v) for k, v in enumerate(values)))
        body.append(
            f'<polygon points="{poly}" fill="{stroke}" fill-opacity="0.12" stroke="{stroke}" stroke-width="2">'
            f"<title>{esc(label)}</title></polygon>"
        )
    return _svg(int(width), size, title, body)


def bar_chart(
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None], str]],
    *,
    title: str,
    y_label: str,
    y_range: tuple[float, float] = (0.0, 1.0),
    width: int = 460,
    height: int = 280,
) -> str:
    """Grouped bars: one group per entry of `groups`, one bar per series (label, values, colour).

    A None value draws no bar and a "n/a" mark, so "not judged" never looks like zero.
    """
    frame = Frame(width, height, 48, 12, 12, 40, 0.0, float(max(len(groups), 1)), *y_range)
    body = _axes(frame, [(k + 0.5, name) for k, name in enumerate(groups)], nice_ticks(*y_range, 5), "", y_label)
    slot = (frame.x(1.0) - frame.x(0.0)) * 0.8 / max(len(series), 1)
    for k in range(len(groups)):
        start = frame.x(float(k)) + (frame.x(1.0) - frame.x(0.0)) * 0.1
        for j, (label, values, colour) in enumerate(series):
            value = values[k] if k < len(values) else None
            x = start + j * slot
            if value is None:
                body.append(f'<text x="{x + slot / 2:.1f}" y="{frame.y(y_range[0]) - 4:.1f}" text-anchor="middle" '
                            f'class="tick">n/a</text>')
                continue
            top = frame.y(min(max(value, y_range[0]), y_range[1]))
            body.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{slot * 0.9:.1f}" '
                        f'height="{frame.y(y_range[0]) - top:.1f}" fill="{colour}">'
                        f"<title>{esc(label)} · {esc(groups[k])}: {value:.3f}</title></rect>")
    return _svg(width, height, title, body)


def min_max_normalise(values: Sequence[float]) -> list[float]:
    """(v - min) / (max - min) per value; all 1.0 when every value is the same."""
    low, high = min(values), max(values)
    if high - low <= 1e-12:
        return [1.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


def legend(entries: Sequence[tuple[str, str]]) -> str:
    """An HTML legend: a colour swatch and an escaped label per entry."""
    items = "".join(
        f'<li><span class="swatch" style="background:{c}"></span>{esc(label)}</li>' for label, c in entries
    )
    return f'<ul class="legend">{items}</ul>'
