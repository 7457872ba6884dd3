"""The terminal view of a DiffReport: verdict, step change, bucket table, top changes, findings."""

from __future__ import annotations

from rich.table import Table

from diagnose.diff import DiffReport
from diagnose.report import diff_views as views
from diagnose.report.richtext import safe, string_console

VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "no significant change": "bold"}


def render_diff_text(
    r: DiffReport, *, outputs: dict[str, str] | None = None, width: int | None = None, color: bool = False, **_
) -> str:
    """The diff as text: `width` columns (None: no wrapping), ANSI colours with `color`."""
    console, buffer = string_console(width, color)
    console.print(f"[bold]diagnose diff[/] · {safe(r.before.name)} → {safe(r.after.name)}")
    console.print(f"\n[{VERDICT_STYLE[r.step.verdict]}]Verdict:[/] {safe(r.verdict)}")
    console.print(f"  step {safe(views.step_line(r))}")
    gate = views.gate_line(r)
    if gate:
        console.print(f"  [{'bold red' if r.gate_tripped else 'green'}]{safe(gate)}[/]")
    table = Table(box=None, padding=(0, 1), show_header=True, header_style="bold")
    for column in ("where the step goes", "before", "after", "change", "share of change"):
        table.add_column(column, justify="left" if column.startswith("where") else "right")
    for row in views.bucket_rows(r):
        table.add_row(safe(row["label"]), row["before"], row["after"], row["change"], row["share"])
    console.print()
    console.print(table)
    for bucket in r.buckets:
        if bucket.note:
            console.print(f"  [dim]{safe(bucket.label)}: {safe(bucket.note)}[/]")
    lines = views.top_change_lines(r)
    if lines:
        console.print("\n[bold]Top changes[/]")
        for i, line in enumerate(lines, 1):
            console.print(f" {i}. {safe(line)}")
    for change in r.shape_changes[:3]:
        console.print(
            f"  shapes changed: {safe(change['op'])} {safe(change['before'][0])} → {safe(change['after'][0])}"
        )
    findings = views.finding_lines(r)
    if findings:
        console.print("\n[bold]Findings[/]: " + safe(" · ".join(findings)))
    for w in r.warnings[:3]:
        console.print(f"[yellow]warning:[/] {safe(w)}")
    if outputs:
        console.print("\n" + " · ".join(f"{k}: {safe(v)}" for k, v in outputs.items()))
    text = buffer.getvalue()
    return text if width else "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
