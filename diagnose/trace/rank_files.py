"""Find the rank traces a folder holds, and which rank each one is.

A rank folder is either a capture folder diagnose wrote with `--nproc-per-node` (`rank-K/`
sub-folders, each a capture folder, and one meta.json above them) or a folder of kineto traces
as `tensorboard_trace_handler` writes them (one file per rank, or per rank and step). A file's
rank comes from its `distributedInfo.rank` once it is decoded (diagnose/ranks/analyse.py); before that, from its
name (`rank-3`, `rank_3`, `rank3`) or the distributedInfo at the start of the file, else from its place in
the sorted list. Several kineto files of which none names a rank, in its name or its distributedInfo, are
not ranks but one process's recordings (tensorboard_trace_handler's cycles): trace/trace_folder.py.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from diagnose.trace.source import head_bytes

TRACE_SUFFIXES = (".json", ".json.gz")
CAPTURE_FILES = ("trace.json.gz", "trace.json", "meta.json")  # any one of them makes a folder one capture
RANK_FOLDER = re.compile(r"^rank-(\d+)$")
RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# kineto writes distributedInfo before the events: {"backend": "nccl", "rank": 3, "world_size": 8, ...}
RANK_IN_HEADER = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
NOT_TRACES = {
    "meta.json",
    "memory.json",
    "memory.json.gz",
    "findings.json",
    "sweep.json",
    "compile.json",
    "index.json",
    "spec.json",
    "diff.json",
    "pysamples.json.gz",
    "arrivals.json",
}  # what diagnose writes beside a trace


@dataclasses.dataclass
class RankSource:
    """One trace (file or capture folder) and the rank it is believed to be."""

    path: Path
    rank: int
    how: str  # "folder" | "name" | "order" (replaced by "distributedInfo" once decoded)


def is_trace_file(path: Path) -> bool:
    """Whether `path` is a file named like a kineto trace."""
    name = path.name.lower()
    return path.is_file() and name.endswith(TRACE_SUFFIXES) and name not in NOT_TRACES


def rank_sources(folder: Path) -> list[RankSource]:
    """The rank traces under `folder`, sorted by rank; [] when it is not a rank folder (a single
    capture folder, a sweep, a folder with fewer than two traces, or traces none of which names a rank)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    subs = sorted((int(m[1]), p) for p in folder.iterdir() if p.is_dir() for m in [RANK_FOLDER.match(p.name)] if m)
    if subs:
        return [RankSource(p, rank, "folder") for rank, p in subs]
    if any((folder / name).exists() for name in (*CAPTURE_FILES, "sweep.json")):
        return []  # one capture folder (or a sweep), not several ranks
    files = sorted(p for p in folder.iterdir() if is_trace_file(p))
    if len(files) < 2 or not any(RANK_IN_NAME.search(p.name) or header_rank(p) is not None for p in files):
        return []  # one trace, or several of which none names a rank: one process's recordings
    found = []
    for i, path in enumerate(files):
        match = RANK_IN_NAME.search(path.name)
        found.append(RankSource(path, int(match[1]) if match else i, "name" if match else "order"))
    return sorted(found, key=lambda s: (s.rank, s.path.name))


def header_rank(path: Path) -> int | None:
    """The rank the distributedInfo at the start of the kineto file `path` names; None where there is none
    (a run without torch.distributed) or the file cannot be read (its full read says why)."""
    match = RANK_IN_HEADER.search(head_bytes(path))
    return int(match[1]) if match else None


def is_rank_folder(folder: Path) -> bool:
    """Whether `folder` holds several rank traces (rank-K/ capture folders or kineto files)."""
    return bool(rank_sources(folder))
