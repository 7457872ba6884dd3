"""Thresholds in force: rule defaults, overridden by pyproject.toml, overridden by --set.

Every override is checked against the threshold it names before any rule runs: an unknown key
gets a did-you-mean, a value outside the threshold's kind (a fraction above 1, a NaN, a fractional
token count) is a usage error naming the threshold and its range.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from pathlib import Path
from typing import Callable

from diagnose.base.errors import InputError, UsageError
from diagnose.model.findings import SEVERITIES
from diagnose.trace import schemas

PYPROJECT_MAX_BYTES = 4 << 20  # far more than any project's pyproject.toml
MAX_NESTING = 4  # [tool.diagnose.thresholds.RULE] NAME = value is two; rule ids do not nest further


TOOL_KEYS = ("fail-on", "thresholds")  # what [tool.diagnose] may hold


@dataclasses.dataclass
class Config:
    """Threshold overrides keyed "rule-id.name" (or "timeline.name"), and the CI fail level."""

    overrides: dict[str, float] = dataclasses.field(default_factory=dict)
    fail_on: str | None = None
    source: str = "defaults"

    def threshold(self, rule_id: str, threshold) -> float:
        """The value in force for one threshold of one rule."""
        return self.overrides.get(f"{rule_id}.{threshold.name}", threshold.default)

    def section(self, prefix: str) -> dict[str, float]:
        """Overrides under `prefix.` as a plain dict (e.g. the timeline parameters)."""
        return {k.split(".", 1)[1]: v for k, v in self.overrides.items() if k.startswith(prefix + ".")}


def load_config(
    set_args: list[str] | None = None,
    fail_on: str | None = None,
    start: Path | None = None,
    known: dict | Callable[[], dict] | None = None,
) -> Config:
    """Build the Config from the nearest pyproject.toml's [tool.diagnose] and --set KEY=VALUE.

    `known` maps every overridable key to its Threshold (engine.known_thresholds), or makes that map
    when called (only where there is an override to check: the rules import pandas); each override
    must name one of them and hold a value of its kind."""
    overrides, source, file_fail_on = {}, "defaults", None
    pyproject = _find_pyproject(start or Path.cwd())
    if pyproject is not None:
        table = _read_tool_table(pyproject)
        if table:
            source = str(pyproject)
            _check_keys(table, pyproject)
            file_fail_on = table.get("fail-on")
            if file_fail_on is not None and file_fail_on not in SEVERITIES:
                raise UsageError(
                    f"{pyproject}: [tool.diagnose] fail-on must be one of {', '.join(SEVERITIES)}, got {file_fail_on!r}"
                )
            thresholds = table.get("thresholds", {})
            if not isinstance(thresholds, dict):
                raise UsageError(
                    f"{pyproject}: [tool.diagnose] thresholds must be a table of "
                    f'"rule.name" = number, got {type(thresholds).__name__}'
                )
            for key, value in _flatten(thresholds, where=pyproject).items():
                overrides[key] = _number(key, value, str(pyproject))
    set_keys = set()
    for item in set_args or []:
        if "=" not in item:
            raise UsageError(f"--set expects RULE.NAME=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        overrides[key.strip()] = _number(key.strip(), raw.strip(), "--set")
        set_keys.add(key.strip())
    table = (known() if callable(known) else known or {}) if overrides else {}
    for key, value in overrides.items():
        _check(key, value, table, "--set" if key in set_keys else f"{pyproject}: [tool.diagnose.thresholds]")
    level = fail_on or file_fail_on
    if level is not None and level not in SEVERITIES:
        raise UsageError(f"--fail-on must be one of {', '.join(SEVERITIES)}, got {level!r}")
    return Config(overrides=overrides, fail_on=level, source=source)


def _check(key: str, value: float, known: dict, where: str = "--set") -> None:
    prefix = "" if where == "--set" else f"{where}: "
    if key not in known:
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "`diagnose rules` lists them"
        raise UsageError(f"{prefix}unknown threshold {key!r}; {hint}")
    problem = known[key].problem(value)
    if problem:
        raise UsageError(f"{prefix}threshold {key} {problem}")


def _check_keys(table: dict, pyproject: Path) -> None:
    """A usage error naming the file and the nearest key for a key [tool.diagnose] does not have (a
    misspelt `fail-on` would otherwise leave a CI gate that never trips)."""
    for key in table:
        if key in TOOL_KEYS:
            continue
        close = difflib.get_close_matches(str(key), TOOL_KEYS, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"it has {' and '.join(repr(k) for k in TOOL_KEYS)}"
        raise UsageError(f"{pyproject}: unknown key {key!r} in [tool.diagnose]; {hint}")


def _find_pyproject(start: Path) -> Path | None:
    for folder in [start.resolve(), *start.resolve().parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_tool_table(path: Path) -> dict:
    try:
        raw = schemas.read_side_bytes(path, "a pyproject.toml", PYPROJECT_MAX_BYTES)
        data = tomllib.loads(raw.decode("utf-8"))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    except RecursionError:
        raise UsageError(f"{path}: cannot read [tool.diagnose] (nested too deeply)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read [tool.diagnose] ({exc})") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise UsageError(f"{path}: `tool` must be a table, got {type(tool).__name__}")
    table = tool.get("diagnose", {}) or {}
    if not isinstance(table, dict):
        raise UsageError(
            f"{path}: [tool.diagnose] must be a table, got {type(table).__name__} "
            "(write [tool.diagnose], not [[tool.diagnose]])"
        )
    return table


def _flatten(table: dict, prefix: str = "", where: Path | None = None, depth: int = 1) -> dict:
    """Nested tables of thresholds as {"rule.name": value}; at most MAX_NESTING tables deep."""
    if depth > MAX_NESTING:
        raise UsageError(
            f"{where}: [tool.diagnose] thresholds nest more than {MAX_NESTING} tables deep "
            f'(at {prefix!r}); write "rule.name" = number'
        )
    flat = {}
    for key, value in table.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            flat.update(_flatten(value, full, where, depth + 1))
        else:
            flat[full] = value
    return flat


def _number(key: str, value, where: str) -> float:
    if isinstance(value, bool):
        raise UsageError(f"{where}: threshold {key} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{where}: threshold {key} must be a number, got {value!r}") from None
