"""`diagnose diff BEFORE AFTER`: compare two runs (the work is diagnose/front/diff_command.py's)."""

from __future__ import annotations

import argparse
from pathlib import Path

from diagnose.commands import common

DESCRIPTION = """\
Compare two runs: did AFTER get slower or faster than BEFORE, by how much (with a 95 % interval
from the per-step times), and why (the change split over the step-accounting buckets, then over
kernels matched by family and ops matched by name and input shapes). Each side is a trace, a
capture folder or a sweep folder.
"""

EPILOG = """\
exit codes:
  0  diff written
  1  --fail-on-regression PCT: AFTER is slower by more than PCT % and the interval excludes 0
  2  bad usage, unreadable input, or what the system refused (one line on stderr)
"""


class DiffCommand(common.Command):
    """`diagnose diff BEFORE AFTER [options]`: faster or slower, and why."""

    name = "diff"
    order = 40
    usage = "diagnose diff BEFORE AFTER [--format text|json|md|html] [-o DIR] [--fail-on-regression PCT]"
    summary = "  diagnose diff A B       compare two runs (traces or folders): faster or slower, and why\n"
    description = DESCRIPTION
    epilog = EPILOG

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """BEFORE, AFTER and the diff's options."""
        from diagnose import report

        p.add_argument("before", metavar="BEFORE", help="trace, capture folder or sweep folder")
        p.add_argument("after", metavar="AFTER", help="trace, capture folder or sweep folder")
        p.add_argument("-o", "--out", type=Path, help="write diff.json and diff.html into this folder")
        p.add_argument(
            "--format",
            choices=common.Lazily(report.diff_renderers),
            metavar="FORMAT",
            help="what to print on stdout: %(choices)s (default: text)",
        )
        p.add_argument("--json", action="store_true", help="the same as --format json")
        common.add_gate_option(p)
        p.add_argument("--set", action="append", default=[], metavar="RULE.NAME=VALUE", help="override a threshold")
        p.add_argument("--max-trace-bytes", type=int, metavar="N", help="refuse traces that inflate past N bytes")
        p.add_argument("-q", "--quiet", action="store_true", help="no summary, only the output paths")

    def run(self, args: argparse.Namespace) -> int:
        """Analyse both sides once, compare, print, write, gate."""
        from diagnose.trace.source import check_present

        for side in (args.before, args.after):  # before the analysis imports pandas: a wrong path answers at once
            check_present(Path(side))
        from diagnose.front.diff_command import run_diff

        return run_diff(args, common.load_config(args.set, None))


COMMAND = DiffCommand
