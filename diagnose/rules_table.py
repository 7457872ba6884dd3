"""`diagnose rules`: the table of rules with their cheat-sheet rows and thresholds."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from diagnose.rules import ALL_RULES


def print_rules(console: Console) -> None:
    """Print every rule: id, what it diagnoses, its fix, its inputs and thresholds."""
    table = Table(title="diagnose rules", show_lines=True)
    for column in ("rule", "bottleneck → fix", "needs", "thresholds (--set RULE.NAME=VALUE)"):
        table.add_column(column, overflow="fold")
    for rule in ALL_RULES:
        sheet = rule.cheat_sheet
        thresholds = "\n".join(f"{t.name} = {t.default:g} {t.unit}".rstrip() for t in rule.thresholds)
        table.add_row(rule.id, f"{sheet['bottleneck']}\n→ {sheet['fix']}", ", ".join(rule.needs), thresholds)
    console.print(table)
