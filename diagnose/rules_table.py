"""`diagnose rules`: the rules with their cheat-sheet rows and thresholds, and the timeline's parameters."""
from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from diagnose.format import fmt
from diagnose.metrics.timeline import PARAMETERS
from diagnose.rules import ALL_RULES

PIPED_WIDTH = 200  # piped, the table is laid out this wide rather than folding names at 80 columns
KIND_TEXT = {"fraction": "0–1", "count": "whole ≥ 1", "number": "≥ 0"}


def threshold_line(th) -> str:
    """"min_share = 0.5 fraction (0–1)": one threshold with its default, unit and accepted range."""
    return escape(f"{th.name} = {fmt(th.default)} {th.unit} ({KIND_TEXT[th.value_kind]})".replace("  ", " "))


def print_rules(console: Console) -> None:
    """Print every rule (id, what it diagnoses, its fix, its inputs and thresholds), then the timeline parameters."""
    table = Table(title="diagnose rules", show_lines=True)
    for column in ("rule", "bottleneck → fix", "needs", "thresholds (--set RULE.NAME=VALUE)"):
        table.add_column(column, overflow="fold")
    for rule in ALL_RULES:
        sheet = rule.cheat_sheet
        thresholds = "\n".join(threshold_line(t) for t in rule.thresholds)
        table.add_row(rule.id, escape(f"{sheet['bottleneck']}\n→ {sheet['fix']}"), ", ".join(rule.needs), thresholds)
    table.add_row("timeline", "how idle gaps are classified (docs/how-it-works.md)", "",
                  "\n".join(threshold_line(t) for t in PARAMETERS))
    console.print(table)
