"""Renderers: one Diagnosis (or one DiffReport) in, one document out (text, JSON, HTML, Markdown).

A renderer is a module of this package that defines `RENDERER`, a `Renderer`; it joins the
registry by existing (the package's modules are discovered, in `order`), so `--format NAME`
and `write_outputs` see it without any other file changing. Renderers only read the Diagnosis
(its Details were built once by diagnose/ruleset/assemble.py); numbers and percentages are written by
diagnose/vocabulary/units.py, untrusted names made safe by diagnose/base/format.py, and SVG drawn by
report/svg.py. A renderer that can also show a `diagnose diff` (a DiffReport,
diagnose/diff) says so with `render_diff`, and `diff_filename` names the file it writes into a
diff's output folder.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Renderer:
    """A way to show a Diagnosis: `render(d, **options) -> str`.

    `filename` is the file it writes into every output folder (None: on request only, with
    --format); `label` names that file in the run's closing line. `render_diff(report, **options)`
    shows a DiffReport (None: this renderer has no diff view) and `diff_filename` is the file it
    writes into a diff's output folder."""

    name: str
    description: str
    render: Callable[..., str]
    filename: str | None = None
    label: str = ""
    order: int = 50
    render_diff: Callable[..., str] | None = None
    diff_filename: str | None = None


@functools.cache
def renderers() -> dict[str, Renderer]:
    """Every renderer of this package by name, in their `order`."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        renderer = getattr(module, "RENDERER", None)
        if isinstance(renderer, Renderer):
            found.append(renderer)
    return {r.name: r for r in sorted(found, key=lambda r: (r.order, r.name))}


def get(name: str) -> Renderer:
    """The renderer called `name` (KeyError naming the known ones when there is none)."""
    known = renderers()
    if name not in known:
        raise KeyError(f"no renderer {name!r} (known: {', '.join(known)})")
    return known[name]


def file_renderers() -> list[Renderer]:
    """The renderers that write a file into every output folder (findings.json, report.html)."""
    return [r for r in renderers().values() if r.filename]


def diff_renderers() -> dict[str, Renderer]:
    """The renderers that can show a DiffReport, by name."""
    return {name: r for name, r in renderers().items() if r.render_diff is not None}


def diff_file_renderers() -> list[Renderer]:
    """The renderers that write a file into a diff's output folder (diff.json, diff.html)."""
    return [r for r in diff_renderers().values() if r.diff_filename]
