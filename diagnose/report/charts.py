"""Inline SVG charts for the HTML report, drawn in Python: no JS chart library, nothing fetched.

Each chart function takes the plain data of a Diagnosis and returns one <svg> element as a string.
Every string that comes from the trace (kernel and op names) is untrusted and goes through `esc`.
"""
from __future__ import annotations

import html
import math
import re

from diagnose.findings import fmt

WIDTH = 1040
FONT = 12
TIP_NAME_CHARS = 90
MAX_SEPARATE_GAPS = 300  # above this, gaps closer than a pixel are drawn as one bar

OP_COLOURS = {"kernel": "#3b6fd8", "memcpy": "#0f9f8f", "memset": "#8a5cd0"}
OTHER_OP_COLOUR = "#64748b"
GAP_COLOURS = {"host": "#f08a24", "kernel": "#b59ae6", "other": "#a3acb9"}
GAP_LABELS = {"host": "idle: waiting for the host", "kernel": "idle: between dependent kernels",
              "other": "idle: other waits"}
SYNC_COLOUR = "#d42a2a"
BUDGET_PARTS = (  # (summary key, label, colour); the parts of one step add up to the step time
    ("busy", "GPU busy", "#3b6fd8"),
    ("host_launch", "waiting for kernel launches", "#f08a24"),
    ("host_other", "host busy elsewhere", "#f5c26b"),
    ("kernel_wait", "between dependent kernels", "#b59ae6"),
    ("other_wait", "other waits", "#a3acb9"),
)

_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|[A-Za-z_][\w]*)::")


def esc(value) -> str:
    """Escape any value for SVG/HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def short_name(name, limit: int = 48) -> str:
    """A kernel or op name short enough for a label: C++ qualifiers and argument lists dropped, then cut.

    "void at::native::(anonymous namespace)::layer_norm_kernel<c10::Half>(int, float)" becomes
    "layer_norm_kernel<Half>".
    """
    text = " ".join(str(name).split())
    if len(text) <= limit:
        return text
    if "::" in text or text.startswith("void "):
        text = _QUALIFIER.sub("", text.removeprefix("void "))
        text = _drop_argument_list(text)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _drop_argument_list(signature: str) -> str:
    if not signature.endswith(")"):
        return signature
    depth = 0
    for i in range(len(signature) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(signature[i], 0)
        if depth == 0:
            starts_a_call = i > 0 and not signature[i - 1].isspace()
            return signature[:i] if starts_a_call else signature
    return signature


def nice_ticks(upper: float, count: int = 6) -> list[float]:
    """Round tick values from 0 up to at most `upper`, about `count` of them."""
    if not upper or upper <= 0 or not math.isfinite(upper):
        return [0.0]
    raw = upper / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(upper / step + 1e-9) + 1)]


def _svg(width: float, height: float, label: str, body: list[str]) -> str:
    return (f'<svg class="chart" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
            f'height="{height:.0f}" role="img" aria-label="{esc(label)}" font-size="{FONT}">'
            + "".join(body) + "</svg>")


def _rect(x, y, w, h, fill, tip: str | None = None, extra: str = "") -> str:
    tooltip = f"<title>{esc(tip)}</title>" if tip else ""
    return (f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1.0):.1f}" height="{h:.1f}" '
            f'fill="{fill}"{extra}>{tooltip}</rect>')


def _text(x, y, content, anchor: str = "start", cls: str = "") -> str:
    css = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{css}>{esc(content)}</text>'


def _x_axis(x0: float, x1: float, y: float, upper: float, label: str, grid_top: float) -> list[str]:
    """Ticks, light grid lines up to `grid_top`, tick labels and the axis label."""
    scale = (x1 - x0) / upper if upper > 0 else 0.0
    out = [f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="#94a3b8"/>']
    for tick in nice_ticks(upper):
        x = x0 + tick * scale
        out.append(f'<line x1="{x:.1f}" y1="{grid_top:.1f}" x2="{x:.1f}" y2="{y:.1f}" stroke="#e2e8f0"/>')
        out.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 4:.1f}" stroke="#94a3b8"/>')
        out.append(_text(x, y + 17, fmt(tick), "middle", "tick"))
    out.append(_text((x0 + x1) / 2, y + 36, label, "middle", "axis-label"))
    return out


def _legend(x: float, y: float, entries: list[tuple[str, str]], marker: str | None = None) -> list[str]:
    """A one-line legend of (colour, label) swatches; `marker` adds the after-sync triangle."""
    out = []
    for colour, label in entries:
        out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="12" rx="2" fill="{colour}"/>')
        out.append(_text(x + 17, y, label, cls="legend"))
        x += 17 + _text_width(label) + 20
    if marker:
        out.append(_sync_marker(x + 6, y - 11))
        out.append(_text(x + 17, y, marker, cls="legend"))
    return out


def _text_width(text: str) -> float:
    """Rough width in px of `text` at the chart font size (no font metrics on the server)."""
    return len(text) * FONT * 0.54


def _sync_marker(x: float, y: float) -> str:
    return f'<path d="M{x - 5:.1f},{y:.1f} L{x + 5:.1f},{y:.1f} L{x:.1f},{y + 8:.1f} Z" fill="{SYNC_COLOUR}"/>'


def step_budget_parts(summary: dict) -> list[dict]:
    """The parts of one step that add up to its time (GPU busy, each idle class), with µs and share."""
    step = summary.get("step_time_us") or 0.0
    values = {"busy": summary.get("gpu_busy_us_per_step") or 0.0, **(summary.get("idle_us_per_step") or {})}
    if step <= 0:
        return []
    parts = [{"label": label, "colour": colour, "us": float(values.get(key) or 0.0)}
             for key, label, colour in BUDGET_PARTS]
    return [{**part, "share": part["us"] / step} for part in parts if part["us"] > 0]


def step_budget_bar(summary: dict) -> str:
    """Where one step's time goes, as one stacked bar that stretches to the page width (legend in HTML)."""
    parts = step_budget_parts(summary)
    total = sum(part["us"] for part in parts)
    if not total:
        return ""
    body, x = [], 0.0
    for part in parts:
        w = part["us"] / total * 1000
        tip = f"{part['label']}: {fmt(part['us'])} µs per step ({fmt(100 * part['share'])} %)"
        body.append(_rect(x, 0, w, 24, part["colour"], tip))
        x += w
    return ('<svg class="budget-bar" viewBox="0 0 1000 24" preserveAspectRatio="none" role="img" '
            'aria-label="Where one step\'s time goes">' + "".join(body) + "</svg>")


def step_timeline_chart(timeline: dict) -> str:
    """One measured step on the GPU: ops as bars per stream, idle gaps by class, after-sync gaps marked."""
    duration = float(timeline.get("duration_us") or 0.0)
    ops = _clip(timeline.get("ops") or [], duration)
    gaps = _clip(timeline.get("gaps") or [], duration)
    if duration <= 0 or not (ops or gaps):
        return ""
    left, right, top, lane_h, lane_gap = 96.0, 16.0, 62.0, 22.0, 10.0
    x1 = WIDTH - right
    us_per_px = duration / (x1 - left)
    scale = 1.0 / us_per_px
    streams = sorted({int(op["stream"]) for op in ops})
    lanes = [(f"stream {s}", top + i * (lane_h + lane_gap)) for i, s in enumerate(streams)]
    idle_y = top + len(streams) * (lane_h + lane_gap)
    axis_y = idle_y + lane_h + 8
    title = f"Step {timeline.get('step', '')} on the GPU: {fmt(duration)} µs of profiled time"
    cats = sorted({op["cat"] for op in ops}, key=lambda c: (c not in OP_COLOURS, c))
    body = [_text(0, 16, title, cls="chart-title")]
    body += _legend(0, 42, [(OP_COLOURS.get(c, OTHER_OP_COLOUR), c) for c in cats]
                    + [(GAP_COLOURS[k], GAP_LABELS[k]) for k in GAP_COLOURS], marker="after a sync")
    for name, y in lanes + [("GPU idle", idle_y)]:
        body.append(_text(left - 8, y + lane_h / 2 + 4, name, "end", "lane"))
        body.append(_rect(left, y, x1 - left, lane_h, "#f3f5f9"))
    body += _x_axis(left, x1, axis_y, duration, "time since the step started (µs, profiled)", top)
    for stream, (_, y) in zip(streams, lanes):
        lane = [op for op in ops if int(op["stream"]) == stream]
        for group in _merge_close(lane, us_per_px, key="cat"):
            body.append(_rect(left + group[0]["t"] * scale, y + 2, _span(group) * scale, lane_h - 4,
                              OP_COLOURS.get(group[0]["cat"], OTHER_OP_COLOUR), _op_tip(group)))
    merge_within = us_per_px if len(gaps) > MAX_SEPARATE_GAPS else 0.0
    for group in _merge_close(gaps, merge_within, key="kind"):
        x = left + group[0]["t"] * scale
        body.append(_rect(x, idle_y + 2, _span(group) * scale, lane_h - 4,
                          GAP_COLOURS.get(group[0]["kind"], OTHER_OP_COLOUR), _gap_tip(group)))
        synced = next((g for g in group if g.get("after_sync")), None)
        if synced:
            body.append(_sync_marker(left + synced["t"] * scale, idle_y - 7))
    return _svg(WIDTH, axis_y + 44, title, body)


def _clip(items: list[dict], duration: float) -> list[dict]:
    """Items cut to the step window [0, duration]: a gap may run on into the next step."""
    clipped = []
    for item in items:
        start, end = max(item["t"], 0.0), min(item["t"] + item["dur"], duration)
        if end > start:
            clipped.append({**item, "t": start, "dur": end - start})
    return clipped


def _merge_close(items: list[dict], us_per_px: float, key: str) -> list[list[dict]]:
    """Group items that would touch on screen (same `key`, less than a pixel apart): a small SVG."""
    groups: list[list[dict]] = []
    end = -math.inf
    for item in sorted(items, key=lambda i: i["t"]):
        item_end = item["t"] + item["dur"]
        if groups and item[key] == groups[-1][0][key] and item["t"] - end < us_per_px:
            groups[-1].append(item)
            end = max(end, item_end)
        else:
            groups.append([item])
            end = item_end
    return groups


def _span(group: list[dict]) -> float:
    return max(i["t"] + i["dur"] for i in group) - group[0]["t"]


def _op_tip(group: list[dict]) -> str:
    first = group[0]
    name = short_name(first["name"], TIP_NAME_CHARS)
    if len(group) == 1:
        return f"{name}\n{first['cat']} · {fmt(first['dur'])} µs, at {fmt(first['t'])} µs"
    busy = sum(i["dur"] for i in group)
    return (f"{len(group)} {first['cat']} ops, {fmt(busy)} µs busy, "
            f"{fmt(first['t'])}–{fmt(first['t'] + _span(group))} µs\nfirst: {name}")


def _gap_tip(group: list[dict]) -> str:
    first = group[0]
    label = GAP_LABELS.get(first["kind"], f"idle: {first['kind']}")
    if len(group) > 1:
        return f"{label}: {len(group)} gaps, {fmt(sum(g['dur'] for g in group))} µs, from {fmt(first['t'])} µs"
    sync = ", after a synchronising call" if first.get("after_sync") else ""
    return f"{label}{sync}: {fmt(first['dur'])} µs, at {fmt(first['t'])} µs"


def top_kernels_chart(kernels: list[dict], label_chars: int = 44) -> str:
    """The GPU ops with the most time per step, as horizontal bars with an axis in µs per step."""
    rows = [k for k in kernels if (k.get("us_per_step") or 0) > 0]
    if not rows:
        return ""
    left, right, top, row_h = 310.0, 80.0, 34.0, 24.0
    x1 = WIDTH - right
    upper = _axis_upper(max(k["us_per_step"] for k in rows))
    scale = (x1 - left) / upper
    axis_y = top + len(rows) * row_h + 4
    title = "Top GPU kernels by time per step"
    body = [_text(0, 16, title, cls="chart-title")]
    body += _x_axis(left, x1, axis_y, upper, "µs per step (profiled)", top)
    for i, k in enumerate(rows):
        y = top + i * row_h
        full = str(k.get("name", ""))
        tip = (f"{full}\n{fmt(k['us_per_step'])} µs per step · {fmt(k.get('calls_per_step', 0))} calls per step"
               + (f" · launched by {k['op']}" if k.get("op") else ""))
        body.append(f"<g><title>{esc(tip)}</title>")
        body.append(_text(left - 8, y + row_h / 2 + 4, short_name(full, label_chars), "end", "bar-label"))
        body.append(_rect(left, y + 3, k["us_per_step"] * scale, row_h - 6,
                          OP_COLOURS.get(k.get("cat"), OTHER_OP_COLOUR), extra=' rx="2"'))
        body.append(_text(left + k["us_per_step"] * scale + 6, y + row_h / 2 + 4,
                          f"{fmt(k['us_per_step'])} µs", cls="value"))
        body.append("</g>")
    return _svg(WIDTH, axis_y + 44, title, body)


def _axis_upper(largest: float) -> float:
    """The first round tick at or above `largest`."""
    ticks = nice_ticks(largest)
    step = ticks[1] - ticks[0] if len(ticks) > 1 else largest
    return ticks[-1] if ticks[-1] >= largest else ticks[-1] + step
