"""`diagnose rules [RULE]`: the rules, their inputs and thresholds; one rule's documentation."""

from __future__ import annotations

import argparse
import io
import sys

from diagnose.commands import common
from diagnose.front.stdout import print_out
from diagnose.base.errors import EXIT_OK


class RulesCommand(common.Command):
    """`diagnose rules [RULE] [--format text|json|md]`."""

    name = "rules"
    order = 30
    usage = "diagnose rules [RULE] [--format text|json|md]"
    summary = "  diagnose rules [RULE]   the rules, their inputs and thresholds (--format json|md); one rule's docs\n"

    def add_arguments(self, p: argparse.ArgumentParser) -> None:
        """RULE, and --format."""
        from diagnose.ruleset.rules_table import FORMATS

        p.add_argument("rule", nargs="?", help="one rule, with its documentation")
        p.add_argument("--format", choices=FORMATS, default="text", help="text (default), json or md")

    def run(self, args: argparse.Namespace) -> int:
        """Print the rules table, or one rule's documentation, in the chosen format."""
        from diagnose.ruleset import rules_table

        rule = rules_table.find_rule(args.rule) if args.rule else None
        if args.format == "json":
            print_out(rules_table.rules_json(rule))
        elif args.format == "md":
            print_out(rules_table.rules_markdown(rule).rstrip("\n"))
        else:
            from rich.console import Console

            tty = sys.stdout.isatty()
            shown = io.StringIO()  # rendered first, then printed as one text: stdout's refusals are print_out's
            width = common.terminal_width() if tty else rules_table.PIPED_WIDTH
            console = Console(file=shown, highlight=False, width=width, force_terminal=tty)
            if rule is None:
                rules_table.print_rules(console)
            else:
                rules_table.print_rule(console, rule)
            print_out(shown.getvalue().rstrip("\n"))
        return EXIT_OK


COMMAND = RulesCommand
