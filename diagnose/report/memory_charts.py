"""Inline SVG charts of memory for the HTML report: memory over time, and a parameter sweep.

Each function takes a typed part of Diagnosis.details.memory (diagnose/memory/sections.py Memory, built by
diagnose/memory/details.py) and returns one <svg> element as a string, or "" when there is nothing to draw. Every string that
comes from a trace or a capture (labels, parameter names, values, error messages) is escaped.
"""

from __future__ import annotations

import math

from diagnose.memory.sections import Fit, Memory, Sweep, SweepPoint
from diagnose.report.svg import (
    GRID,
    AXIS,
    WIDTH,
    axis_labels,
    cross,
    esc,
    finite,
    legend,
    linear_axes,
    nice_ticks,
    svg,
    text,
)
from diagnose.report.svg import tick_label as _num

ALLOCATED = "#3b6fd8"
RESERVED = "#f08a24"
LIMIT = "#d42a2a"
STEP_FILL = "#f1f5f9"
FIT = "#64748b"
TIME = "#0f9f8f"


def _legend(x: float, y: float, entries: list[tuple[str, str, str]]) -> list[str]:
    return legend(x, y, entries)[0]


def _ticks(upper: float, count: int = 5) -> list[float]:
    """Round ticks from 0 to at least `upper`."""
    return nice_ticks(upper, count, cover=True)


def memory_timeline_chart(memory: Memory | None) -> str:
    """Allocated and reserved GPU memory (GB) against time (ms) from details.memory.timeline,
    the measured steps shaded, the peak marked, and the memory limit when the run came near it."""
    timeline = memory.timeline if memory else None
    if not memory or not timeline:
        return ""
    points = [p for p in timeline.points if len(p) == 3 and all(finite(v) for v in p)]
    if len(points) < 2:
        return ""
    t0 = points[0][0]
    span = max(points[-1][0] - t0, 1e-9)
    top = max(max(p[1], p[2]) for p in points)
    limit = memory.limit_bytes or 0.0
    show_limit = bool(limit) and top >= 0.5 * limit
    upper = _ticks(max(top, limit if show_limit else 0.0) / 1e9 * 1.05)
    height = 320.0
    x0, y0, x1, y1 = 76.0, 56.0, WIDTH - 24.0, height - 56.0

    def sx(t: float) -> float:
        return x0 + (t - t0) / span * (x1 - x0)

    def sy(b: float) -> float:
        return y1 - b / 1e9 / upper[-1] * (y1 - y0)

    title = "GPU memory over the profiled run"
    body = [text(0, 16, title, cls="chart-title")]
    entries = [
        (ALLOCATED, "allocated (held by tensors)", "line"),
        (RESERVED, "reserved (cached by the allocator)", "line"),
    ]
    if show_limit:
        entries.append((LIMIT, "memory limit", "dash"))
    body += _legend(0, 38, entries)
    for step in timeline.steps:
        a, b = max(step.start, t0), min(step.end, t0 + span)
        if b > a:
            body.append(
                f'<rect x="{sx(a):.1f}" y="{y0:.1f}" width="{max(sx(b) - sx(a), 1):.1f}" '
                f'height="{y1 - y0:.1f}" fill="{STEP_FILL}"><title>{esc(step.label)}</title></rect>'
            )
    body += linear_axes((x0, y0, x1, y1), upper, span / 1e3, "time (ms)", "GPU memory (GB)")
    body.append(_step_path([(sx(p[0]), sy(p[2])) for p in points], RESERVED))
    body.append(_step_path([(sx(p[0]), sy(p[1])) for p in points], ALLOCATED))
    peak = max(points, key=lambda p: p[1])
    px, py = sx(peak[0]), sy(peak[1])
    body.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{ALLOCATED}"/>')
    body.append(
        text(
            min(px + 6, x1 - 4),
            max(py - 8, y0 + 12),
            _peak_label(peak[1], memory.peak_allocated_bytes or None),
            "end" if px > x1 - 260 else "start",
            "legend",
        )
    )
    if show_limit:
        ly = sy(limit)
        body.append(
            f'<line x1="{x0:.1f}" y1="{ly:.1f}" x2="{x1:.1f}" y2="{ly:.1f}" stroke="{LIMIT}" '
            f'stroke-width="1.6" stroke-dasharray="6 4"/>'
        )
        body.append(text(x1 - 4, ly - 6, f"limit {limit / 1e9:.2f} GB", "end", "legend"))
    return svg(WIDTH, height, title, body)


def _peak_label(shown: float, run_peak: float | None) -> str:
    """The chart's peak label; when the whole run (warm-up included) peaked higher than the profiled part
    the chart shows, both, so that it never reads as a second figure for the same peak."""
    label = f"peak {shown / 1e9:.2f} GB allocated"
    if run_peak and round(run_peak / 1e9, 2) != round(shown / 1e9, 2):
        return f"{label} here (whole run: {run_peak / 1e9:.2f} GB)"
    return label


def _step_path(xy: list[tuple[float, float]], colour: str) -> str:
    """A staircase: the level holds until the next event."""
    d = [f"M{xy[0][0]:.1f},{xy[0][1]:.1f}"]
    for (_, y_prev), (x, y) in zip(xy, xy[1:]):
        d.append(f"L{x:.1f},{y_prev:.1f} L{x:.1f},{y:.1f}")
    return f'<path d="{" ".join(d)}" fill="none" stroke="{colour}" stroke-width="1.8"/>'


def sweep_chart(sweep: Sweep | None) -> str:
    """Two log-log panels against the swept parameter: peak allocated memory (GB) with the device's
    memory, and median step time (ms); each with its fitted power law and exponent, and the
    points that ran out of memory marked with a red cross at the top of the panel."""
    if sweep is None:
        return ""
    numeric = [p for p in sweep.points if finite(p.value) and p.value > 0]
    ok = [p for p in numeric if p.status == "ok"]
    if not ok:
        return ""
    param = sweep.param or "parameter"
    fits = sweep.fits
    xs = [p.value for p in numeric]
    height = 380.0
    panel_w = (WIDTH - 40) / 2
    title = f"Peak memory and step time against {param} (log-log)"
    body = [text(0, 16, title, cls="chart-title")]
    body += _legend(
        0,
        38,
        [
            (ALLOCATED, "peak allocated", "line"),
            (TIME, "median step time", "line"),
            (FIT, "power-law fit", "dash"),
            (LIMIT, "out of memory", "cross"),
        ],
    )
    device = sweep.device_total_bytes
    panels = (
        ("peak allocated (GB)", [(p.value, p.peak_allocated_bytes) for p in ok], 1e9, fits.peak_allocated, device),
        ("median step time (ms)", [(p.value, p.median_step_us) for p in ok], 1e3, fits.step_time, None),
    )
    for i, ((label, data, scale, fit, ceiling), colour) in enumerate(zip(panels, (ALLOCATED, TIME))):
        plot = (76.0 + i * (panel_w + 40), 60.0, 76.0 + i * (panel_w + 40) + panel_w - 76, height - 60.0)
        body += _sweep_panel(
            plot,
            param,
            label,
            data,
            scale,
            fit,
            colour,
            xs,
            [p for p in numeric if p.status == "oom"],
            ceiling,
        )
    return svg(WIDTH, height, title, body)


def _sweep_panel(
    plot,
    param: str,
    label: str,
    data: list,
    scale: float,
    fit: Fit | None,
    colour: str,
    all_x: list[float],
    ooms: list[SweepPoint],
    ceiling: float | None,
) -> list[str]:
    values = [(x, y / scale) for x, y in data if finite(y) and y > 0]
    if not values:
        return [text(plot[0], plot[1] + 20, f"no {label} recorded", cls="legend")]
    ys = [y for _, y in values] + ([ceiling / scale] if ceiling else [])
    x_lo, x_hi = min(all_x) / 1.3, max(all_x) * 1.3
    y_lo, y_hi = _decade(min(ys) / 1.5, True), _decade(max(ys) * 1.5, False)
    x0, y0, x1, y1 = plot

    def sx(x: float) -> float:
        return x0 + (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo)) * (x1 - x0)

    def sy(y: float) -> float:
        return y1 - (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)) * (y1 - y0)

    out = _log_axes(plot, sorted(set(all_x)), (y_lo, y_hi), sx, sy, f"{param} (log scale)", f"{label}, log scale")
    if ceiling and y_lo < ceiling / scale < y_hi:
        cy = sy(ceiling / scale)
        out.append(
            f'<line x1="{x0:.1f}" y1="{cy:.1f}" x2="{x1:.1f}" y2="{cy:.1f}" stroke="{LIMIT}" stroke-width="1.4" '
            f'stroke-dasharray="6 4"/>'
        )
        out.append(text(x0 + 6, cy - 6, f"device memory {ceiling / 1e9:.0f} GB", cls="legend"))
    if fit and finite(fit.coefficient) and finite(fit.exponent):
        a, b = fit.coefficient / scale, fit.exponent
        lo, hi = math.log10(min(all_x)), math.log10(max(all_x))
        samples = [10 ** (lo + (hi - lo) * i / 60) for i in range(61)]
        inside = [(sx(x), sy(a * x**b)) for x in samples if a > 0 and y_lo <= a * x**b <= y_hi]
        if len(inside) > 1:
            d = " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}" for i, (x, y) in enumerate(inside))
            out.append(f'<path d="{d}" fill="none" stroke="{FIT}" stroke-width="1.4" stroke-dasharray="6 4"/>')
        out.append(
            text(
                x0 + 8,
                y0 + 16,
                f"∝ {param}^{b:.2f} (r² {fit.r2:.3f}, {fit.points} points)",
                cls="legend",
            )
        )
    for (xa, ya), (xb, yb) in zip(values, values[1:]):
        out.append(
            f'<line x1="{sx(xa):.1f}" y1="{sy(ya):.1f}" x2="{sx(xb):.1f}" y2="{sy(yb):.1f}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
    for x, y in values:
        out.append(
            f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4.5" fill="{colour}">'
            f"<title>{esc(f'{param}={x:g}: {y:.4g} {label}')}</title></circle>"
        )
    for p in ooms:
        cx = sx(p.value)
        tip = f"{param}={p.value:g}: out of memory" + (f" ({p.error})" if p.error else "")
        out.append(f"<g><title>{esc(tip)}</title>{cross(cx, y0 + 10, LIMIT)}</g>")
        out.append(text(cx, y0 + 30, "OOM", "middle", "legend"))
    return out


def _decade(value: float, down: bool) -> float:
    value = max(value, 1e-12)
    exponent = math.floor(math.log10(value)) if down else math.ceil(math.log10(value))
    return 10.0**exponent


def _log_axes(plot, x_ticks: list[float], ys, sx, sy, x_label: str, y_label: str) -> list[str]:
    """Grid lines at the swept values and at the decades of y, their labels, axis titles."""
    x0, y0, x1, y1 = plot
    out = [
        f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" fill="none" stroke="{AXIS}"/>'
    ]
    for v in x_ticks:
        x = sx(v)
        out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" stroke="{GRID}"/>')
        out.append(text(x, y1 + 17, _num(v), "middle", "tick"))
    for k in range(round(math.log10(ys[0])), round(math.log10(ys[1])) + 1):
        y = sy(10.0**k)
        out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
        out.append(text(x0 - 8, y + 4, _num(10.0**k), "end", "tick"))
    return out + axis_labels(plot, x_label, y_label)
