"""Test helper for the hostile tests: nothing outside an output folder changes while diagnose runs.

`untouched_outside(out, *roots)` hashes every file, link and folder under `roots` (by default the
folder that holds `out`: the test's inputs sit beside it) before and after the block, leaving out
`out` itself, and compares; it also compares the repository's own files by path, size, mode and
modification time (caches left out). Any file created, removed, changed or re-pointed outside the
output fails the test, naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP_IN_REPO = {".git", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", "diagnose-out"}


def tree_state(root: Path, leave_out: Path | None = None, contents: bool = True) -> dict[str, tuple]:
    """{relative path: (kind, mode, digest or size and mtime, link target)} for everything under `root`."""
    root = Path(root)
    leave_out = Path(os.path.abspath(leave_out)) if leave_out else None
    state: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        if not contents:
            dirs[:] = [d for d in dirs if d not in SKIP_IN_REPO]
        dirs[:] = [d for d in dirs if leave_out is None or Path(os.path.abspath(here / d)) != leave_out]
        for name in dirs + files:
            path = here / name
            if leave_out is not None and Path(os.path.abspath(path)) == leave_out:
                continue
            info = os.lstat(path)
            key = str(path.relative_to(root))
            if stat.S_ISLNK(info.st_mode):
                state[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                state[key] = ("dir", stat.S_IMODE(info.st_mode))
            elif not stat.S_ISREG(info.st_mode):
                state[key] = ("special", info.st_mode)
            elif contents:
                state[key] = ("file", stat.S_IMODE(info.st_mode), _digest(path))
            else:
                state[key] = ("file", stat.S_IMODE(info.st_mode), info.st_size, info.st_mtime_ns)
    return state


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def changes(before: dict, after: dict) -> list[str]:
    """What differs between two tree states, one line per path."""
    out = [f"created {p}" for p in after.keys() - before.keys()]
    out += [f"removed {p}" for p in before.keys() - after.keys()]
    out += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(out)


@contextlib.contextmanager
def untouched_outside(out: Path, *roots: Path):
    """Fail when anything under `roots` (default: out's parent) outside `out`, or in the repository,
    differs after the block from before it."""
    out = Path(out)
    roots = roots or (out.parent,)
    before = [tree_state(r, out) for r in roots]
    repo_before = tree_state(REPO, out, contents=False)
    yield
    after = [tree_state(r, out) for r in roots]
    found = [f"{r}: {c}" for r, b, a in zip(roots, before, after) for c in changes(b, a)]
    found += [f"repository: {c}" for c in changes(repo_before, tree_state(REPO, out, contents=False))]
    assert not found, "written outside the output folder: " + "; ".join(found[:10])
