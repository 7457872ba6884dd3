"""What to capture: a plain, JSON-serialisable description handed from the parent to the child."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

CAPTURE_SCHEMA = "diagnose.capture/1"


@dataclasses.dataclass
class CaptureSpec:
    """One capture request.

    `mode` is "function" (`file.py:NAME`, NAME(**params) returns a zero-argument step callable),
    "script" (`file.py`, run as __main__ with `argv`) or "module" (`path` names a module, run as
    `python -m path` with `argv`).
    """

    path: str
    mode: str
    out_dir: str
    function: str | None = None
    params: dict = dataclasses.field(default_factory=dict)
    argv: list = dataclasses.field(default_factory=list)
    warmup: int = 3
    steps: int = 5
    timed_steps: int = 20
    record_shapes: bool = True
    profile_memory: bool = True

    @property
    def target(self) -> str:
        """The target as the user spelled it."""
        return f"{self.path}:{self.function}" if self.function else self.path

    def to_json(self) -> str:
        """Serialise for the child process."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "CaptureSpec":
        """Inverse of `to_json`."""
        return cls(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class CaptureOptions:
    """How a workload is run, whatever the target: parsed once from the command line (or from
    diagnose.profile's arguments); `spec` makes the CaptureSpec of one target from it."""

    params: dict = dataclasses.field(default_factory=dict)
    argv: list = dataclasses.field(default_factory=list)
    warmup: int = 3
    steps: int = 5
    timed_steps: int = 20
    timeout_s: float = 900.0
    python: str | None = None

    def spec(self, path: str, mode: str, function: str | None, out_dir: str) -> CaptureSpec:
        """The capture request for the workload at `path` (`mode` as CaptureSpec's), written into `out_dir`."""
        return CaptureSpec(
            path=path,
            mode=mode,
            out_dir=out_dir,
            function=function,
            params=dict(self.params),
            argv=list(self.argv),
            warmup=self.warmup,
            steps=self.steps,
            timed_steps=self.timed_steps,
        )


def parse_params(pairs: list[str]) -> dict:
    """Parse `key=value` strings; values that read as int, float or bool become those types."""
    params = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--param expects key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        params[key.strip()] = parse_scalar(raw.strip())
    return params


def parse_scalar(raw: str):
    """'3' -> 3, '0.5' -> 0.5, 'true' -> True, anything else stays a string."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


def read_meta(folder: Path) -> dict:
    """Read a capture folder's meta.json (empty dict when absent)."""
    path = Path(folder) / "meta.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())
