"""meta.json and verify.json as the child processes write them: the keys they set and their types.

The reading side checks meta.json against msgspec Structs (diagnose/trace/schemas.py), since a
capture folder may come from anywhere; these TypedDicts only type the dicts the children build.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class StepsRecord(TypedDict):
    """meta.json `steps`: warm-up steps asked for, profiled steps recorded, how steps were found."""

    warmup: int
    profiled: int
    how: str | None
    stopped_early: NotRequired[bool]


class FilesRecord(TypedDict):
    """meta.json `files`: names of the folder's other files (None: not written)."""

    trace: str | None
    log: str
    pysamples: NotRequired[str]
    memory: NotRequired[str]
    arrivals: NotRequired[str]
    compile: NotRequired[str]


class ErrorRecord(TypedDict):
    """meta.json `error`: what stopped the workload."""

    type: str
    message: str
    traceback: str


class MetaRecord(TypedDict):
    """meta.json: what ran, how it ended, and what the folder holds."""

    schema: str
    target: str
    mode: str
    params: dict[str, Any]  # the workload's own keyword arguments, JSON scalars
    argv: list[str]
    status: str
    error: ErrorRecord | None
    recorded_at: str
    steps: StepsRecord
    timing: dict[str, Any] | None  # diagnose/base/step_timing.py's timing_summary
    files: FilesRecord
    trace_cut_short: NotRequired[bool]
    warnings: NotRequired[list[str]]
    device: NotRequired[dict[str, Any]]  # child.device_info
    workload: NotRequired[dict[str, Any]]  # model_census.census
    memory: NotRequired[dict[str, int] | None]  # child.memory_summary
    verify: NotRequired[dict[str, str]]


class VerifyRecord(TypedDict):
    """verify.json (diagnose/capture/verify.py): what one fix did, phase by phase."""

    schema: str
    variant: str
    status: str
    phase: str
    error: dict[str, str] | None
    baseline_us: list[float]
    fixed_us: list[float]
    numerics: dict[str, Any] | None  # diagnose/capture/compare.py's compare
    notes: list[str]
