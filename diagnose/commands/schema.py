"""`diagnose schema [FILE ...]`: the JSON Schema of findings.json; with files, each checked against it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from diagnose.commands import common
from diagnose.front.stdout import print_out
from diagnose.base.errors import EXIT_OK
from diagnose.base.format import plain


class SchemaCommand(common.Command):
    """`diagnose schema [FINDINGS.json ...]`."""

    name = "schema"
    order = 50
    usage = "diagnose schema [FINDINGS.json ...]"
    summary = "  diagnose schema [FILE]  the JSON Schema of findings.json; with files, check them against it\n"
    description = (
        "Print the JSON Schema of findings.json (diagnose.model.findings/1); with files, check each "
        "against it instead (exit 0 when all fit, 2 naming the first field that does not)."
    )

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """The files to check."""
        p.add_argument("files", nargs="*", type=Path, metavar="FINDINGS.json", help="findings.json files to check")

    def run(self, args: argparse.Namespace) -> int:
        """Print the schema, or check each file (InputError, exit 2, naming the file and the field)."""
        from diagnose.model.findings import SCHEMA, check_findings_file, findings_schema

        if not args.files:
            print_out(json.dumps(findings_schema(), indent=2))
            return EXIT_OK
        for path in args.files:
            check_findings_file(path)
            print_out(f"{plain(path)}: fits {SCHEMA}")
        return EXIT_OK


COMMAND = SchemaCommand
