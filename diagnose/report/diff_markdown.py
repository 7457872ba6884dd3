"""A DiffReport as Markdown for a pull-request comment: the verdict, a small table of where the
step time went before and after, the top three attributed changes, findings that changed, and a
link to the HTML diff. Names from traces are escaped as in markdown.py."""

from __future__ import annotations

from diagnose.diff import DiffReport
from diagnose.report import diff_views as views
from diagnose.report.mdtext import link as _link
from diagnose.report.mdtext import md
from diagnose.vocabulary.units import percent

TOP_CHANGES = 3
ICONS = {"faster": "🟢", "slower": "🔴", "no significant change": "⚪"}


def render_diff_markdown(r: DiffReport, *, outputs: dict[str, str] | None = None, **_) -> str:
    """The diff as GitHub-flavoured Markdown."""
    lines = [
        f"## diagnose diff · {md(r.before.name)} → {md(r.after.name)}",
        "",
        f"**Verdict:** {ICONS[r.step.verdict]} {md(r.verdict)}",
        "",
    ]
    gate = views.gate_line(r)
    if gate:
        lines += [f"**{md(gate)}**", ""]
    lines += [
        "| | before | after | change | share of change |",
        "| --- | --- | --- | --- | --- |",
        f"| step time | {md(views.us(r.step.before_us))} | {md(views.us(r.step.after_us))} | "
        f"{md(f'{r.step.change_pct:+.1f} %')} | 100 % |",
    ]
    for row in views.bucket_rows(r, limit=4):
        lines.append(
            f"| {md(row['label'])} | {md(row['before'])} | {md(row['after'])} | {md(row['change'])} | "
            f"{md(row['share'])} |"
        )
    low, high = r.step.interval_pct
    lines += [
        "",
        f"{percent(r.step.confidence)} interval of the change: {md(f'{low:+.1f} % to {high:+.1f} %')} "
        f"({md(r.step.basis)}, {r.step.n_before} + {r.step.n_after} steps).",
        "",
    ]
    top = views.top_change_lines(r, TOP_CHANGES)
    if top:
        lines += ["**Top changes**", ""] + [f"{i}. {md(t)}" for i, t in enumerate(top, 1)] + [""]
    findings = views.finding_lines(r)
    if findings:
        lines += ["**Findings:** " + md(" · ".join(findings)), ""]
    for w in r.warnings[:3]:
        lines.append(f"> warning: {md(w)}")
    if outputs:
        lines += ["", " · ".join(f"[{md(k)}]({_link(v)})" for k, v in outputs.items())]
    return "\n".join(lines).rstrip() + "\n"
