"""The trace a folder of one process's kineto files stands for.

torch.profiler's `tensorboard_trace_handler(dir)` writes each cycle of a profiling schedule to a new
file in one folder, named `{host}_{pid}.{time_ns}.pt.trace.json[.gz]`, and a user points diagnose at
the folder. Where no file in it names a rank (in its name or its distributedInfo: trace/rank_files.py),
the files are not ranks to compare but recordings of one process: the latest is analysed (the last
cycle, the one furthest from warm-up), and the trace carries a warning that says which file it was and
how many others the folder holds. The latest is the one with the largest handler timestamp where every
file is named that way, else the newest by modification time. A file whose start holds no
`"traceEvents"` key (a timing.json beside the trace) is not a kineto trace and is left out.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from diagnose.trace.rank_files import CAPTURE_FILES, is_trace_file
from diagnose.trace.source import head_bytes

HANDLER_TIME = re.compile(r"\.(\d{9,})\.pt\.trace\.json(?:\.gz)?$", re.IGNORECASE)
EVENTS_KEY = b'"traceEvents"'


@dataclasses.dataclass(frozen=True)
class FolderTrace:
    """The trace file a folder stands for, and the other traces it holds."""

    folder: Path
    path: Path
    others: tuple[Path, ...] = ()

    @property
    def note(self) -> str:
        """The warning that says which file was analysed ("" where the folder holds one trace only)."""
        if not self.others:
            return ""
        return (
            f"{self.folder}: {len(self.others) + 1} kineto traces and none names a rank: analysed the latest, "
            f"{self.path.name} (give a file's path to analyse another)"
        )


def folder_trace(folder: Path) -> FolderTrace | None:
    """The kineto trace a folder of one process's traces stands for (module docstring); None when the
    folder holds no kineto trace file."""
    traces = [p for p in Path(folder).iterdir() if _is_kineto(p)]
    if not traces:
        return None
    latest = max(traces, key=_recorded_order(traces))
    return FolderTrace(Path(folder), latest, tuple(sorted(p for p in traces if p != latest)))


def readable_below(folder: Path, most: int = 3) -> list[Path]:
    """Up to `most` sub-folders of `folder` that diagnose could read (a capture folder, or kineto trace files),
    sorted: what to name when the folder itself holds neither (TensorBoard's log root, one run per folder)."""
    found = []
    try:
        subs = sorted(p for p in Path(folder).iterdir() if p.is_dir())
    except OSError:
        return []
    for sub in subs:
        if _readable(sub):
            found.append(sub)
            if len(found) == most:
                break
    return found


def _readable(folder: Path) -> bool:
    """Whether `folder` is a capture folder or holds a kineto trace file (False where it cannot be listed)."""
    try:
        return any((folder / name).is_file() for name in CAPTURE_FILES) or any(map(_is_kineto, folder.iterdir()))
    except OSError:
        return False


def _is_kineto(path: Path) -> bool:
    """Whether `path` is a file named like a trace whose start holds kineto's events key."""
    return is_trace_file(path) and EVENTS_KEY in head_bytes(path)


def _recorded_order(traces: list[Path]):
    """The sort key that puts the latest recording last: the handler's timestamp, else the modification time."""
    stamps = {p: int(m[1]) for p in traces if (m := HANDLER_TIME.search(p.name))}
    if len(stamps) == len(traces):
        return lambda p: (stamps[p], p.name)
    return lambda p: (p.stat().st_mtime_ns, p.name)
