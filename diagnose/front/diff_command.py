"""`diagnose diff BEFORE AFTER` and `diagnose ... --baseline FOLDER`: the front end of diagnose/diff
(the subcommand's arguments are diagnose/commands/diff.py's).

Each side (a trace, a capture folder or a sweep folder) is analysed once by pipeline.analyse; the
two Diagnoses make a DiffReport (diagnose/diff), which the renderer chosen by `--format` prints;
with `-o DIR` every diff-writing renderer's file (diff.json, diff.html) is written there.
`--fail-on-regression PCT` makes the exit code 1 when AFTER is slower than BEFORE by more than
PCT % and the interval of the change excludes zero.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
from collections.abc import Sequence
from pathlib import Path

from diagnose import report

from diagnose.front import pipeline
from diagnose.diff import DiffReport, diff_diagnoses
from diagnose.base.errors import EXIT_FINDING, EXIT_OK, UsageError
from diagnose.model.findings import Diagnosis
from diagnose.front.output import OutputFolder
from diagnose.report.richtext import colour
from diagnose.base.safe_files import write_new
from diagnose.front.stdout import print_out
from diagnose.front.target import Target, as_target, resolve_target


def run_diff(args, config) -> int:
    """The `diff` subcommand: analyse both sides once, compare, print, write, gate."""
    texts = (args.before, args.after)
    targets = [resolve_target(text) for text in texts]
    for text, target in zip(texts, targets):
        if target.runs:
            raise UsageError(
                f"{text}: diff compares traces or folders diagnose wrote; capture a workload first "
                "(or use `diagnose model.py:NAME --baseline FOLDER`)"
            )
    # the output folder is checked before the work
    folder = OutputFolder(args.out, inputs=[t.path for t in targets]) if args.out is not None else None
    sides = analyse_both(targets, config, args.max_trace_bytes)
    result = diff_diagnoses(*sides, fail_on_regression=args.fail_on_regression, paths=(args.before, args.after))
    written = {}
    if folder is not None:
        with folder:
            written = {k: str(folder.public(v)) for k, v in write_diff(result, folder.path).items()}
    show(result, args, written)
    return exit_code(result)


CONCURRENT_MIN_BYTES = 32 << 20  # as the loader's own parallel decoding (diagnose/trace/parallel.py)


def analyse_both(paths: Sequence[Target | Path], config, max_bytes: int | None = None) -> list[Diagnosis]:
    """Analyse BEFORE and AFTER, each once. Large sides are analysed at the same time, BEFORE in a
    forked process: one analysis leaves a core idle while its rules run, so two together take less
    than twice one (small sides, where a fork costs more than it saves, go one after the other)."""
    big = all(_size(p) >= CONCURRENT_MIN_BYTES for p in paths)
    if not big or not sys.platform.startswith("linux"):
        return [pipeline.analyse(p, config, max_bytes=max_bytes) for p in paths]
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        before = pool.submit(pipeline.analyse, paths[0], config, max_bytes=max_bytes)
        after = pipeline.analyse(paths[1], config, max_bytes=max_bytes)
        return [before.result(), after]


def _size(target: Target | Path) -> int:
    """Bytes of a trace file, or of the largest trace file in a folder."""
    path = as_target(target).path
    if path.is_file():
        return path.stat().st_size
    return max((p.stat().st_size for p in path.rglob("trace.json*") if p.is_file()), default=0)


def check_baseline(baseline: Path | None) -> None:
    """A usage error unless `--baseline` names an existing trace or folder (checked before capturing)."""
    if baseline is not None and not Path(baseline).exists():
        raise UsageError(f"--baseline {baseline}: no such file or folder")


def compare_with_baseline(
    diagnosis: Diagnosis, baseline: Path, config, out: Path, fail_on_regression: float | None = None
) -> tuple[DiffReport, dict[str, str]]:
    """`--baseline FOLDER`: the run just analysed (AFTER) against FOLDER (BEFORE, analysed here);
    diff.json and diff.html are written into `out`. (report, {what: path})."""
    check_baseline(baseline)
    before = pipeline.analyse(Path(baseline), config)
    result = diff_diagnoses(before, diagnosis, fail_on_regression=fail_on_regression, paths=(str(baseline), str(out)))
    return result, write_diff(result, out)


def write_diff(result: DiffReport, out: Path) -> dict[str, str]:
    """Write every diff-writing renderer's file (diff.json, diff.html) into `out`; {what: path}."""
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for renderer in report.diff_file_renderers():
        name, render = renderer.diff_filename, renderer.render_diff
        if name is None or render is None:  # diff_file_renderers gives only renderers with both
            continue
        path = out / name
        write_new(path, render(result).encode("utf-8"))
        written[name.replace(".", " ")] = str(path)
    return written


def show(result: DiffReport, args, written: dict[str, str]) -> None:
    """Print the diff in the chosen format (the paths only, with -q and text)."""
    fmt_name = "json" if args.json else (args.format or "text")
    renderer = report.diff_renderers().get(fmt_name)
    render = renderer.render_diff if renderer is not None else None
    if render is None:
        raise UsageError(f"--format {fmt_name} has no diff view (known: {', '.join(report.diff_renderers())})")
    if args.quiet and fmt_name == "text":
        text = "\n".join(written.values())
    else:
        tty = sys.stdout.isatty()
        text = render(result, outputs=written, width=None, color=colour(tty)).rstrip("\n")
    print_out(text)


def exit_code(result: DiffReport) -> int:
    """1 when the regression gate tripped, else 0."""
    return EXIT_FINDING if result.gate_tripped else EXIT_OK
