"""A Markdown summary for where audits are read: a pull-request comment, a CI job summary.

The verdict, the headline numbers as a small table, the top three findings with their evidence
and fix, and links to the full reports when they were written. Untrusted names are escaped so a
kernel called `|` or `<script>` cannot break the table or inject markup.
"""

from __future__ import annotations

from diagnose.model.findings import Diagnosis
from diagnose.base.format import short_name
from diagnose.vocabulary.units import duration, fmt, percent
from diagnose.report import Renderer
from diagnose.report.diff_markdown import render_diff_markdown
from diagnose.report.mdtext import link as _link
from diagnose.report.mdtext import md
from diagnose.report.verify_view import verify_lines

TOP_FINDINGS = 3


def render_markdown(d: Diagnosis, *, outputs: dict[str, str] | None = None, **_) -> str:
    """The Diagnosis as GitHub-flavoured Markdown."""
    lines = [f"## diagnose · {md(d.target)}", "", f"**Verdict:** {md(d.verdict)}", ""]
    rows = _headline_rows(d)
    if rows:
        lines += ["| measure | value |", "| --- | --- |"] + [f"| {md(k)} | {md(v)} |" for k, v in rows] + [""]
    if d.findings:
        lines += ["| # | severity | rule | finding | est. speedup | fix |", "| --- | --- | --- | --- | --- | --- |"]
        for i, f in enumerate(d.findings, 1):
            gain = f"{fmt(f.est_speedup)}×" if f.est_speedup else "—"
            fixes = ", ".join(x.id for x in f.fixes) or "—"
            lines.append(f"| {i} | {f.severity} | `{f.rule}` | {md(f.title)} | {gain} | {md(fixes)} |")
        lines.append("")
        for i, f in enumerate(d.findings[:TOP_FINDINGS], 1):
            lines.append(f"### {i}. {md(f.title)}")
            lines += [f"- {md(e.text())}" for e in f.evidence[:4]]
            if f.range_text():
                lines.append(f"- **{md(f.range_text())}**")
            if f.fixes:
                lines.append(f"- **fix** `{f.fixes[0].id}`: {md(f.fixes[0].title)}")
            lines += [f"- **verify** {md(line)}" for line in verify_lines(f)]
            if f.offenders:
                lines.append(f"- top offender: {md(short_name(f.offenders[0].name, 80))}")
            lines.append("")
    elif d.checked:
        lines += [f"No finding: {len(d.checked)} rules ran quiet, {len(d.skipped)} could not run.", ""]
    for w in d.warnings[:3]:
        lines.append(f"> warning: {md(w)}")
    if outputs:
        lines += ["", " · ".join(f"[{md(k)}]({_link(v)})" for k, v in outputs.items())]
    return "\n".join(lines).rstrip() + "\n"


def _headline_rows(d: Diagnosis) -> list[tuple[str, str]]:
    s = d.summary
    rows = []
    if s.step_time_us is not None:
        basis = s.step_basis
        uncertain = f" ({s.uncertain_text()})" if s.uncertain_text() else ""
        rows.append((f"step time ({basis})", duration(s.step_time_us) + uncertain))
    if s.gpu_busy_fraction is not None:
        rows.append(("GPU busy", percent(s.gpu_busy_fraction)))
    if s.host_wait_share is not None:
        rows.append(("host wait", percent(s.host_wait_share)))
    if d.device.name:
        rows.append(("device", d.device.name))
    return rows


RENDERER = Renderer(
    "md",
    "Markdown for a pull-request comment or CI job summary",
    render_markdown,
    order=30,
    render_diff=render_diff_markdown,
)
