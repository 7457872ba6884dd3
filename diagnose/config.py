"""Thresholds in force: rule defaults, overridden by pyproject.toml, overridden by --set."""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from diagnose.errors import UsageError
from diagnose.findings import SEVERITIES


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


def known_keys() -> dict[str, float]:
    """Every overridable key with its default."""
    from diagnose.metrics import TIMELINE_DEFAULTS
    from diagnose.rules import ALL_RULES

    keys = {f"timeline.{k}": v for k, v in TIMELINE_DEFAULTS.items()}
    for rule in ALL_RULES:
        for th in rule.thresholds:
            keys[f"{rule.id}.{th.name}"] = th.default
    return keys


def load_config(set_args: list[str] | None = None, fail_on: str | None = None,
                start: Path | None = None) -> Config:
    """Build the Config from the nearest pyproject.toml's [tool.diagnose] and --set KEY=VALUE."""
    overrides, source, file_fail_on = {}, "defaults", None
    pyproject = _find_pyproject(start or Path.cwd())
    if pyproject is not None:
        table = _read_tool_table(pyproject)
        if table:
            source = str(pyproject)
            file_fail_on = table.get("fail-on")
            for key, value in _flatten(table.get("thresholds", {})).items():
                overrides[key] = _number(key, value, str(pyproject))
    for item in set_args or []:
        if "=" not in item:
            raise UsageError(f"--set expects RULE.NAME=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        overrides[key.strip()] = _number(key.strip(), raw.strip(), "--set")
    known = known_keys()
    for key in overrides:
        if key not in known:
            raise UsageError(f"unknown threshold {key!r}; `diagnose rules` lists them "
                             f"(e.g. {next(iter(known))})")
    level = fail_on or file_fail_on
    if level is not None and level not in SEVERITIES:
        raise UsageError(f"--fail-on must be one of {', '.join(SEVERITIES)}, got {level!r}")
    return Config(overrides=overrides, fail_on=level, source=source)


def _find_pyproject(start: Path) -> Path | None:
    for folder in [start.resolve(), *start.resolve().parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_tool_table(path: Path) -> dict:
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, OSError) as exc:
        raise UsageError(f"{path}: cannot read [tool.diagnose] ({exc})") from None
    return data.get("tool", {}).get("diagnose", {}) or {}


def _flatten(table: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in table.items():
        full = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            flat.update(_flatten(value, full))
        else:
            flat[full] = value
    return flat


def _number(key: str, value, where: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: threshold {key} must be a number, got {value!r}") from None
