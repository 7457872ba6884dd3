"""`diagnose rules [RULE] [--format text|json|md]`: the rules with their cheat-sheet rows and thresholds,
and the timeline's parameters; one rule with its documentation."""

from __future__ import annotations

import difflib
import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from diagnose.base.errors import UsageError
from diagnose.vocabulary.units import fmt
from diagnose.metrics.timeline import PARAMETERS
from diagnose.rules import ALL_RULES

PIPED_WIDTH = 200  # piped, the table is laid out this wide rather than folding names at 80 columns
KIND_TEXT = {"fraction": "0–1", "count": "whole ≥ 1", "number": "≥ 0"}


def threshold_line(th) -> str:
    """ "min_share = 0.5 fraction (0–1)": one threshold with its default, unit and accepted range."""
    return escape(f"{th.name} = {fmt(th.default)} {th.unit} ({KIND_TEXT[th.value_kind]})".replace("  ", " "))


def print_rules(console: Console) -> None:
    """Print every rule (id, what it diagnoses, its fix, its inputs and thresholds), then the timeline parameters."""
    table = Table(title="diagnose rules", show_lines=True)
    # names (rule ids, inputs, threshold names) are never broken across lines, even at 80 columns:
    # three columns, each at least as wide as its longest name, fit there
    table.add_column("rule", no_wrap=True, min_width=max(len(r.id) for r in ALL_RULES))
    table.add_column("bottleneck → fix (needs)", ratio=1, overflow="fold")
    table.add_column(
        "thresholds (--set RULE.NAME=VALUE)",
        ratio=1,
        min_width=max(len(t.name) for r in ALL_RULES for t in (*r.thresholds, *PARAMETERS)),
    )
    for rule in ALL_RULES:
        sheet = rule.cheat_sheet
        thresholds = "\n".join(threshold_line(t) for t in rule.thresholds)
        needs = f"\n(needs {rule.needs_text()})" if rule.needs else ""
        table.add_row(rule.id, escape(f"{sheet['bottleneck']}\n→ {sheet['fix']}{needs}"), thresholds)
    table.add_row(
        "timeline",
        "how idle gaps are classified (docs/how-it-works.md)",
        "\n".join(threshold_line(t) for t in PARAMETERS),
    )
    console.print(table)


FORMATS = ("text", "json", "md")


def find_rule(name: str):
    """The rule with this id; a usage error naming the nearest id otherwise."""
    for rule in ALL_RULES:
        if rule.id == name:
            return rule
    ids = [r.id for r in ALL_RULES]
    close = difflib.get_close_matches(name, ids, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}?" if close else f"the rules are {', '.join(ids)}"
    raise UsageError(f"no rule {name!r}; {hint}")


def rule_data(rule) -> dict:
    """One rule as plain data (`diagnose rules --format json`)."""
    sheet = rule.cheat_sheet
    return {
        "id": rule.id,
        "title": rule.title,
        "bottleneck": sheet.get("bottleneck", ""),
        "signal": sheet.get("signal", ""),
        "fix": sheet.get("fix", ""),
        "impact": sheet.get("impact", ""),
        "needs": list(rule.needs),
        "thresholds": [_threshold_data(t) for t in rule.thresholds],
    }


def _threshold_data(t) -> dict:
    return {"name": t.name, "default": t.default, "unit": t.unit, "kind": t.value_kind, "doc": t.doc}


def rules_json(rule=None) -> str:
    """Every rule (and the timeline parameters), or one rule, as JSON."""
    if rule is not None:
        return json.dumps({**rule_data(rule), "doc": rule.doc()}, indent=2)
    return json.dumps(
        {"rules": [rule_data(r) for r in ALL_RULES], "timeline": [_threshold_data(t) for t in PARAMETERS]}, indent=2
    )


def rules_markdown(rule=None) -> str:
    """Every rule as a Markdown table, or one rule's page (its documentation and thresholds)."""

    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    if rule is not None:
        lines = [
            f"## {rule.id}: {cell(rule.title)}",
            "",
            rule.doc(),
            "",
            "| threshold | default | unit | meaning |",
            "| --- | --- | --- | --- |",
        ]
        lines += [f"| `{t.name}` | {fmt(t.default)} | {cell(t.unit)} | {cell(t.doc)} |" for t in rule.thresholds]
        return "\n".join(lines) + "\n"
    lines = ["| rule | bottleneck | fix | needs | thresholds |", "| --- | --- | --- | --- | --- |"]
    for r in ALL_RULES:
        sheet = r.cheat_sheet
        th = "<br>".join(f"`{t.name}` = {fmt(t.default)} {cell(t.unit)}" for t in r.thresholds)
        lines.append(
            f"| `{r.id}` | {cell(sheet.get('bottleneck', ''))} | {cell(sheet.get('fix', ''))} | "
            f"{r.needs_text()} | {th} |"
        )
    return "\n".join(lines) + "\n"


def print_rule(console: Console, rule) -> None:
    """One rule: what it diagnoses, its fix, its inputs, thresholds and documentation."""
    sheet = rule.cheat_sheet
    console.print(f"[bold]{escape(rule.id)}[/]: {escape(rule.title)}")
    console.print(escape(f"  {sheet.get('bottleneck', '')} → {sheet.get('fix', '')}"))
    if rule.needs:
        console.print(escape(f"  needs: {rule.needs_text()}"))
    for t in rule.thresholds:
        console.print(f"  --set {escape(rule.id)}.{threshold_line(t)}: {escape(t.doc)}")
    console.print()
    console.print(escape(rule.doc()))
