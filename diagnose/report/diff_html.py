"""diff.html: the diff view, one self-contained page in the report's own style (report.css inlined, nothing fetched).

The verdict with the step change and its interval, a before/after bar per step-accounting bucket,
the matched kernels, ops and host ranges that moved inside each bucket, ops whose input shapes
changed, and the findings of both runs side by side with their evidence. jinja2 autoescape is on,
so names from traces are inert.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from diagnose.diff import DiffReport
from diagnose.base.format import document_inert, short_name
from diagnose.vocabulary.units import fmt
from diagnose.report import diff_views as views
from diagnose.base.version import __version__

BAR_PX = 320
SEVERITY = {"good": "none", "bad": "high", "same": "unknown"}  # the report's verdict colours: green, red, grey
TEMPLATES = Path(__file__).parent / "templates"


def render_diff_html(r: DiffReport, **_) -> str:
    """The diff as one HTML page that works offline."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt=fmt)
    return document_inert(env.get_template("diff.html.j2").render(**diff_context(r)))


def diff_context(r: DiffReport) -> dict:
    """Everything the diff template shows, as plain display-ready data."""
    largest = max([max(b.before_us, b.after_us) for b in r.buckets] + [1e-9])
    buckets = []
    for b in r.buckets:
        if max(b.before_us, b.after_us) < 0.05:
            continue
        buckets.append(
            {
                "label": b.label,
                "before": views.us(b.before_us),
                "after": views.us(b.after_us),
                "change": views.signed_us(b.delta_us),
                "worse": b.delta_us > 0,
                "before_px": round(BAR_PX * b.before_us / largest, 1),
                "after_px": round(BAR_PX * b.after_us / largest, 1),
                "rows": [
                    {
                        "kind": i.kind,
                        "name": short_name(i.name, 110),
                        "full": i.name,
                        "status": i.status,
                        "before": views.us(i.before_us),
                        "after": views.us(i.after_us),
                        "change": views.signed_us(i.delta_us),
                        "detail": i.detail,
                    }
                    for i in b.items
                ],
            }
        )
    findings = [
        {"rule": c.rule, "status": c.status, "before": _side(c.before), "after": _side(c.after)} for c in r.findings
    ]
    return {
        "r": r,
        "version": __version__,
        "severity": SEVERITY[views.VERDICT_CLASS[r.step.verdict]],
        "step_line": views.step_line(r),
        "gate": views.gate_line(r),
        "buckets": buckets,
        "top": views.top_change_lines(r),
        "findings": findings,
        "shapes": r.shape_changes,
    }


def _side(f) -> dict | None:
    if f is None:
        return None
    return {
        "severity": f.severity,
        "title": f.title,
        "evidence": [e.text() for e in f.evidence],
        "fixes": ", ".join(x.id for x in f.fixes),
        "est": f.est_speedup,
        "uncertain": f.range_text(),
    }
