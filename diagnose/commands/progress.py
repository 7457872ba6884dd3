"""The progress line on stderr: phase reports of the capture child, or of the trace loader, shown
with rich (nothing when quiet or when stderr is no terminal)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TaskID, TextColumn

from diagnose.report.richtext import safe


class CountedBar(BarColumn):
    """A progress bar only where the phase has a known total (no empty bar for "0/?")."""

    def render(self, task):
        """The bar, or nothing for a phase without a total."""
        return super().render(task) if task.total else ""


class CountedOf(MofNCompleteColumn):
    """ "3/5" only where the phase has a known total; nothing rather than "0/?"."""

    def render(self, task):
        """ "done/total", or nothing for a phase without a total."""
        return super().render(task) if task.total else ""


class ProgressLine:
    """A rich progress line fed by phase reports: the capture child's, or the trace loader's (silent when quiet).

    A phase with a known total shows a bar and "done/total"; one without shows only a spinner."""

    LABELS = {
        "build": "building the workload",
        "warmup": "warming up",
        "timing": "timing steps without the profiler",
        "profile": "profiling steps",
        "export": "writing the trace",
        "run": "running the script",
        "ncu-start": "Nsight Compute: starting the workload again",
        "ncu-build": "Nsight Compute: building the workload",
        "ncu-run": "Nsight Compute: running the script",
        "ncu-warmup": "Nsight Compute: warming up",
        "ncu-replay": "Nsight Compute: replaying one step's hot kernels (~0.5 s each)",
        "ncu-finish": "Nsight Compute: collecting the results",
        "decode": "reading the trace",
        "rules": "running the rules",
        "ranks": "ranks: capturing or analysing each rank",
    }

    def __init__(self, console: Console, quiet: bool, first: str = "starting the workload"):
        self.console, self.quiet, self.first = console, quiet, first
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def __enter__(self):
        if self.quiet or not self.console.is_terminal:
            return lambda event: None
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            CountedBar(),
            CountedOf(),
            console=self.console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task(self.first, total=None)
        return self.update

    def update(self, event: dict) -> None:
        """Show one phase report."""
        progress = self.progress
        if progress is None:
            return
        phase = str(event.get("phase", ""))
        label = self.LABELS.get(phase, phase)
        if event.get("phase") == "sweep":
            label = f"capturing sweep point {event.get('value')}"
        if event.get("phase") == "verify":
            label = f"verifying fixes: {event.get('variant')}"
        label = safe(label)  # what the workload reports is untrusted: no control characters, no rich markup
        total = _count(event.get("total")) or None
        task = progress.tasks[0] if progress.tasks else None
        task_id = self.task
        if task is None or task.description != label or task.total != total:
            # a new phase: a fresh line (rich keeps the old total when told None)
            if task_id is not None:
                progress.remove_task(task_id)
            task_id = self.task = progress.add_task(label, total=total)
        if total and task_id is not None:
            progress.update(task_id, completed=min(_count(event.get("done")), total - 1) + 1)

    def __exit__(self, *exc):
        if self.progress is not None:
            self.progress.stop()
        return False


def _count(value) -> int:
    """A step count from a workload's report: a whole number ≥ 0 (anything else, a string holding
    escape sequences, NaN, a bool, a number too large, counts as 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    if value != value or not 0 <= value < 1e12:
        return 0
    return int(value)
