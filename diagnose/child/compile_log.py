"""torch.compile's own account of a capture: graph breaks, recompiles, CUDA-graph skips, compile time.

Dynamo and inductor report what they do through `torch._logging` artifact loggers (what
`TORCH_LOGS=graph_breaks,recompiles,cudagraphs` turns on) and `torch._dynamo.utils.counters`.
CompileLog attaches one handler to those artifact loggers (created by name, so nothing of
torch._dynamo is imported for a workload that never compiles; nothing is printed), notes the
capture phase each record falls in ("warmup", "timing", "profile", ...), and at the end writes
compile.json (schema diagnose.compile/1) into the capture folder, only when dynamo ran:

    events      one row per graph break / recompile / CUDA-graph skip: kind, phase, the user's
                file and line, dynamo's reason (first lines), the function recompiled
    counters    torch._dynamo.utils.counters, flattened ({group: {key: count}})
    phases      per phase, how many frames dynamo compiled and the compile seconds it spent
    compile_s   total seconds in dynamo's `_compile.compile_inner` (inductor included)

Everything is best effort: any failure leaves no compile.json and one warning (the caller puts
it in meta.json); a capture never breaks because of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
from diagnose.base.safe_files import write_new
from pathlib import Path

COMPILE_FILE = "compile.json"
SCHEMA = "diagnose.compile/1"
ARTIFACTS = {"graph_breaks": "graph_break", "recompiles": "recompile", "cudagraphs": "cudagraph_skip"}
# The modules that own the artifact loggers in torch 2.x; loggers found by suffix are added too.
KNOWN_LOGGERS = (
    "torch._dynamo.symbolic_convert.__graph_breaks",
    "torch._dynamo.guards.__recompiles",
    "torch._inductor.cudagraph_utils.__cudagraphs",
    "torch._inductor.scheduler.__cudagraphs",
)
MAX_EVENTS = 500
MAX_TEXT = 2000
_BREAK_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)")
_RECOMPILE = re.compile(r"Recompiling function (?P<fn>\S+) in (?P<file>.+?):(?P<line>\d+)")
_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_SKIP = re.compile(r"skipping cudagraphs due to (?P<reason>.*)", re.S)


class _Handler(logging.Handler):
    """Collects the records of the artifact loggers into CompileLog.events."""

    def __init__(self, owner: "CompileLog"):
        super().__init__(level=logging.DEBUG)
        self.owner = owner

    def emit(self, record: logging.LogRecord) -> None:
        """Parse one record; never raise into torch."""
        with contextlib.suppress(Exception):
            self.owner.add(record.name, record.getMessage())


class CompileLog:
    """Listens to dynamo's and inductor's logs during a capture and writes compile.json."""

    def __init__(self):
        self.events: list[dict] = []
        self.phase = "setup"
        self.phases: dict[str, dict] = {}
        self.dropped = 0
        self._handler = _Handler(self)
        self._loggers: list[logging.Logger] = []
        self._last = {"frames": 0, "compile_s": 0.0}

    def install(self) -> None:
        """Attach the handler to the graph-break, recompile and cudagraph artifact loggers."""
        names = set(KNOWN_LOGGERS)
        names.update(
            n
            for n in list(logging.Logger.manager.loggerDict)
            if n.startswith("torch.") and n.rsplit(".__", 1)[-1] in ARTIFACTS
        )
        asked = os.environ.get("TORCH_LOGS", "")
        if not asked:
            # dynamo emits some artifacts (recompile reasons among them) only once they are enabled;
            # the user asked for no logs, so enable ours and keep them out of the workload's output.
            with contextlib.suppress(Exception):
                import torch._logging

                torch._logging.set_logs(graph_breaks=True, recompiles=True, cudagraphs=True)
                names.update(
                    n
                    for n in list(logging.Logger.manager.loggerDict)
                    if n.startswith("torch.") and n.rsplit(".__", 1)[-1] in ARTIFACTS
                )
        for name in sorted(names):
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET or logger.level > logging.DEBUG:
                logger.setLevel(logging.DEBUG)  # torch only emits these when the level allows it
            if name.rsplit(".__", 1)[-1] not in asked:
                logger.propagate = False  # ours alone: the workload's log stays as the user set it
            logger.addHandler(self._handler)
            self._loggers.append(logger)

    def uninstall(self) -> None:
        """Detach the handler (the loggers keep their level)."""
        for logger in self._loggers:
            logger.removeHandler(self._handler)
        self._loggers = []

    def set_phase(self, phase: str) -> None:
        """Start a capture phase; the compile work done in the previous one is booked to it."""
        self._close_phase()
        self.phase = phase

    def add(self, logger_name: str, message: str) -> None:
        """Record one log message of an artifact logger as an event (at most MAX_EVENTS)."""
        kind = ARTIFACTS.get(logger_name.rsplit(".__", 1)[-1])
        if kind is None:
            return
        if kind == "cudagraph_skip" and "skipping cudagraphs" not in message:
            return
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        self.events.append(parse(kind, message) | {"phase": self.phase})

    def _close_phase(self) -> None:
        frames, seconds = _frames(), _compile_seconds()
        entry = self.phases.setdefault(self.phase, {"frames_compiled": 0, "compile_s": 0.0})
        entry["frames_compiled"] += max(frames - self._last["frames"], 0)
        entry["compile_s"] = round(entry["compile_s"] + max(seconds - self._last["compile_s"], 0.0), 6)
        self._last = {"frames": frames, "compile_s": seconds}

    def document(self) -> dict | None:
        """compile.json's contents, or None when dynamo never ran in this process."""
        self._close_phase()
        utils = sys.modules.get("torch._dynamo.utils")
        counters = {}
        if utils is not None:
            counters = {
                str(group): {str(k)[:300]: int(v) for k, v in list(values.items())[:200]}
                for group, values in list(utils.counters.items())
                if values
            }
        if not counters and not self.events:
            return None
        return {
            "schema": SCHEMA,
            "events": self.events,
            "events_dropped": self.dropped,
            "counters": counters,
            "phases": self.phases,
            "compile_s": round(_compile_seconds(), 6),
        }

    def write(self, folder: Path) -> str | None:
        """Write compile.json into `folder` when dynamo ran; its file name, else None."""
        self.uninstall()
        doc = self.document()
        if doc is None:
            return None
        write_new(Path(folder) / COMPILE_FILE, json.dumps(doc, indent=1, default=str).encode())
        return COMPILE_FILE


def parse(kind: str, message: str) -> dict:
    """The fields of one graph-break, recompile or cudagraph-skip message: file, line, reason, function."""
    text = message.strip()
    event: dict[str, str | int | None] = {
        "kind": kind,
        "file": None,
        "line": None,
        "reason": "",
        "function": None,
        "text": text[:MAX_TEXT],
    }
    if kind == "graph_break":
        at = _BREAK_AT.search(text)
        if at:
            event.update(file=at["file"], line=int(at["line"]))
        event["reason"] = _break_reason(text)
    elif kind == "recompile":
        at = _RECOMPILE.search(text)
        if at:
            event.update(function=at["fn"], file=at["file"], line=int(at["line"]))
        failures = [ln.strip()[2:] for ln in text.splitlines() if ln.strip().startswith("- ")]
        event["reason"] = failures[0] if failures else text.splitlines()[-1][:300]
    else:
        skip = _SKIP.search(text)
        reason = skip["reason"] if skip else text
        event["reason"] = reason.split(". Found from")[0].strip()[:300]
        frames = _FILE_LINE.findall(reason)
        if frames:
            event.update(file=frames[-1][0], line=int(frames[-1][1]))
    return event


def _break_reason(text: str) -> str:
    """The first line that says why dynamo broke the graph (after the 'Graph Break Reason:' header)."""
    lines = [ln.strip() for ln in text.splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("Graph Break Reason:"):
            rest = [ln for ln in lines[i + 1 :] if ln and not ln.startswith(("Explanation:", "Hint:"))]
            head = line.removeprefix("Graph Break Reason:").strip()
            return (
                rest[0] if rest and head.startswith("Encountered graph break") else head or (rest[0] if rest else "")
            )[:300]
    return (lines[1] if len(lines) > 1 else lines[0])[:300] if lines else ""


def _frames() -> int:
    utils = sys.modules.get("torch._dynamo.utils")
    with contextlib.suppress(Exception):
        return int(utils.counters.get("frames", {}).get("total", 0)) if utils is not None else 0
    return 0


def _compile_seconds() -> float:
    utils = sys.modules.get("torch._dynamo.utils")
    with contextlib.suppress(Exception):
        if utils is not None:
            return float(sum(utils.compilation_time_metrics.get("_compile.compile_inner", [])))
    return 0.0
