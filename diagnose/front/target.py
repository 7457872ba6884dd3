"""What a path on the command line is, told once: a recording to read or a workload to run.

    resolve_target("model.py:make_step")        -> Target("function", model.py, "make_step")
    resolve_target("train.py")                  -> Target("script", train.py)
    resolve_target("pkg.train", module=True)    -> Target("module", pkg.train)
    resolve_target("run/")                      -> "sweep" (sweep.json), "ranks" (rank-K/ folders or
                                                   several kineto files), else "capture"
    resolve_target("trace.json.gz"), ("-")      -> Target("trace", ...)

A path that is not there resolves to "trace": reading it says "no such file or folder", at the
point where the command's order of checks reaches it. Files of other profilers (.nsys-rep,
.ncu-rep, ...) are refused here, naming what they are. Every front end (the command line, diff,
`--baseline`, diagnose.analyze and diagnose.profile) resolves through this module, and the
analysis of each recorded kind is picked from `Target.kind` (pipeline.analyse).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Literal

from diagnose.base.errors import InputError, UsageError
from diagnose.memory.sweep import is_sweep_folder
from diagnose.trace.rank_files import is_rank_folder

Kind = Literal["trace", "capture", "ranks", "sweep", "script", "module", "function"]
RECORDED: tuple[Kind, ...] = ("trace", "capture", "ranks", "sweep")
RUNNABLE: tuple[Kind, ...] = ("script", "module", "function")

FUNCTION_TARGET = re.compile(r"^(?P<path>.+\.py):(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")
MODULE_NAME = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
FOREIGN_FILES = {
    ".nsys-rep": "an Nsight Systems report, not a kineto trace: record the workload with torch.profiler "
    "(or run `diagnose model.py`), or export a kineto trace with prof.export_chrome_trace(...)",
    ".qdrep": "an Nsight Systems report, not a kineto trace: record the workload with torch.profiler "
    "(or run `diagnose model.py`), or export a kineto trace with prof.export_chrome_trace(...)",
    ".sqlite": "an Nsight Systems export, not a kineto trace: record the workload with torch.profiler instead",
    ".ncu-rep": "an Nsight Compute report: attach it to a trace with `--ncu-csv FILE`",
    ".pt": "a PyTorch checkpoint, not a trace",
}


@dataclasses.dataclass(frozen=True)
class Target:
    """What the user pointed diagnose at, and which kind of thing it is.

    Recorded kinds are read: "trace" (a kineto file, standard input), "capture" (a folder diagnose
    wrote), "ranks" (a folder of rank traces), "sweep" (a folder with sweep.json). Runnable kinds
    are run in a child process: "script" (file.py), "module" (`-m NAME`; `path` is the dotted
    name), "function" (file.py:NAME, with `function` the NAME)."""

    kind: Kind
    path: Path
    function: str | None = None

    @property
    def runs(self) -> bool:
        """Whether this is a workload to run (script, module, function) rather than a recording to read."""
        return self.kind in RUNNABLE

    @property
    def text(self) -> str:
        """The target as the user spelled it (`file.py:NAME` for a function)."""
        return f"{self.path}:{self.function}" if self.function else str(self.path)


def resolve_target(text: str, module: bool = False) -> Target:
    """Tell a script, a `file.py:NAME` function, a module (`-m`) and the recorded kinds apart.

    A function target must name a top-level definition of its file (checked without running it);
    a script or function file must exist (UsageError); another profiler's file is an InputError."""
    if module:
        if not MODULE_NAME.fullmatch(text):
            raise UsageError(f"-m {text!r}: not a module name")
        return Target("module", Path(text))
    match = FUNCTION_TARGET.match(text)
    if match:
        path = Path(match["path"])
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        _check_defines(path, match["name"])
        return Target("function", path, match["name"])
    path = Path(text)
    if text.endswith(".py"):
        if not path.is_file():
            raise UsageError(f"{path}: no such file")
        return Target("script", path)
    foreign = next((why for suffix, why in FOREIGN_FILES.items() if text.lower().endswith(suffix)), None)
    if foreign:
        raise InputError(f"{path}: {foreign}")
    return recorded(path)


def recorded(path: str | Path) -> Target:
    """A path read as a recording: "sweep", "ranks" or "capture" for a folder, "trace" otherwise
    (a file, standard input, or a path that is not there)."""
    path = Path(path)
    if is_sweep_folder(path):
        return Target("sweep", path)
    if is_rank_folder(path):
        return Target("ranks", path)
    if path.is_dir():
        return Target("capture", path)
    return Target("trace", path)


def as_target(value: Target | str | Path) -> Target:
    """`value` itself when it is a Target already, else the recording it names (see `recorded`)."""
    return value if isinstance(value, Target) else recorded(value)


def _check_defines(path: Path, name: str) -> None:
    """A usage error unless `path` defines `name` at its top level (def, class, assignment or import,
    also inside top-level if/try/with blocks); checked by reading the file, without running it."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return  # the capture reports the workload's own error, with its traceback
    names = _top_level_names(tree.body)
    if names is None or name in names:
        return
    defined = sorted(n for n in names if not n.startswith("_"))[:8]
    raise UsageError(
        f"{path} defines no {name!r} at its top level" + (f" (it defines {', '.join(defined)})" if defined else "")
    )


def _top_level_names(body: list) -> set[str] | None:
    """Names a module body binds; None when it cannot be told without running it (`import *`)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" for a in node.names):
                return None
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            blocks = [
                node.body,
                getattr(node, "orelse", []),
                getattr(node, "finalbody", []),
                *[h.body for h in getattr(node, "handlers", [])],
            ]
            for block in blocks:
                inner = _top_level_names(block)
                if inner is None:
                    return None
                names |= inner
    return names
