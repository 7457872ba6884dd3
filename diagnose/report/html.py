"""report.html: one self-contained page (inline CSS, SVG and a little JS; nothing fetched).

The page is built in two steps: `report_context` turns a Diagnosis into plain, display-ready data,
and the jinja2 template (autoescape on) lays it out. Charts arrive as SVG strings that charts.py
has already escaped; everything else is escaped by the template.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jinja2
from markupsafe import Markup
from msgspec import UNSET, UnsetType

from diagnose.memory.sections import PeakBreakdown
from diagnose.metrics.sections import StepRow
from diagnose.model.details import Capture, CaptureMemory, CaptureSteps, CaptureTiming, Device
from diagnose.ncu.sections import Ncu, Roofline
from diagnose.model.findings import Diagnosis, Finding
from diagnose.base.format import column_label, document_inert, short_name
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
    ranks = ranks_view(summary.ranks.per_rank, summary.ranks.reference) if summary.ranks else ranks_view([], None)
    drawn = ranks["drawn"]
    rank_bars = [r for r in details.ranks or [] if drawn is None or r.rank in drawn]
    memory = details.memory
    return {
        "d": d,
        "version": __version__,
        "severity": severity_class(d),
        "failure": failure_view(d),
        "device": device_facts(d.device),
        "tiles": headline_tiles(d),
        "findings": [finding_view(f, step_us) for f in d.findings],
        "has_gpu": details.top_kernels is not None or bool(summary.gpu_ops_per_step),
        "charts": {
            "budget": Markup(charts.step_budget_bar(summary)),
            "timeline": Markup(charts.step_timeline_chart(details.step_timeline)),
            "kernels": Markup(charts.top_kernels_chart(details.top_kernels or [])),
            "roofline": Markup(charts.roofline_chart(details.roofline)),
            "memory": Markup(memory_charts.memory_timeline_chart(memory)),
            "sweep": Markup(memory_charts.sweep_chart(memory.sweep if memory and memory.sweep else None)),
            "ranks": Markup(charts.rank_budget_chart(rank_bars)),
            "steps": Markup(charts.step_times_chart(details.steps or [])),
        },
        "ranks": ranks,
        "roofline": roofline_view(details.roofline),
        "ncu": ncu_view(details.ncu),
        "budget_parts": charts.step_budget_parts(summary),
        "overlapped": charts.overlapped_comm(summary),
        "timeline_note": details.step_timeline.note if details.step_timeline else "",
        "top_kernels": records_table(
            [k.columns() for k in details.top_kernels or []],
            TOP_KERNEL_COLUMNS,
            percent_keys={"share_of_gpu_time"},
            max_chars=KERNEL_NAME_CHARS,
        ),
        **steps_view(details.steps or [], d.summary.steps_found_by),
        "capture": capture_facts(d.capture),
        "memory_parts": memory_parts_table(memory.breakdown if memory else None),
    }


STEP_ROWS = 40  # more measured steps than this: the table lists the first and the longest, the chart all
FIRST_STEPS, LONGEST_STEPS = 3, 10


def steps_view(steps: list[StepRow], found_by: str | None = None) -> dict:
    """The steps table and its caption: every step, or for a long trace the first and the longest ones
    (findings.json holds them all, and the step-time chart draws them all), and how the steps were found."""
    how = f" Steps: {found_by}." if found_by else ""
    caption = "Each measured step in profiled time (the profiler stretches host-side gaps)." + how
    if len(steps) <= STEP_ROWS:
        return {"steps": records_table([s.columns() for s in steps]), "steps_note": caption}
    longest = sorted(range(len(steps)), key=lambda i: -(steps[i].duration_us or 0))[:LONGEST_STEPS]
    shown = sorted(set(range(FIRST_STEPS)) | set(longest))
    note = (
        f"{len(steps):,} measured steps in profiled time: the first {FIRST_STEPS} and the {LONGEST_STEPS} longest "
        "are listed (the chart above draws every one, findings.json lists every one)." + how
    )
    return {"steps": records_table([steps[i].columns() for i in shown]), "steps_note": note}


def memory_parts_table(breakdown: PeakBreakdown | None | UnsetType) -> dict:
    """The peak broken down by what holds it (or, failing that, by the code that allocated it)."""
    if not breakdown:
        return {**records_table([]), "peak_gb": None, "basis": ""}
    parts: list[dict] = [{"part": p.part, "size": gb(p.bytes), "how it was counted": p.how} for p in breakdown.parts]
    if not parts:
        parts = [
            {
                "allocated at": a.where,
                "GB allocated while the history ran": round(a.bytes / 1e9, 2),
                "allocations": a.count,
                "largest GB": round((a.largest or 0) / 1e9, 2),
            }
            for a in breakdown.top_allocating[:8]
        ]
    table = records_table(parts)
    table["peak_gb"] = round(breakdown.peak_bytes / 1e9, 2) if breakdown.peak_bytes else None
    table["basis"] = breakdown.basis
    return table


def roofline_view(roof: Roofline | None) -> dict:
    """What the roofline's caption says: how many points are measured, where the ceilings come from."""
    points = roof.points if roof else []
    measured = sum(1 for p in points if p.measured)
    return {
        "points": len(points),
        "measured": measured,
        "estimated": len(points) - measured,
        "source": roof.ceilings.source if roof else "",
    }


def ncu_view(ncu: Ncu | None) -> dict:
    """The Nsight Compute section: its summary line, thresholds, and the measured kernels as a table."""
    if not ncu:
        return {}
    t = ncu.thresholds
    rule = (
        f"latency-bound: SM and memory both < {fmt(t.LATENCY_PCT)} %; compute-bound: "
        f"SM ≥ {fmt(t.LATENCY_PCT)} % and more than {fmt(t.LEAD_PCT)} "
        f"points above memory (or within them with the tensor pipe ≥ {fmt(t.TENSOR_PCT)} %); "
        "memory-bound: memory ≥ "
        f"{fmt(t.LATENCY_PCT)} % otherwise"
    )
    return {
        "summary": ncu.summary,
        "source": ncu.source,
        "seconds": ncu.seconds or None,
        "rule": rule,
        "unmatched": ", ".join(ncu.unmatched_ncu),
        "table": records_table([k.columns() for k in ncu.kernels], NCU_COLUMNS, max_chars=KERNEL_NAME_CHARS),
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
    status = str(d.capture.status)
    error = d.capture.error_or_empty
    return {
        "status": status,
        "title": FAILURE_TITLES.get(status, f"The workload ended with status {status}"),
        "type": error.type or "",
        "message": error.message or "",
        "traceback": error.traceback or "",
    }


def device_facts(device: Device) -> list[tuple[str, str]]:
    """(label, value) pairs of what is known about the GPU, unknown ones left out."""
    memory = device.memory_bytes
    facts = [
        ("GPU", device.name),
        ("SMs", device.sm_count),
        ("memory", f"{memory / 2**30:.0f} GiB" if memory else None),
        ("compute capability", device.compute_capability),
        ("torch", device.torch),
        ("CUDA", device.cuda),
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
                + (f"; {s.uncertain_text()}" if s.uncertain_text() else "")
            ),
            "profiled": "profiled: includes profiler overhead",
        }
        synced = d.capture.set_aside_us(s.step_basis)
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
    shortened to `max_chars`. The records are open mappings by column name (an offender's `row()`, whose
    columns each rule names, or a typed row's `columns()`, without the columns it lacks), so a cell is
    read with `.get`: a row without that column shows "—".
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


def capture_facts(capture: Capture) -> list[tuple[str, str]]:
    """(label, value) pairs describing how the workload was captured and timed."""
    steps, memory = capture.steps or CaptureSteps(), capture.memory or CaptureMemory()
    facts = [
        ("status", capture.status),
        ("target", capture.target),
        ("mode", capture.mode),
        ("recorded at", capture.recorded_at),
        ("steps", f"{steps.warmup} warm-up, {steps.profiled} profiled" if steps.warmup is not UNSET else None),
        ("a step is", steps.how),
        ("unprofiled timing", _timing_text(capture.timing or None)),
        ("peak memory allocated", _gib(memory.max_allocated_bytes)),
        ("peak memory reserved", _gib(memory.max_reserved_bytes)),
        ("parameters", json.dumps(capture.params, default=str) if capture.params else None),
    ]
    return [(label, str(value)) for label, value in facts if value not in (None, "", UNSET)]


def _timing_text(timing: CaptureTiming | None) -> str | None:
    paid = timing.paid_step_us if timing else None
    if timing is None or paid is None:
        return None
    runs = len(timing.unprofiled_step_us or [])
    spread = f", min {duration(timing.min_us)}" if isinstance(timing.min_us, (int, float)) else ""
    median = timing.median_us if isinstance(timing.median_us, (int, float)) else None
    return f"mean {duration(paid)}, median {duration(median)}{spread} over {runs} steps ({timing.source or ''})"


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
