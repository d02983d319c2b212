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
    """A labelled line or point set; `key` tags its SVG element (`data-run`) so a page can show or hide it."""

    label: str
    points: tuple[tuple[float, float], ...]
    color: str
    key: str = ""


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


def _num(value: float) -> str:
    return f"{value:.6g}"


def _data_points(points: Sequence[tuple[float, float]]) -> str:
    """The plotted values as `data-x` / `data-y` attributes, so tools and tests can read a chart's data."""
    return (f'data-x="{" ".join(_num(x) for x, _ in points)}" '
            f'data-y="{" ".join(_num(y) for _, y in points)}"')


def update_ticks(low: float, high: float, count: int = 6) -> list[tuple[float, str]]:
    """Ticks for an axis of update numbers: whole numbers only, since there is no update 1.5."""
    ticks = [t for t in nice_ticks(low, high, count) if float(t).is_integer()]
    if len(ticks) < 2:
        ticks = [float(t) for t in range(math.ceil(low), math.floor(high) + 1)] or [low]
    return [(t, _fmt_tick(t)) for t in ticks]


def auto_range(values: Sequence[float]) -> tuple[float, float]:
    """A y range around the values with a little room on both sides (a flat series gets a band around it)."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    if high - low <= 1e-12 * max(1.0, abs(high)):
        pad = max(abs(high) * 0.1, 1e-9) if high else 0.1
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return low - pad, high + pad


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


@dataclass(frozen=True)
class Band:
    """One curve of a band chart: a mean line over x, the spread [low, high] shaded under it, and
    the runs it was averaged from (`members`, drawn thin). `key` tags the mean line like a member's
    when the band stands for a single run, so hiding that run hides its line."""

    label: str
    color: str
    xs: tuple[float, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    members: tuple[Series, ...] = ()
    key: str = ""

    @property
    def points(self) -> tuple[tuple[float, float], ...]:
        return tuple(zip(self.xs, self.mean))


#: Mean lines with at most this many points also get a dot per point (a single point has no line).
MARKER_LIMIT = 40


def _polyline(frame: Frame, points: Sequence[tuple[float, float]], colour: str, label: str, *, width: float,
              css: str, extra: str = "") -> str:
    path = " ".join(f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in points)
    return (f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="{width}" class="{css}" '
            f'{extra}{_data_points(points)}><title>{esc(label)}</title></polyline>')


def _band_polygon(frame: Frame, band: Band) -> str:
    upper = [f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(band.xs, band.high)]
    lower = [f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(reversed(band.xs), reversed(band.low))]
    return (f'<polygon points="{" ".join(upper + lower)}" fill="{band.color}" fill-opacity="0.18" stroke="none" '
            f'class="band" data-label="{esc(band.label)}" data-x="{" ".join(map(_num, band.xs))}" '
            f'data-low="{" ".join(map(_num, band.low))}" data-high="{" ".join(map(_num, band.high))}">'
            f"<title>{esc(band.label)}: min–max over runs</title></polygon>")


def band_chart(
    bands: Sequence[Band],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    width: int = 460,
    height: int = 280,
) -> str:
    """Mean lines with their spread shaded and their runs drawn thin; the y range fits the data unless given."""
    values = [v for b in bands for v in (*b.mean, *b.low, *b.high)]
    values += [y for b in bands for m in b.members for _, y in m.points]
    y_range = y_range or auto_range(values)
    xs = [x for b in bands for x in b.xs] + [x for b in bands for m in b.members for x, _ in m.points]
    xs = xs or [0.0, 1.0]
    frame = Frame(width, height, 60, 12, 12, 40, min(xs), max(xs), *y_range)
    body = _axes(frame, update_ticks(frame.x_min, frame.x_max), nice_ticks(*y_range, 5), x_label, y_label)
    for band in bands:
        if band.members and any(h - lo > 0 for lo, h in zip(band.low, band.high)):
            body.append(_band_polygon(frame, band))
    for band in bands:
        for member in band.members:
            if member.points:
                body.append(_polyline(frame, member.points, member.color, member.label, width=1, css="run-line",
                                      extra=f'stroke-opacity="0.55" data-run="{esc(member.key)}" '))
    for band in bands:
        if not band.xs:
            continue
        run = f'data-run="{esc(band.key)}" ' if band.key else ""
        body.append(_polyline(frame, band.points, band.color, band.label, width=2.2, css="mean",
                              extra=f'data-label="{esc(band.label)}" {run}'))
        if len(band.xs) <= MARKER_LIMIT:
            for x, y in band.points:
                body.append(f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="2.8" fill="{band.color}" '
                            f'{run}><title>{esc(band.label)} · {_num(x)}: {y:.4g}</title></circle>')
    return _svg(width, height, title, body)


def heatmap_chart(
    counts: Sequence[Sequence[int]],
    edges: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str,
    colour: str = PALETTE[0],
    size: int = 300,
) -> str:
    """Counts on a square grid (counts[i][j]: x bin i, y bin j, bin edges shared by both axes),
    with the diagonal y = x dashed: cells above it are pairs where y exceeds x."""
    low, high = edges[0], edges[-1]
    frame = Frame(size + 60, size + 52, 48, 12, 12, 40, low, high, low, high)
    ticks = nice_ticks(low, high, 5)
    body = _axes(frame, [(t, _fmt_tick(t)) for t in ticks], ticks, x_label, y_label)
    top = max((c for row in counts for c in row), default=0) or 1
    for i, row in enumerate(counts):
        for j, count in enumerate(row):
            if not count:
                continue
            x0, x1 = frame.x(edges[i]), frame.x(edges[i + 1])
            y0, y1 = frame.y(edges[j + 1]), frame.y(edges[j])
            # Square-root shading keeps a cell of a few pairs visible beside a crowded one.
            shade = 0.15 + 0.85 * math.sqrt(count / top)
            body.append(
                f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" fill="{colour}" '
                f'fill-opacity="{shade:.2f}" class="cell" data-i="{i}" data-j="{j}" data-count="{count}">'
                f"<title>{esc(x_label)} {edges[i]:.2f}–{edges[i + 1]:.2f}, {esc(y_label)} {edges[j]:.2f}–"
                f"{edges[j + 1]:.2f}: {count}</title></rect>")
            if x1 - x0 >= 18:
                ink = "#fff" if shade > 0.6 else "#222"
                body.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{(y0 + y1) / 2 + 4:.1f}" text-anchor="middle" '
                            f'class="tick" style="fill:{ink}">{count}</text>')
    body.append(f'<line x1="{frame.x(low):.1f}" y1="{frame.y(low):.1f}" x2="{frame.x(high):.1f}" '
                f'y2="{frame.y(high):.1f}" stroke="#555" stroke-dasharray="4 3" class="diagonal"/>')
    return _svg(frame.width, frame.height, title, body)


def stacked_bar_chart(
    xs: Sequence[float],
    layers: Sequence[tuple[str, Sequence[float], str]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 460,
    height: int = 280,
) -> str:
    """One bar per x, stacked from its layers' values (label, values aligned with xs, colour), on [0, 1]."""
    if not xs:
        return _svg(width, height, title, [])
    span = (max(xs) - min(xs)) or 1.0
    gap = min((b - a for a, b in zip(xs, xs[1:])), default=span) or span
    frame = Frame(width, height, 48, 12, 12, 40, min(xs) - gap / 2, max(xs) + gap / 2, 0.0, 1.0)
    body = _axes(frame, update_ticks(min(xs), max(xs)), nice_ticks(0.0, 1.0, 5), x_label, y_label)
    bar = (frame.x(gap) - frame.x(0.0)) * 0.8
    for k, x in enumerate(xs):
        base = 0.0
        for label, values, colour in layers:
            value = values[k]
            top = min(base + value, 1.0)
            body.append(f'<rect x="{frame.x(x) - bar / 2:.1f}" y="{frame.y(top):.1f}" width="{bar:.1f}" '
                        f'height="{frame.y(base) - frame.y(top):.1f}" fill="{colour}" class="layer" '
                        f'data-layer="{esc(label)}" data-x="{_num(x)}" data-value="{_num(value)}">'
                        f"<title>{esc(label)} · {_num(x)}: {value:.3f}</title></rect>")
            base = top
    return _svg(width, height, title, body)


@dataclass(frozen=True)
class PointSet:
    """Points of one colour in a `point_chart`; `ids` (one per point, optional) tag each dot (`data-id`)."""

    label: str
    points: tuple[tuple[float, float], ...]
    color: str
    ids: tuple[str, ...] = ()


def point_chart(
    sets: Sequence[PointSet],
    *,
    title: str,
    x_label: str = "",
    y_label: str = "",
    markers: Sequence[PointSet] = (),
    width: int = 460,
    height: int = 380,
) -> str:
    """Dots on axes fitted to the data (a 2-D map such as t-SNE's, whose axes carry no units);
    `markers` are drawn on top as larger outlined dots (e.g. each set's centre)."""
    xs = [x for s in (*sets, *markers) for x, _ in s.points] or [0.0, 1.0]
    ys = [y for s in (*sets, *markers) for _, y in s.points] or [0.0, 1.0]
    frame = Frame(width, height, 48, 12, 12, 40, *auto_range(xs), *auto_range(ys))
    x_ticks = [(t, _fmt_tick(t)) for t in nice_ticks(frame.x_min, frame.x_max, 5)]
    body = _axes(frame, x_ticks, nice_ticks(frame.y_min, frame.y_max, 5), x_label, y_label)
    for s in sets:
        dots = []
        for k, (x, y) in enumerate(s.points):
            tag = f' data-id="{esc(s.ids[k])}"' if k < len(s.ids) else ""
            dots.append(f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="3" fill="{s.color}" '
                        f'fill-opacity="0.6"{tag}><title>{esc(s.label)}'
                        f'{": " + esc(s.ids[k]) if k < len(s.ids) else ""}</title></circle>')
        body.append(f'<g class="points" data-label="{esc(s.label)}" {_data_points(s.points)}>{"".join(dots)}</g>')
    for s in markers:
        for x, y in s.points:
            body.append(f'<circle cx="{frame.x(x):.1f}" cy="{frame.y(y):.1f}" r="7" fill="{s.color}" '
                        f'stroke="#222" stroke-width="1.5" class="marker"><title>{esc(s.label)}</title></circle>')
    return _svg(width, height, title, body)
