"""report.html: one self-contained page (inline CSS, SVG and a little JS; nothing fetched).

The page is built in two steps: `report_context` turns a Diagnosis into plain, display-ready data,
and the jinja2 template (autoescape on) lays it out. Charts arrive as SVG strings that charts.py
has already escaped; everything else is escaped by the template.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from diagnose.model.findings import Diagnosis, Finding
from diagnose.base.format import column_label, document_inert, short_name
from diagnose.base.step_timing import paid_step_us, set_aside_timing
from diagnose.vocabulary.units import duration, fmt, is_number, percent
from diagnose.memory.units import gb
from diagnose.report import Renderer, charts, memory_charts
from diagnose.report.rank_view import rank_ranges, ranks_view
from diagnose.report.verify_view import verify_lines
from diagnose.base.version import __version__

TEMPLATES = Path(__file__).parent / "templates"
LONG_TEXT = 60
KERNEL_NAME_CHARS = 44
FAILURE_TITLES = {
    "oom": "The workload ran out of GPU memory",
    "timeout": "The workload timed out",
    "crashed": "The workload crashed",
    "failed": "The workload raised an exception",
}
TOP_KERNEL_COLUMNS = {
    "name": "kernel",
    "us_per_step": "µs per step",
    "share_of_gpu_time": "share of GPU time",
    "calls_per_step": "calls per step",
    "median_us": "median µs",
    "op": "launched by",
    "cat": "kind",
    "sm_pct": "SM % (ncu)",
    "dram_pct": "DRAM % (ncu)",
    "tensor_pct": "tensor pipe % (ncu)",
    "bound": "class (ncu)",
    "input_dims": "input shapes",
}
NCU_COLUMNS = {
    "kernel": "kernel",
    "measured_us": "µs under ncu",
    "profiled_us": "µs profiled",
    "sm_pct": "SM %",
    "memory_pct": "memory %",
    "dram_pct": "DRAM %",
    "tensor_pct": "tensor pipe %",
    "occupancy_pct": "warps active %",
    "dram_mb": "DRAM MB",
    "bound": "class",
    "why": "why",
}


def render_html(diagnosis: Diagnosis, **_) -> str:
    """The report as one HTML page that works offline (no CDN, no fonts or scripts fetched)."""
    return document_inert(_environment().get_template("report.html.j2").render(**report_context(diagnosis)))


@functools.cache
def _environment() -> jinja2.Environment:
    """The template environment, made once per process: compiling the report's templates takes about 0.1 s."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt=fmt, duration=duration, percent=percent, rank_ranges=rank_ranges)
    return env


def report_context(d: Diagnosis) -> dict:
    """Everything the template shows, as plain display-ready data."""
    summary, details = d.summary, d.details
    step_us = summary.step_time_us
    ranks: dict[str, Any] = (
        ranks_view(summary.ranks.per_rank, summary.ranks.reference) if summary.ranks else {"many": False}
    )
    drawn = ranks.get("drawn")
    rank_bars = [r for r in details.ranks or [] if drawn is None or r.get("rank") in drawn]
    return {
        "d": d,
        "version": __version__,
        "severity": severity_class(d),
        "failure": failure_view(d),
        "device": device_facts(d.device or {}),
        "tiles": headline_tiles(d),
        "findings": [finding_view(f, step_us) for f in d.findings],
        "has_gpu": details.top_kernels is not None or bool(summary.gpu_ops_per_step),
        "charts": {
            "budget": Markup(charts.step_budget_bar(summary)),
            "timeline": Markup(charts.step_timeline_chart(details.step_timeline or {})),
            "kernels": Markup(charts.top_kernels_chart(details.top_kernels or [])),
            "roofline": Markup(charts.roofline_chart(details.roofline or {})),
            "memory": Markup(memory_charts.memory_timeline_chart(details.memory or {})),
            "sweep": Markup(memory_charts.sweep_chart((details.memory or {}).get("sweep") or {})),
            "ranks": Markup(charts.rank_budget_chart(rank_bars)),
            "steps": Markup(charts.step_times_chart(details.steps or [])),
        },
        "ranks": ranks,
        "roofline": roofline_view(details.roofline or {}),
        "ncu": ncu_view(details.ncu or {}),
        "budget_parts": charts.step_budget_parts(summary),
        "overlapped": charts.overlapped_comm(summary),
        "timeline_note": (details.step_timeline or {}).get("note", ""),
        "top_kernels": records_table(
            details.top_kernels or [],
            TOP_KERNEL_COLUMNS,
            percent_keys={"share_of_gpu_time"},
            max_chars=KERNEL_NAME_CHARS,
        ),
        **steps_view(details.steps or [], d.summary.steps_found_by),
        "capture": capture_facts(d.capture or {}),
        "memory_parts": memory_parts_table((details.memory or {}).get("breakdown") or {}),
    }


STEP_ROWS = 40  # more measured steps than this: the table lists the first and the longest, the chart all
FIRST_STEPS, LONGEST_STEPS = 3, 10


def steps_view(steps: list[dict], found_by: str | None = None) -> dict:
    """The steps table and its caption: every step, or for a long trace the first and the longest ones
    (findings.json holds them all, and the step-time chart draws them all), and how the steps were found."""
    how = f" Steps: {found_by}." if found_by else ""
    caption = "Each measured step in profiled time (the profiler stretches host-side gaps)." + how
    if len(steps) <= STEP_ROWS:
        return {"steps": records_table(steps), "steps_note": caption}
    longest = sorted(range(len(steps)), key=lambda i: -(steps[i].get("duration_us") or 0))[:LONGEST_STEPS]
    shown = sorted(set(range(FIRST_STEPS)) | set(longest))
    note = (
        f"{len(steps):,} measured steps in profiled time: the first {FIRST_STEPS} and the {LONGEST_STEPS} longest "
        "are listed (the chart above draws every one, findings.json lists every one)." + how
    )
    return {"steps": records_table([steps[i] for i in shown]), "steps_note": note}


def memory_parts_table(breakdown: dict) -> dict:
    """The peak broken down by what holds it (or, failing that, by the code that allocated it)."""
    parts = [
        {"part": p["part"], "size": gb(p["bytes"]), "how it was counted": p.get("how", "")}
        for p in breakdown.get("parts") or []
    ]
    if not parts:
        parts = [
            {
                "allocated at": a["where"],
                "GB allocated over the run": round(a["bytes"] / 1e9, 2),
                "allocations": a.get("count"),
                "largest GB": round((a.get("largest") or 0) / 1e9, 2),
            }
            for a in (breakdown.get("top_allocating") or [])[:8]
        ]
    table = records_table(parts)
    table["peak_gb"] = round(breakdown["peak_bytes"] / 1e9, 2) if breakdown.get("peak_bytes") else None
    table["basis"] = breakdown.get("basis", "")
    return table


def roofline_view(roof: dict) -> dict:
    """What the roofline's caption says: how many points are measured, where the ceilings come from."""
    points = roof.get("points") or []
    measured = sum(1 for p in points if p.get("measured"))
    return {
        "points": len(points),
        "measured": measured,
        "estimated": len(points) - measured,
        "source": (roof.get("ceilings") or {}).get("source", ""),
    }


def ncu_view(ncu: dict) -> dict:
    """The Nsight Compute section: its summary line, thresholds, and the measured kernels as a table."""
    if not ncu:
        return {}
    thresholds = ncu.get("thresholds") or {}
    rule = (
        f"latency-bound: SM and memory both < {fmt(thresholds.get('LATENCY_PCT', 60))} %; compute-bound: "
        f"SM ≥ {fmt(thresholds.get('LATENCY_PCT', 60))} % and more than {fmt(thresholds.get('LEAD_PCT', 10))} "
        f"points above memory (or within them with the tensor pipe ≥ {fmt(thresholds.get('TENSOR_PCT', 50))} %); "
        "memory-bound: memory ≥ "
        f"{fmt(thresholds.get('LATENCY_PCT', 60))} % otherwise"
    )
    return {
        "summary": ncu.get("summary", ""),
        "source": ncu.get("source", ""),
        "seconds": ncu.get("seconds"),
        "rule": rule,
        "unmatched": ", ".join(ncu.get("unmatched_ncu") or []),
        "table": records_table(ncu.get("kernels") or [], NCU_COLUMNS, max_chars=KERNEL_NAME_CHARS),
    }


def severity_class(d: Diagnosis) -> str:
    """The colour of the verdict: failed, the worst finding's severity, none (rules ran, quiet) or unknown."""
    if d.workload_failed:
        return "failed"
    return d.worst_severity() or ("none" if d.checked else "unknown")


def failure_view(d: Diagnosis) -> dict | None:
    """The workload-failure banner: what happened, the error, and its traceback (None when it ran)."""
    if not d.workload_failed:
        return None
    status = str(d.capture.get("status"))
    error = d.capture.get("error") or {}
    return {
        "status": status,
        "title": FAILURE_TITLES.get(status, f"The workload ended with status {status}"),
        "type": error.get("type") or "",
        "message": error.get("message") or "",
        "traceback": error.get("traceback") or "",
    }


def device_facts(device: dict) -> list[tuple[str, str]]:
    """(label, value) pairs of what is known about the GPU, unknown ones left out."""
    memory = device.get("memory_bytes")
    facts = [
        ("GPU", device.get("name")),
        ("SMs", device.get("sm_count")),
        ("memory", f"{memory / 2**30:.0f} GiB" if memory else None),
        ("compute capability", device.get("compute_capability")),
        ("torch", device.get("torch")),
        ("CUDA", device.get("cuda")),
    ]
    return [(label, str(value)) for label, value in facts if value not in (None, "")]


def headline_tiles(d: Diagnosis) -> list[dict]:
    """The numbers on the first screen: step time, GPU busy share, and what the top finding recovers."""
    s = d.summary
    tiles = []
    if s.step_time_us is not None:
        measured = s.unprofiled_step_time_us is not None
        notes = {
            "unprofiled": "measured without the profiler",
            "estimated unprofiled": (
                f"estimated without the profiler ({duration(s.profiled_step_time_us or 0)} profiled, "
                f"{percent(s.profiler_share_of_host_time or 0)} of its host time the profiler's own"
                + (
                    f", {duration(s.python_tracing_us_per_step)} of it with_stack's Python tracing)"
                    if s.python_tracing_us_per_step is not None
                    else ")"
                )
            ),
            "profiled": "profiled: includes profiler overhead",
        }
        synced = set_aside_timing(s.step_basis, d.capture)
        if synced:
            notes["profiled"] = (
                f"profiled: {duration(synced)} timed with a sync after each step, which the profiled steps did not have"
            )
        tiles.append(
            {
                "label": "step time",
                "value": duration(s.step_time_us),
                "note": notes[s.step_basis],
                "tone": "" if measured else "warn",
            }
        )
    if s.gpu_busy_fraction is not None:
        busy_us = s.gpu_busy_us_per_step
        tiles.append(
            {
                "label": "GPU busy",
                "value": percent(s.gpu_busy_fraction),
                "note": f"{duration(busy_us)} of work per step" if busy_us else "no GPU work in the steps",
                "tone": "",
            }
        )
    top = d.findings[0] if d.findings else None
    if top and top.recoverable_us:
        share = f" ({percent(top.recoverable_us / s.step_time_us)} of the step)" if s.step_time_us else ""
        tiles.append(
            {
                "label": "recoverable per step",
                "value": duration(top.recoverable_us),
                "note": f"by fixing {top.rule}{share}",
                "tone": "bad",
            }
        )
    if top and top.est_speedup:
        fix = f" with {top.fix_phrase()}" if top.fixes else ""
        tiles.append(
            {
                "label": "estimated speedup",
                "value": f"{fmt(top.est_speedup)}×",
                "note": f"of the whole step{fix}",
                "tone": "good",
            }
        )
    if not top and s.gpu_ops_per_step:
        tiles.append(
            {
                "label": "GPU ops per step",
                "value": fmt(s.gpu_ops_per_step),
                "note": "kernels, copies and memsets",
                "tone": "",
            }
        )
    return tiles


def finding_view(f: Finding, step_us: float | None) -> dict:
    """One finding ready to show: evidence as text, offenders as a table, the recoverable share."""
    share = f.recoverable_us / step_us if f.recoverable_us and step_us else None
    sheet = f.sheet
    return {
        "f": f,
        "anchor": f"finding-{f.rule}",
        "sheet": sheet,
        "evidence": [{"text": e.text(), "is_test": e.is_test, "unmet": e.holds is False} for e in f.evidence],
        "offenders": records_table([o.row() for o in f.offenders]),
        "recoverable": duration(f.recoverable_us) if f.recoverable_us else "",
        "recoverable_share": percent(share) if share is not None else "",
        "verify": verify_lines(f),
    }  # --verify


def records_table(
    records: list[dict],
    labels: dict[str, str] | None = None,
    percent_keys: frozenset | set = frozenset(),
    max_chars: int = LONG_TEXT,
) -> dict:
    """A list of dicts as a table: columns from `labels` (or every key, in order of appearance), cells formatted.

    Each cell carries its display text, a raw sort value, and the full text as a tooltip when
    shortened to `max_chars`.
    """
    keys = list(labels) if labels else list(dict.fromkeys(k for r in records for k in r))
    keys = [k for k in keys if any(k in r for r in records)]
    numeric = {k for k in keys if all(is_number(r.get(k)) for r in records if r.get(k) is not None)}
    columns = [{"key": k, "label": (labels or {}).get(k) or column_label(k), "numeric": k in numeric} for k in keys]
    rows = [[_cell(r.get(k), k in numeric, k in percent_keys, max_chars) for k in keys] for r in records]
    return {"columns": columns, "rows": rows}


def _cell(value, numeric: bool, as_percent: bool, max_chars: int) -> dict:
    if value is None:
        return {"text": "—", "sort": "", "title": "", "bar": None}
    if numeric:
        text = percent(value) if as_percent else fmt(value)
        return {"text": text, "sort": value, "title": "", "bar": min(max(value, 0), 1) if as_percent else None}
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    short = short_name(text, max_chars)
    return {"text": short, "sort": None, "title": text if short != text else "", "bar": None}


def capture_facts(capture: dict) -> list[tuple[str, str]]:
    """(label, value) pairs describing how the workload was captured and timed."""
    steps, timing, memory = capture.get("steps") or {}, capture.get("timing") or {}, capture.get("memory") or {}
    facts = [
        ("status", capture.get("status")),
        ("target", capture.get("target")),
        ("mode", capture.get("mode")),
        ("recorded at", capture.get("recorded_at")),
        ("steps", f"{steps['warmup']} warm-up, {steps['profiled']} profiled" if "warmup" in steps else None),
        ("a step is", steps.get("how")),
        ("unprofiled timing", _timing_text(timing)),
        ("peak memory allocated", _gib(memory.get("max_allocated_bytes"))),
        ("peak memory reserved", _gib(memory.get("max_reserved_bytes"))),
        ("parameters", json.dumps(capture["params"], default=str) if capture.get("params") else None),
    ]
    return [(label, str(value)) for label, value in facts if value not in (None, "")]


def _timing_text(timing: dict) -> str | None:
    paid = paid_step_us(timing)
    if paid is None:
        return None
    runs = len(timing.get("unprofiled_step_us") or [])
    spread = f", min {duration(timing['min_us'])}" if timing.get("min_us") is not None else ""
    return (
        f"mean {duration(paid)}, median "
        f"{duration(timing['median_us'])}{spread} over {runs} steps ({timing.get('source', '')})"
    )


def _gib(n) -> str | None:
    return f"{n / 2**30:.2f} GiB" if isinstance(n, (int, float)) and n else None


def _render_diff(report, **options) -> str:
    from diagnose.report.diff_html import render_diff_html

    return render_diff_html(report, **options)


RENDERER = Renderer(
    "html",
    "report.html: one self-contained page with charts (works offline)",
    render_html,
    filename="report.html",
    label="report",
    order=20,
    render_diff=_render_diff,
    diff_filename="diff.html",
)
