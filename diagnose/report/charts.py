"""Inline SVG charts for the HTML report, drawn in Python: no JS chart library, nothing fetched.

Each chart function takes the plain data of a Diagnosis and returns one <svg> element as a string.
Every string that comes from the trace (kernel and op names) is untrusted and goes through `esc`.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Callable, TypeVar

import msgspec

from diagnose.metrics.sections import StepRow, StepTimeline, TimelineGap, TimelineOp, TopKernel
from diagnose.model.details import RankBudget
from diagnose.ncu.sections import Ceilings, ComputeCeiling, Roofline, RooflinePoint
from diagnose.model.findings import Bucket, IdleSplit, Summary
from diagnose.base.format import short_name
from diagnose.vocabulary.units import fmt, percent
from diagnose.report.svg import (
    WIDTH,
    Labels,
    esc,
    finite,
    legend,
    line,
    linear_axes,
    nice_ticks,
    rect,
    svg,
    text,
    text_width,
    triangle_marker,
    x_axis,
)

TIP_NAME_CHARS = 90
MAX_SEPARATE_GAPS = 300  # above this, gaps closer than a pixel are drawn as one bar

OP_COLOURS = {"kernel": "#3b6fd8", "memcpy": "#0f9f8f", "memset": "#8a5cd0"}
OTHER_OP_COLOUR = "#64748b"
GAP_COLOURS = {"host": "#f08a24", "kernel": "#b59ae6", "other": "#a3acb9"}
GAP_LABELS = {
    "host": "idle: waiting for the host",
    "kernel": "idle: between dependent kernels",
    "other": "idle: other waits",
}
SYNC_COLOUR = "#d42a2a"
BUDGET_PARTS = (  # (summary key, label, colour); the parts of one step add up to the step time
    ("busy", "GPU busy", "#3b6fd8"),
    ("host_launch", "waiting for kernel launches", "#f08a24"),
    ("host_other", "host busy elsewhere", "#f5c26b"),
    ("kernel_wait", "between dependent kernels", "#b59ae6"),
    ("other_wait", "other waits", "#a3acb9"),
)


def _legend(x: float, y: float, entries: list[tuple[str, str]], marker: str | None = None) -> list[str]:
    """A one-line legend of (colour, label) swatches; `marker` adds the after-sync triangle."""
    out, x = legend(x, y, [(colour, label, "box") for colour, label in entries])
    if marker:
        out.append(triangle_marker(x + 6, y - 11, SYNC_COLOUR))
        out.append(text(x + 17, y, marker, cls="legend"))
    return out


ACCOUNTING_COLOURS = {  # step-accounting bucket id -> colour; the buckets add up to the step
    "compute": "#3b6fd8",
    "comm_exposed": "#d42a2a",
    "comm_wait": "#f4a3a3",
    "copy": "#0f9f8f",
    "launch": "#f08a24",
    "host_in_ops": "#c2410c",
    "host_work": "#f5c26b",
    "sync_wait": "#e11d48",
    "kernel_wait": "#b59ae6",
    "other_wait": "#a3acb9",
    "unexplained": "#cbd5e1",
}


def step_budget_parts(summary: Summary) -> list[dict]:
    """The parts of one step that add up to its time, with µs and share: the step accounting's buckets
    (metrics/accounting.py) where the summary has them, else GPU busy and each idle class."""
    step = summary.step_time_us or 0.0
    if step <= 0 or not summary.gpu_ops_per_step:
        return []
    buckets = summary.accounting.buckets if summary.accounting else []
    if buckets:
        return [
            {
                "label": b.label,
                "colour": ACCOUNTING_COLOURS.get(b.id, OTHER_OP_COLOUR),
                "us": float(b.us_per_step),
                "share": float(b.share),
                "detail": b.detail or "",
            }
            for b in buckets
            if b.in_sum and b.us_per_step > 0
        ]
    idle = summary.idle_us_per_step or IdleSplit()
    values = {"busy": summary.gpu_busy_us_per_step or 0.0, **msgspec.structs.asdict(idle)}
    parts: list[dict[str, Any]] = [
        {"label": label, "colour": colour, "us": float(values[key] or 0.0), "detail": ""}
        for key, label, colour in BUDGET_PARTS
    ]
    return [{**part, "share": part["us"] / step} for part in parts if part["us"] > 0]


def overlapped_comm(summary: Summary) -> Bucket | None:
    """The communication hidden behind compute (shown beside the accounting, not part of its sum)."""
    for b in summary.accounting.buckets if summary.accounting else []:
        if not b.in_sum and b.us_per_step > 0:
            return b
    return None


def step_budget_bar(summary: Summary) -> str:
    """Where one step's time goes, as one stacked bar that stretches to the page width (legend in HTML)."""
    parts = step_budget_parts(summary)
    total = sum(part["us"] for part in parts)
    if not total:
        return ""
    body, x = [], 0.0
    for part in parts:
        w = part["us"] / total * 1000
        tip = f"{part['label']}: {fmt(part['us'])} µs per step ({percent(part['share'])})"
        if part["detail"]:
            tip += f"\n{part['detail']}"
        body.append(rect(x, 0, w, 24, part["colour"], tip))
        x += w
    return (
        '<svg class="budget-bar" viewBox="0 0 1000 24" preserveAspectRatio="none" role="img" '
        'aria-label="Where one step\'s time goes">' + "".join(body) + "</svg>"
    )


def step_timeline_chart(timeline: StepTimeline | None) -> str:
    """One measured step on the GPU: ops as bars per stream, idle gaps by class, after-sync gaps marked."""
    if timeline is None:
        return ""
    duration = float(timeline.duration_us or 0.0)
    ops = _clip(timeline.ops, duration)
    gaps = _clip(timeline.gaps, duration)
    if duration <= 0 or not (ops or gaps):
        return ""
    left, right, top, lane_h, lane_gap = 96.0, 16.0, 62.0, 22.0, 10.0
    x1 = WIDTH - right
    us_per_px = duration / (x1 - left)
    scale = 1.0 / us_per_px
    streams = sorted({op.stream for op in ops})
    lanes = [(f"stream {s}", top + i * (lane_h + lane_gap)) for i, s in enumerate(streams)]
    idle_y = top + len(streams) * (lane_h + lane_gap)
    axis_y = idle_y + lane_h + 8
    title = f"Step {timeline.step} on the GPU: {fmt(duration)} µs of profiled time"
    cats = sorted({op.cat for op in ops}, key=lambda c: (c not in OP_COLOURS, c))
    body = [text(0, 16, title, cls="chart-title")]
    body += _legend(
        0,
        42,
        [(OP_COLOURS.get(c, OTHER_OP_COLOUR), c) for c in cats]
        + [(GAP_COLOURS[k], GAP_LABELS[k]) for k in GAP_COLOURS],
        marker="after a sync",
    )
    for name, y in lanes + [("GPU idle", idle_y)]:
        body.append(text(left - 8, y + lane_h / 2 + 4, name, "end", "lane"))
        body.append(rect(left, y, x1 - left, lane_h, "#f3f5f9"))
    body += x_axis(left, x1, axis_y, duration, "time since the step started (µs, profiled)", top)
    for stream, (_, y) in zip(streams, lanes):
        lane = [op for op in ops if op.stream == stream]
        for group in _merge_close(lane, us_per_px, key=lambda op: op.cat):
            body.append(
                rect(
                    left + group[0].t * scale,
                    y + 2,
                    _span(group) * scale,
                    lane_h - 4,
                    OP_COLOURS.get(group[0].cat, OTHER_OP_COLOUR),
                    _op_tip(group),
                )
            )
    merge_within = us_per_px if len(gaps) > MAX_SEPARATE_GAPS else 0.0
    for gap_group in _merge_close(gaps, merge_within, key=lambda gap: gap.kind):
        x = left + gap_group[0].t * scale
        body.append(
            rect(
                x,
                idle_y + 2,
                _span(gap_group) * scale,
                lane_h - 4,
                GAP_COLOURS.get(gap_group[0].kind, OTHER_OP_COLOUR),
                _gap_tip(gap_group),
            )
        )
        synced = next((g for g in gap_group if g.after_sync), None)
        if synced:
            body.append(triangle_marker(left + synced.t * scale, idle_y - 7, SYNC_COLOUR))
    return svg(WIDTH, axis_y + 44, title, body)


Item = TypeVar("Item", TimelineOp, TimelineGap)


def _clip(items: list[Item], duration: float) -> list[Item]:
    """Items cut to the step window [0, duration]: a gap may run on into the next step."""
    clipped = []
    for item in items:
        start, end = max(item.t, 0.0), min(item.t + item.dur, duration)
        if end > start:
            clipped.append(msgspec.structs.replace(item, t=start, dur=end - start))
    return clipped


def _merge_close(items: list[Item], us_per_px: float, key: Callable[[Item], str]) -> list[list[Item]]:
    """Group items that would touch on screen (same `key`, less than a pixel apart): a small SVG."""
    groups: list[list[Item]] = []
    end = -math.inf
    for item in sorted(items, key=lambda i: i.t):
        item_end = item.t + item.dur
        if groups and key(item) == key(groups[-1][0]) and item.t - end < us_per_px:
            groups[-1].append(item)
            end = max(end, item_end)
        else:
            groups.append([item])
            end = item_end
    return groups


def _span(group: list[Item]) -> float:
    return max(i.t + i.dur for i in group) - group[0].t


def _op_tip(group: list[TimelineOp]) -> str:
    first = group[0]
    name = short_name(first.name, TIP_NAME_CHARS)
    if len(group) == 1:
        return f"{name}\n{first.cat} · {fmt(first.dur)} µs, at {fmt(first.t)} µs"
    busy = sum(i.dur for i in group)
    return (
        f"{len(group)} {first.cat} ops, {fmt(busy)} µs busy, "
        f"{fmt(first.t)}–{fmt(first.t + _span(group))} µs\nfirst: {name}"
    )


def _gap_tip(group: list[TimelineGap]) -> str:
    first = group[0]
    label = GAP_LABELS.get(first.kind, f"idle: {first.kind}")
    if len(group) > 1:
        return f"{label}: {len(group)} gaps, {fmt(sum(g.dur for g in group))} µs, from {fmt(first.t)} µs"
    sync = ", after a synchronising call" if first.after_sync else ""
    return f"{label}{sync}: {fmt(first.dur)} µs, at {fmt(first.t)} µs"


def top_kernels_chart(kernels: list[TopKernel], label_chars: int = 44) -> str:
    """The GPU ops with the most time per step, as horizontal bars with an axis in µs per step."""
    rows = [k for k in kernels if (k.us_per_step or 0) > 0]
    if not rows:
        return ""
    left, right, top, row_h = 310.0, 80.0, 34.0, 24.0
    x1 = WIDTH - right
    upper = _axis_upper(max(k.us_per_step for k in rows))
    scale = (x1 - left) / upper
    axis_y = top + len(rows) * row_h + 4
    title = "Top GPU kernels by time per step"
    body = [text(0, 16, title, cls="chart-title")]
    body += x_axis(left, x1, axis_y, upper, "µs per step (profiled)", top)
    for i, k in enumerate(rows):
        y = top + i * row_h
        full = k.name
        tip = f"{full}\n{fmt(k.us_per_step)} µs per step · {fmt(k.calls_per_step)} calls per step" + (
            f" · launched by {k.op}" if k.op else ""
        )
        body.append(f"<g><title>{esc(tip)}</title>")
        body.append(text(left - 8, y + row_h / 2 + 4, short_name(full, label_chars), "end", "bar-label"))
        body.append(
            rect(
                left,
                y + 3,
                k.us_per_step * scale,
                row_h - 6,
                OP_COLOURS.get(k.cat or "", OTHER_OP_COLOUR),
                extra=' rx="2"',
            )
        )
        body.append(text(left + k.us_per_step * scale + 6, y + row_h / 2 + 4, f"{fmt(k.us_per_step)} µs", cls="value"))
        body.append("</g>")
    return svg(WIDTH, axis_y + 44, title, body)


def _axis_upper(largest: float) -> float:
    """The first round tick at or above `largest`."""
    ticks = nice_ticks(largest)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else largest
    return ticks[-1] if ticks[-1] >= largest else ticks[-1] + step


BOUND_COLOURS = {"memory-bound": "#f08a24", "compute-bound": "#3b6fd8", "latency-bound": "#8a94a6"}
ESTIMATED_COLOUR = "#0f9f8f"
CEILING_COLOUR = "#475569"
KEY_CHARS = 34


def roofline_chart(roof: Roofline | None) -> str:
    """Hot ops on a log-log roofline: achieved TFLOP/s against FLOP/byte, under the device's ceilings.

    Filled points have Nsight Compute's measured DRAM bytes (coloured by its class), hollow ones
    bytes estimated from shapes; solid ceilings are datasheet peaks, dashed ones achievable. Each
    point is numbered; the key on the right names its kernel, the tooltip tells the rest.
    """
    if roof is None:
        return ""
    points = [p for p in roof.points if p.intensity > 0 and p.tflops > 0]
    ceilings: Ceilings = roof.ceilings
    if not points:
        return ""
    hbm, reach = ceilings.hbm_tbps or 0.0, ceilings.achievable_tbps or 0.0
    compute = [c for c in ceilings.compute if c.peak_tflops]
    peaks = [c.peak_tflops or 0.0 for c in compute]
    ridges = [v / hbm for v in peaks] if hbm else []
    x_lo = _decade(min(p.intensity for p in points) / 2, down=True)
    x_hi = _decade(max([p.intensity * 2 for p in points] + [r * 4 for r in ridges]), down=False)
    y_lo = _decade(min([p.tflops for p in points] + [x_lo * hbm if hbm else math.inf]) / 2, down=True)
    y_hi = _decade(max([p.tflops * 2 for p in points] + [v * 1.5 for v in peaks]), down=False)
    key_w, height = 330.0, 440.0
    plot = (80.0, 72.0, WIDTH - key_w - 16, height - 56.0)

    def sx(x: float) -> float:
        span = math.log10(x_hi) - math.log10(x_lo)
        return plot[0] + (math.log10(x) - math.log10(x_lo)) / span * (plot[2] - plot[0])

    def sy(y: float) -> float:
        span = math.log10(y_hi) - math.log10(y_lo)
        return plot[3] - (math.log10(y) - math.log10(y_lo)) / span * (plot[3] - plot[1])

    title = f"Roofline of the hot ops on the {ceilings.device or 'GPU'}"
    body = [text(0, 16, title, cls="chart-title")] + _roofline_legend(points, 0, 40)
    labels = Labels()
    body += _log_axes(plot, (x_lo, x_hi), (y_lo, y_hi), sx, sy, labels)
    texts = len(labels.boxes)
    labels.boxes += [
        (sx(p.intensity) - 7, sy(p.tflops) - 7, sx(p.intensity) + 7, sy(p.tflops) + 7) for p in points
    ]  # ceiling labels go where no point would hide them
    for dashed, bw, roof_of in ((False, hbm, _peak), (True, reach, _achievable)):
        body += _ceilings(compute, bw, roof_of, dashed, (x_lo, x_hi), (y_lo, y_hi), sx, sy, labels)
    del labels.boxes[texts : texts + len(points)]  # a point's number may touch another point, not a label
    body += _points(points, sx, sy, labels)
    body += _roofline_key(points, WIDTH - key_w + 4, plot[1])
    return svg(WIDTH, height, title, body)


def _peak(c: ComputeCeiling) -> float | None:
    return c.peak_tflops


def _achievable(c: ComputeCeiling) -> float | None:
    return c.achievable_tflops


def _roofline_legend(points: list[RooflinePoint], x: float, y: float) -> list[str]:
    """Swatches for the classes of the measured points present, and for estimated points when any."""
    present = {p.bound for p in points if p.measured}
    entries = [(BOUND_COLOURS[c], True, f"measured, {c}") for c in BOUND_COLOURS if c in present]
    if any(p.measured and p.bound not in BOUND_COLOURS for p in points):
        entries.append((ESTIMATED_COLOUR, True, "measured, unclassified"))
    if not all(p.measured for p in points):
        entries.append((ESTIMATED_COLOUR, False, "hollow: bytes estimated from shapes"))
    out = []
    for colour, filled, label in entries:
        out.append(
            f'<circle cx="{x + 6:.1f}" cy="{y - 4:.1f}" r="5" fill="{colour if filled else "#ffffff"}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        out.append(text(x + 16, y, label, cls="legend"))
        x += 16 + text_width(label) + 20
    return out


def _decade(value: float, down: bool) -> float:
    value = max(value, 1e-12)
    exponent = math.floor(math.log10(value)) if down else math.ceil(math.log10(value))
    return 10.0**exponent


def _log_label(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _log_axes(plot, xs, ys, sx, sy, labels: Labels) -> list[str]:
    """Decade grid lines, tick labels and axis titles of a log-log chart."""
    x0, y0, x1, y1 = plot
    out = [
        f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" fill="none" stroke="#94a3b8"/>'
    ]
    for k in range(round(math.log10(xs[0])), round(math.log10(xs[1])) + 1):
        x = sx(10.0**k)
        out.append(f'<line x1="{x:.1f}" y1="{y0:.1f}" x2="{x:.1f}" y2="{y1:.1f}" stroke="#e2e8f0"/>')
        if labels.place([(x, y1 + 20, "middle")], _log_label(10.0**k)):
            out.append(text(x, y1 + 20, _log_label(10.0**k), "middle", "tick"))
    for k in range(round(math.log10(ys[0])), round(math.log10(ys[1])) + 1):
        y = sy(10.0**k)
        out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        if labels.place([(x0 - 8, y + 4, "end")], _log_label(10.0**k)):
            out.append(text(x0 - 8, y + 4, _log_label(10.0**k), "end", "tick"))
    out.append(text((x0 + x1) / 2, y1 + 42, "arithmetic intensity (FLOP/byte, log scale)", "middle", "axis-label"))
    labels.add((x0 + x1) / 2, y1 + 42, "arithmetic intensity (FLOP/byte, log scale)", "middle")
    out.append(
        f'<text x="{x0 - 58:.1f}" y="{(y0 + y1) / 2:.1f}" text-anchor="middle" class="axis-label" '
        f'transform="rotate(-90 {x0 - 58:.1f} {(y0 + y1) / 2:.1f})">achieved TFLOP/s (log scale)</text>'
    )
    return out


def _ceilings(
    compute: list[ComputeCeiling],
    bw: float,
    roof_of: Callable[[ComputeCeiling], float | None],
    dashed: bool,
    xs,
    ys,
    sx,
    sy,
    labels: Labels,
) -> list[str]:
    """The roof min(peak, intensity × bandwidth) of each compute ceiling, labelled at its right end
    (above a datasheet line, below an achievable one, further off where another label is)."""
    if not bw or not compute:
        return []
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    kind = "achievable" if dashed else "datasheet"
    top = max(roof_of(c) or 0 for c in compute)
    out = []
    x_knee = min(top / bw, xs[1])
    x_start = max(xs[0], ys[0] / bw)
    if x_knee > x_start:
        tip = f"HBM bandwidth, {kind}: {fmt(bw)} TB/s"
        out.append(
            f'<line x1="{sx(x_start):.1f}" y1="{sy(x_start * bw):.1f}" x2="{sx(x_knee):.1f}" '
            f'y2="{sy(x_knee * bw):.1f}" stroke="{CEILING_COLOUR}" stroke-width="1.6"{dash}>'
            f"<title>{esc(tip)}</title></line>"
        )
        if not dashed:  # upright, beside the slope where it overlaps no other label
            label = f"HBM {fmt(bw)} TB/s"
            along = [x_start * (x_knee / x_start) ** f for f in (0.15, 0.3, 0.45, 0.6, 0.75)]
            spot = labels.place([(sx(x) - 6, sy(x * bw) - 6, "end") for x in along], label)
            if spot:
                out.append(text(spot[0], spot[1], label, "end", "legend"))
    for c in compute:
        peak = roof_of(c)
        if not peak or not ys[0] < peak < ys[1]:
            continue
        x_from = max(peak / bw, xs[0])
        label = f"{c.label}: {fmt(peak)} TFLOP/s peak" if not dashed else f"{fmt(peak)} achievable"
        tip = f"{c.label}, {kind}: {fmt(peak)} TFLOP/s"
        out.append(
            f'<line x1="{sx(x_from):.1f}" y1="{sy(peak):.1f}" x2="{sx(xs[1]):.1f}" y2="{sy(peak):.1f}" '
            f'stroke="{CEILING_COLOUR}" stroke-width="1.6"{dash}><title>{esc(tip)}</title></line>'
        )
        near, far = (14, 28) if dashed else (-6, -20)
        spots = [
            (sx(xs[1]) - 6 - dx, sy(peak) + dy, "end")
            for dys in ((near, -near + 8), (far, -far + 8))
            for dx in (0, 170, 340)
            for dy in dys
        ]
        spot = labels.place([p for p in spots if p[0] - text_width(label) > sx(xs[0])], label)
        if spot:
            out.append(text(spot[0], spot[1], label, "end", "legend"))
    return out


def _points(points: list[RooflinePoint], sx, sy, labels: Labels) -> list[str]:
    """One numbered circle per op: filled when Nsight Compute measured its bytes, hollow when estimated.
    A number goes beside its circle where it overlaps no other label (the tooltip and key still name
    a point whose number found no room)."""
    out = []
    for i, p in enumerate(points, 1):
        x, y = sx(p.intensity), sy(p.tflops)
        colour = BOUND_COLOURS.get(p.bound or "", ESTIMATED_COLOUR)
        fill = colour if p.measured else "#ffffff"
        out.append(
            f'<g><title>{esc(_point_tip(i, p))}</title><circle cx="{x:.1f}" cy="{y:.1f}" r="6" '
            f'fill="{fill}" stroke="{colour}" stroke-width="2"/>'
        )
        spot = labels.place(
            [
                (x + 8, y - 6, "start"),
                (x - 8, y - 6, "end"),
                (x + 8, y + 15, "start"),
                (x - 8, y + 15, "end"),
                (x + 10, y + 4, "start"),
                (x - 10, y + 4, "end"),
            ],
            str(i),
        )
        if spot:
            out.append(text(spot[0], spot[1], str(i), spot[2], "bar-label"))
        out.append("</g>")
    return out


def _point_tip(i: int, p: RooflinePoint) -> str:
    if p.measured:
        sol = (
            f" (DRAM {fmt(p.dram_pct)} %, SM {fmt(p.sm_pct)} %)"
            if p.dram_pct is not None and p.sm_pct is not None
            else ""
        )
        how = f"bytes measured by Nsight Compute{sol}" + (f": {p.bound}" if p.bound else "")
    else:
        how = "bytes estimated from shapes"
    return (
        f"{i}. {short_name(p.kernel, TIP_NAME_CHARS)}\n{p.op or 'no op'} {p.shapes or ''}\n"
        f"{fmt(p.intensity)} FLOP/byte · {fmt(p.tflops)} TFLOP/s · {fmt(p.us_per_step)} µs "
        f"per step\n{how}; FLOPs from shapes"
    )


def _key_label(p: RooflinePoint) -> str:
    """ "mul · elementwise_kernel<128, 2, …": the op that launched it, then the shortened kernel name."""
    op = str(p.op or "").removeprefix("aten::")
    if not op or op == "None":
        return short_name(p.kernel, KEY_CHARS)
    return f"{op} · {short_name(p.kernel, max(KEY_CHARS - len(op) - 3, 12))}"


def _roofline_key(points: list[RooflinePoint], x: float, y: float) -> list[str]:
    """The numbered list of the plotted kernels, beside the chart."""
    out = [text(x, y - 8, "op · kernel (µs per step)", cls="legend")]
    for i, p in enumerate(points, 1):
        row_y = y + 10 + (i - 1) * 19
        colour = BOUND_COLOURS.get(p.bound or "", ESTIMATED_COLOUR)
        fill = colour if p.measured else "#ffffff"
        tip = _point_tip(i, p)
        out.append(
            f'<g><title>{esc(tip)}</title><circle cx="{x + 5:.1f}" cy="{row_y - 4:.1f}" r="4" fill="{fill}" '
            f'stroke="{colour}" stroke-width="1.6"/>'
        )
        out.append(text(x + 14, row_y, f"{i}. {_key_label(p)} ({fmt(p.us_per_step)})", cls="bar-label"))
        out.append("</g>")
    return out


# --- the ranks side by side ---
def rank_budget_chart(ranks: list[RankBudget] | None) -> str:
    """Each rank's step budget as one stacked bar per rank, on a common µs scale (Details.ranks)."""
    rows = [r for r in ranks or [] if r.buckets]
    if not rows:
        return ""
    longest = max(sum(b.us_per_step for b in r.buckets) for r in rows) or 1.0
    bar, gap, label_w = 18, 6, 70
    scale = (WIDTH - label_w - 10) / longest
    body = []
    for i, r in enumerate(rows):
        y, x = i * (bar + gap), float(label_w)
        body.append(text(4, y + bar - 4, f"rank {r.rank}", cls="legend"))
        for b in r.buckets:
            w = b.us_per_step * scale
            if w <= 0:
                continue
            tip = f"rank {r.rank}: {b.label}: {fmt(b.us_per_step)} µs per step"
            split = any(c.id == "comm_wait" for c in r.buckets)  # the wait has its own bucket
            if b.id == "comm_exposed" and r.wait_share and not split:
                tip += (
                    f" (under the profiler, {percent(r.wait_share)} of the step was spent in collectives "
                    "waiting for the slowest rank)"
                )
            body.append(rect(x, y, w, bar, ACCOUNTING_COLOURS.get(b.id, OTHER_OP_COLOUR), tip))
            x += w
    height = len(rows) * (bar + gap)
    return (
        f'<svg class="rank-budget" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="Each rank\'s step budget">' + "".join(body) + "</svg>"
    )


STEP_COLOUR = "#3b6fd8"
MEDIAN_COLOUR = "#475569"
STEP_COLUMNS = 600  # more steps than this are drawn as the range of each pixel column's steps
MIN_CHART_STEPS = 10  # fewer steps are read from the table alone


def step_times_chart(steps: list[StepRow]) -> str:
    """Every measured step's duration (µs, profiled) against its index, the median dashed; with more
    steps than STEP_COLUMNS, each column of the plot shows the shortest-to-longest range of its steps.
    "" for fewer than MIN_CHART_STEPS steps: the steps table shows them."""
    durations = [float(s.duration_us) for s in steps if finite(s.duration_us)]
    if len(durations) < MIN_CHART_STEPS:
        return ""
    n, height = len(durations), 250.0
    x0, y0, x1, y1 = 76.0, 48.0, WIDTH - 24.0, height - 56.0
    y_ticks = nice_ticks(max(durations) * 1.05, 5, cover=True)

    def sx(i: float) -> float:
        return x0 + i / (n - 1) * (x1 - x0)

    def sy(us: float) -> float:
        return y1 - us / y_ticks[-1] * (y1 - y0)

    middle = statistics.median(durations)
    title = f"Step time over the trace ({n:,} measured steps)"
    body = [text(0, 16, title, cls="chart-title")]
    body += legend(0, 36, [(STEP_COLOUR, "step time", "line"), (MEDIAN_COLOUR, f"median {fmt(middle)} µs", "dash")])[0]
    body += linear_axes((x0, y0, x1, y1), y_ticks, n - 1, "step (index among the measured steps)", "µs (profiled)")
    if n <= STEP_COLUMNS:
        points = " ".join(f"{sx(i):.1f},{sy(d):.1f}" for i, d in enumerate(durations))
        body.append(f'<polyline points="{points}" fill="none" stroke="{STEP_COLOUR}" stroke-width="1.6"/>')
    else:
        width = (x1 - x0) / STEP_COLUMNS
        for c in range(STEP_COLUMNS):
            chunk = durations[c * n // STEP_COLUMNS : (c + 1) * n // STEP_COLUMNS]
            low, high = min(chunk), max(chunk)
            tip = f"steps {c * n // STEP_COLUMNS:,}–{(c + 1) * n // STEP_COLUMNS - 1:,}: {fmt(low)}–{fmt(high)} µs"
            body.append(rect(x0 + c * width, sy(high), width, max(sy(low) - sy(high), 1.0), STEP_COLOUR, tip))
    body.append(line(x0, sy(middle), x1, sy(middle), MEDIAN_COLOUR, ' stroke-width="1.5" stroke-dasharray="6 4"'))
    return svg(WIDTH, height, title, body)
