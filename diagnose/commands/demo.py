"""`diagnose demo`: the built-in default, the bundled decode workload (its H200 capture without a GPU)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from diagnose.commands import common
from diagnose.commands.run import Run, RunOptions
from diagnose.base.format import plain


class DemoCommand(common.Command):
    """`diagnose demo [options]`: a run of the bundled workload, or an analysis of its bundled capture."""

    name = "demo"
    order = 20
    usage = "diagnose demo [options]"
    summary = (
        "  diagnose demo           the built-in default: the bundled decode workload (its H200 capture without a GPU)\n"
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """A run's options, less the target, --verify, --baseline and torchrun's."""
        common.add_output_options(p)
        common.add_capture_options(p)
        common.add_trace_options(p)
        common.add_display_options(p)

    def run(self, args: argparse.Namespace) -> int:
        """Capture the bundled workload where there is a CUDA GPU, else analyse its bundled H200 capture."""
        from diagnose.front import bundled
        from diagnose.capture.probe import cuda_available

        options = RunOptions.of(args)
        config = common.load_config(options.set, options.fail_on)
        err = common.stderr_console()
        if cuda_available(options.python):
            return Run(dataclasses.replace(options, target=bundled.demo_workload()), config, err).execute()
        capture = bundled.demo_capture()
        if options.output_format == "text" and not options.quiet:
            print(
                "No CUDA GPU here: analysing the bundled real NVIDIA H200 capture of the same "
                f"workload ({plain(capture)}).",
                file=sys.stderr,
            )
        options = dataclasses.replace(options, target=str(capture), out=options.out or Path("diagnose-out") / "demo")
        return Run(options, config, err).execute()


COMMAND = DemoCommand
