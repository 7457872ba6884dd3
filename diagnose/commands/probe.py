"""`diagnose probe`: measure this machine's GPU beside the datasheet (the work is diagnose/front/probe_command.py's)."""

from __future__ import annotations

import argparse

from diagnose.commands import common


class ProbeCommand(common.Command):
    """`diagnose probe [--refresh] [--format text|json] [--python PYTHON]`."""

    name = "probe"
    order = 60
    usage = "diagnose probe [--refresh] [--format text|json] [--python PYTHON]"
    summary = ""  # not (yet) listed under "commands:" in `diagnose --help`
    description = (
        "Measure this machine's GPU (Triton copy/triad bandwidth, matmul TFLOP/s per precision) "
        "and print it beside the datasheet; cached per device, and carried by every capture made "
        "here (exit 0; 2 when no GPU is visible or the probe fails)."
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """--refresh, --format and --python."""
        p.add_argument("--refresh", action="store_true", help="measure again even when a cached record exists")
        p.add_argument("--format", choices=("text", "json"), default="text", help="text (default) or json")
        p.add_argument("--python", default=None, help="the Python (with torch) that runs the probe")

    def run(self, args: argparse.Namespace) -> int:
        """Probe the GPU in a child process and print what it measured."""
        from diagnose.front import probe_command

        return probe_command.run(args.refresh, args.format == "json", args.python)


COMMAND = ProbeCommand
