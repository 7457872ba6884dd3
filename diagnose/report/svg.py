"""SVG primitives shared by every chart of the HTML report: escaping, shapes, text, legends, ticks.

Charts are drawn in Python as strings (no JS chart library, nothing fetched). Every string that
comes from a trace or a capture is untrusted and goes through `esc`; the helpers here escape what
they are given, so a chart never writes raw text.
"""

from __future__ import annotations

import html
import math

from diagnose.vocabulary.units import fmt

WIDTH = 1040
FONT = 12
SMALLEST_FONT = 11.5  # the report's CSS for bar labels; every other chart text is larger
LEGIBLE_PX = 10.0  # no chart text is drawn smaller on screen: narrow pages scroll the chart instead
AXIS = "#94a3b8"
GRID = "#e2e8f0"


def finite(value) -> bool:
    """True for a real, finite number (not a bool, not NaN or infinite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def esc(value) -> str:
    """Escape any value for SVG/HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def svg(width: float, height: float, label: str, body: list[str]) -> str:
    """One chart: an <svg> of the given size with an accessible label."""
    narrowest = math.ceil(width * LEGIBLE_PX / SMALLEST_FONT)  # scaled down no further than legible
    return (
        f'<svg class="chart" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" style="min-width: {narrowest}px" role="img" aria-label="{esc(label)}" '
        f'font-size="{FONT}">' + "".join(body) + "</svg>"
    )


def rect(x, y, w, h, fill, tip: str | None = None, extra: str = "") -> str:
    """A filled bar at least one unit wide, with an optional tooltip."""
    tooltip = f"<title>{esc(tip)}</title>" if tip else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1.0):.1f}" height="{h:.1f}" '
        f'fill="{fill}"{extra}>{tooltip}</rect>'
    )


def text(x, y, content, anchor: str = "start", cls: str = "", extra: str = "") -> str:
    """Escaped text at (x, y)."""
    css = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{css}{extra}>{esc(content)}</text>'


def line(x1, y1, x2, y2, stroke: str = AXIS, extra: str = "") -> str:
    """A straight line."""
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}/>'


def cross(x: float, y: float, colour: str, size: float = 5.0) -> str:
    """An × marker (an out-of-memory point, say)."""
    return (
        f'<path d="M{x - size:.1f},{y - size:.1f} L{x + size:.1f},{y + size:.1f} M{x - size:.1f},{y + size:.1f} '
        f'L{x + size:.1f},{y - size:.1f}" stroke="{colour}" stroke-width="2.5"/>'
    )


def triangle_marker(x: float, y: float, colour: str) -> str:
    """A small downward triangle (marks gaps that opened during a synchronising call)."""
    return f'<path d="M{x - 5:.1f},{y:.1f} L{x + 5:.1f},{y:.1f} L{x:.1f},{y + 8:.1f} Z" fill="{colour}"/>'


class Labels:
    """The text already drawn on a chart, as boxes, so that a new label goes where it overlaps none
    of them or is left out (its tooltip and the chart's key still name it)."""

    def __init__(self) -> None:
        self.boxes: list[tuple[float, float, float, float]] = []

    @staticmethod
    def box(x: float, y: float, content: str, anchor: str = "start", size: float = FONT) -> tuple:
        """(left, top, right, bottom) of `content` with its baseline at y; widths over-estimated."""
        w = len(content) * size * 0.62
        left = {"start": x, "middle": x - w / 2, "end": x - w}[anchor]
        return (left, y - 0.85 * size, left + w, y + 0.25 * size)

    def free(self, box: tuple) -> bool:
        """True when `box` overlaps no label drawn so far."""
        left, top, right, bottom = box
        return all(right <= b[0] or left >= b[2] or bottom <= b[1] or top >= b[3] for b in self.boxes)

    def add(self, x: float, y: float, content: str, anchor: str = "start", size: float = FONT) -> None:
        """Record a label drawn at (x, y)."""
        self.boxes.append(self.box(x, y, content, anchor, size))

    def place(self, candidates: list[tuple[float, float, str]], content: str, size: float = FONT):
        """The first (x, y, anchor) of `candidates` where `content` overlaps nothing (and record it
        there), else None."""
        for x, y, anchor in candidates:
            box = self.box(x, y, content, anchor, size)
            if self.free(box):
                self.boxes.append(box)
                return x, y, anchor
        return None


def text_width(content: str) -> float:
    """Rough width in px of `content` at the chart font size (no font metrics on the server)."""
    return len(content) * FONT * 0.54


def legend(x: float, y: float, entries: list[tuple[str, str, str]]) -> tuple[list[str], float]:
    """One line of legend entries (colour, label, kind: 'box' | 'line' | 'dash' | 'cross');
    returns the elements and the x where the next entry would go."""
    out = []
    for colour, label, kind in entries:
        if kind == "box":
            out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="12" rx="2" fill="{colour}"/>')
            width = 17
        elif kind == "cross":
            out.append(cross(x + 6, y - 4, colour))
            width = 19
        else:
            dash = ' stroke-dasharray="6 4"' if kind == "dash" else ""
            out.append(line(x, y - 4, x + 14, y - 4, colour, f' stroke-width="2.5"{dash}'))
            width = 19
        out.append(text(x + width, y, label, cls="legend"))
        x += width + text_width(label) + 20
    return out, x


def nice_ticks(upper: float, count: int = 6, cover: bool = False) -> list[float]:
    """Round tick values (steps of 1, 2, 2.5 or 5 × 10^k) from 0, about `count` of them: up to at most
    `upper`, or, with `cover`, up to the first tick at or above it (an axis that must hold the data)."""
    if not upper or upper <= 0 or not math.isfinite(upper):
        return [0.0, 1.0] if cover else [0.0]
    raw = upper / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    last = math.ceil(upper / step - 1e-9) if cover else int(upper / step + 1e-9)
    return [i * step for i in range(last + 1)]


def tick_label(value: float) -> str:
    """A tick's label, in the report's number format."""
    return fmt(value)


def x_axis(x0: float, x1: float, y: float, upper: float, label: str, grid_top: float) -> list[str]:
    """A horizontal axis from 0 to `upper`: ticks, light grid lines up to `grid_top`, labels, axis title."""
    scale = (x1 - x0) / upper if upper > 0 else 0.0
    out = [line(x0, y, x1, y)]
    for tick in nice_ticks(upper):
        x = x0 + tick * scale
        out.append(line(x, grid_top, x, y, GRID))
        out.append(line(x, y, x, y + 4))
        out.append(text(x, y + 17, tick_label(tick), "middle", "tick"))
    out.append(text((x0 + x1) / 2, y + 36, label, "middle", "axis-label"))
    return out


def linear_axes(plot, y_ticks: list[float], x_upper: float, x_label: str, y_label: str) -> list[str]:
    """A plot's frame (x0, y0, x1, y1), its y grid at `y_ticks`, round x ticks from 0 to `x_upper`, and
    both axis labels."""
    x0, y0, x1, y1 = plot
    out = [
        f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" fill="none" stroke="{AXIS}"/>'
    ]
    for tick in y_ticks:
        y = y1 - tick / y_ticks[-1] * (y1 - y0)
        out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(text(x0 - 8, y + 4, tick_label(tick), "end", "tick"))
    for tick in nice_ticks(x_upper, 8, cover=True):
        if tick > x_upper * 1.0001:
            break
        x = x0 + tick / x_upper * (x1 - x0) if x_upper else x0
        out.append(f'<line x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" y2="{y1 + 4:.1f}" stroke="{AXIS}"/>')
        out.append(text(x, y1 + 17, tick_label(tick), "middle", "tick"))
    return out + axis_labels(plot, x_label, y_label)


def axis_labels(plot, x_label: str, y_label: str) -> list[str]:
    """The x label under a plot's frame (x0, y0, x1, y1) and the y label turned up beside it."""
    x0, y0, x1, y1 = plot
    middle = (y0 + y1) / 2
    return [
        text((x0 + x1) / 2, y1 + 38, x_label, "middle", "axis-label"),
        text(x0 - 56, middle, y_label, "middle", "axis-label", f' transform="rotate(-90 {x0 - 56:.1f} {middle:.1f})"'),
    ]
