"""The terminal summary: the verdict, the headline numbers and the top findings, on one screen."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from diagnose.findings import Diagnosis, fmt

SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "cyan"}
MAX_FINDINGS = 4


def device_line(device: dict) -> str:
    """"NVIDIA H200 · 132 SMs · 140 GiB · torch 2.11 · CUDA 13.0", leaving out what is unknown."""
    parts = [device.get("name") or "unknown device"]
    if device.get("sm_count"):
        parts.append(f"{device['sm_count']} SMs")
    if device.get("memory_bytes"):
        parts.append(f"{device['memory_bytes'] / 2**30:.0f} GiB")
    if device.get("torch"):
        parts.append(f"torch {device['torch']}")
    if device.get("cuda"):
        parts.append(f"CUDA {device['cuda']}")
    return " · ".join(parts)


def print_summary(diagnosis: Diagnosis, console: Console, outputs: dict[str, str] | None = None) -> None:
    """Print the one-screen summary of `diagnosis` to `console`."""
    d = diagnosis
    console.print(f"[bold]diagnose[/] · {escape(d.target)}")
    console.print(f"  {escape(device_line(d.device))}")
    style = "bold red" if d.workload_failed else "bold"
    console.print(f"\n[{style}]Verdict:[/] {escape(d.verdict)}")
    s = d.summary
    if s.get("step_time_us") is not None:
        basis = "unprofiled" if s.get("unprofiled_step_time_us") else "profiled"
        console.print(
            f"  step {fmt(s['step_time_us'])} µs ({basis}) · GPU busy {s.get('gpu_busy_fraction', 0):.0%} · "
            f"{fmt(s.get('gpu_ops_per_step', 0))} GPU ops/step · host wait {s.get('host_wait_share', 0):.0%} · "
            f"{s.get('steps_analysed', 0)} steps")
    for finding_index, f in enumerate(d.findings[:MAX_FINDINGS], 1):
        gain = f" · est. {fmt(f.est_speedup)}×" if f.est_speedup else ""
        console.print(f"\n {finding_index}. [{SEVERITY_STYLE[f.severity]}]{f.severity.upper()}[/] "
                      f"[bold]{f.rule}[/]{gain}: {escape(f.title)}")
        console.print("    evidence: " + escape(" · ".join(e.text() for e in f.evidence[:3])))
        if f.fixes:
            fixes = ", ".join(x.id for x in f.fixes)
            console.print(f"    fix: [green]{escape(fixes)}[/] ({escape(f.fixes[0].title)})", overflow="fold")
        if f.offenders:
            first = f.offenders[0]
            label = first.get("op") or first.get("kernel") or first.get("name") or next(iter(first.values()))
            console.print(f"    top offender: {escape(str(label))}" + (
                f" (+{len(f.offenders) - 1} more)" if len(f.offenders) > 1 else ""))
    if len(d.findings) > MAX_FINDINGS:
        console.print(f"\n  … {len(d.findings) - MAX_FINDINGS} more findings in the report")
    if d.checked or d.skipped:
        table = Table(show_header=False, box=None, padding=(0, 1))
        for c in d.checked:
            table.add_row("[green]quiet[/]", c.rule, escape(c.detail))
        for sk in d.skipped:
            table.add_row("[dim]skipped[/]", f"[dim]{sk.rule}[/]", f"[dim]{escape(sk.reason)}[/]")
        console.print()
        console.print(table)
    for w in d.warnings[:3]:
        console.print(f"[yellow]warning:[/] {escape(w)}")
    if outputs:
        console.print("\n" + " · ".join(f"{k}: {escape(v)}" for k, v in outputs.items()))

