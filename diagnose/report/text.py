"""The terminal summary: the verdict, the headline numbers and the top findings, on one screen.

Names from a trace are untrusted: every one goes through `plain` (control characters shown
escaped, so an ANSI sequence in a kernel name cannot clear the screen) and rich's `escape` (so
"[bold]" in an op name stays text). On a terminal the summary takes its width and colours; piped,
it is plain text that wraps nowhere.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from diagnose.model.details import Capture, Device
from diagnose.model.findings import Diagnosis, Summary
from diagnose.vocabulary.units import fmt, percent, plural
from diagnose.report import Renderer
from diagnose.report.diff_text import render_diff_text
from diagnose.report.richtext import safe, string_console
from diagnose.report.verify_view import verify_lines
from diagnose.vocabulary.markers import ONE_STEP, SESSION_CUT, STEP_RANGE_HOWS

SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "cyan"}
MAX_FINDINGS = 4


def device_line(device: Device) -> str:
    """ "NVIDIA H200 · 132 SMs · 140 GiB · torch 2.11 · CUDA 13.0", leaving out what is unknown."""
    parts = [device.name or "unknown device"]
    if device.sm_count:
        parts.append(f"{device.sm_count} SMs")
    if device.memory_bytes:
        parts.append(f"{device.memory_bytes / 2**30:.0f} GiB")
    if device.torch:
        parts.append(f"torch {device.torch}")
    if device.cuda:
        parts.append(f"CUDA {device.cuda}")
    return " · ".join(str(p) for p in parts)


def render_text(
    diagnosis: Diagnosis, *, outputs: dict[str, str] | None = None, width: int | None = None, color: bool = False, **_
) -> str:
    """The one-screen summary as text: `width` columns (None: no wrapping), ANSI colours with `color`."""
    console, buffer = string_console(width, color)
    print_summary(diagnosis, console, outputs)
    text = buffer.getvalue()
    return text if width else "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def print_summary(diagnosis: Diagnosis, console: Console, outputs: dict[str, str] | None = None) -> None:
    """Print the one-screen summary of `diagnosis` to `console`."""
    d = diagnosis
    console.print(f"[bold]diagnose[/] · {safe(d.target)}")
    console.print(f"  {safe(device_line(d.device))}")
    style = "bold red" if d.workload_failed else "bold"
    console.print(f"\n[{style}]Verdict:[/] {safe(d.verdict)}")
    s = d.summary
    if s.step_time_us is not None:
        basis = s.step_basis
        synced = d.capture.set_aside_us(basis)
        if synced:
            basis = f"profiled; {fmt(synced)} µs timed with a sync after each step"
        elif basis == "estimated unprofiled":
            basis = f"estimated unprofiled; {fmt(s.profiled_step_time_us or 0)} µs profiled"
            if s.python_tracing_us_per_step is not None:
                basis += f", {fmt(s.python_tracing_us_per_step)} µs of it with_stack's Python tracing"
            if s.uncertain_text():
                basis += f"; {s.uncertain_text()}"
        console.print(
            f"  step {fmt(s.step_time_us)} µs ({basis}) · GPU busy {percent(s.gpu_busy_fraction or 0)} · "
            f"{fmt(s.gpu_ops_per_step or 0)} GPU ops/step · host wait {percent(s.host_wait_share or 0)} · "
            f"{plural(s.steps_analysed or 0, 'step')}"
        )
    found_by = s.steps_found_by or ""
    if s.cold_start_us or not found_by.startswith(STEP_RANGE_HOWS) or SESSION_CUT in found_by or ONE_STEP in found_by:
        console.print(f"  steps: {safe(found_by)}")
    accounting = _accounting_line(s)
    if accounting:
        console.print(f"  where the step goes: {safe(accounting)}")
    note = _capture_note(d.capture)
    if note:
        console.print(f"  [dim]{safe(note)}[/]")
    for index, f in enumerate(d.findings[:MAX_FINDINGS], 1):
        gain = f" · est. {fmt(f.est_speedup)}×" if f.est_speedup else ""
        console.print(
            f"\n {index}. [{SEVERITY_STYLE.get(f.severity, 'bold')}]{f.severity.upper()}[/] "
            f"[bold]{f.rule}[/]{gain}: {safe(f.title)}"
        )
        console.print("    evidence: " + safe(" · ".join(e.text() for e in f.evidence[:3])))
        if f.range_text():
            console.print(f"    [yellow]{safe(f.range_text())}[/]")
        if f.fixes:
            fixes = f.fix_phrase() if f.fixes[0].prerequisite else ", ".join(x.id for x in f.fixes)
            console.print(f"    fix: [green]{safe(fixes)}[/] ({safe(f.fixes[0].title)})")
            api = next((x for x in f.fixes if x.api), None)
            if api is not None:  # written in the framework's API: its first line of code says what to change
                line = next((ln for ln in api.code.splitlines() if ln.strip() and not ln.startswith("#")), "")
                console.print(f"    in {safe(api.api)}: [green]{safe(line.strip())}[/]")
        for line in verify_lines(f):  # --verify
            console.print(f"    verify: {safe(line)}")
        if f.offenders:
            console.print(
                f"    top offender: {safe(f.offenders[0].name)}"
                + (f" (+{len(f.offenders) - 1} more)" if len(f.offenders) > 1 else "")
            )
    if len(d.findings) > MAX_FINDINGS:
        console.print(f"\n  … {plural(len(d.findings) - MAX_FINDINGS, 'more finding')} in the report")
    if d.checked or d.skipped:
        table = Table(show_header=False, box=None, padding=(0, 1))
        for c in d.checked:
            said = f" [yellow]({safe(c.range_text())})[/]" if c.range_text() else ""
            table.add_row("[green]quiet[/]", c.rule, safe(c.detail) + said)
        for sk in d.skipped:
            table.add_row("[dim]skipped[/]", f"[dim]{sk.rule}[/]", f"[dim]{safe(sk.reason)}[/]")
        console.print()
        console.print(table)
    for w in d.warnings[:3]:
        console.print(f"[yellow]warning:[/] {safe(w)}")
    if outputs:
        console.print("\n" + " · ".join(f"{k}: {safe(v)}" for k, v in outputs.items()))


def _accounting_line(summary: Summary) -> str:
    """The step accounting's largest buckets in one line ("GPU compute 12 % · launch 80 % · ...")."""
    buckets = summary.accounting.buckets if summary.accounting else []
    parts = [b for b in buckets if b.share and b.in_sum]
    parts.sort(key=lambda b: b.share, reverse=True)
    return " · ".join(f"{b.label or b.id} {percent(b.share)}" for b in parts[:5] if b.share >= 0.005)


def _capture_note(capture: Capture) -> str:
    """Script mode stops the script after its warm-up and profiled steps: say so."""
    steps = capture.steps
    if capture.mode == "script" and steps and steps.stopped_early:
        return (
            f"the script was stopped after {plural(steps.warmup or 0, 'warm-up step')} and "
            f"{plural(steps.profiled or 0, 'profiled step')} (--warmup, --steps)"
        )
    return ""


RENDERER = Renderer("text", "the one-screen terminal summary", render_text, order=0, render_diff=render_diff_text)
