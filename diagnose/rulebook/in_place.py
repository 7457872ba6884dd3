"""Fixes the code already has: a fix whose precondition the trace shows met is not named first.

Rules name fixes for a bottleneck; some of those fixes may already be in the code. The trace shows it
for five of them:

- `dataloader-workers`: the DataLoader already runs worker processes
  (`_MultiProcessingDataLoaderIter`) and waiting for its next batch takes under `LOADER_KEEPS_UP` (5 %)
  of the step: the workers keep up;
- `fused-optimizer`: every optimizer stepped in the measured steps is already fused or foreach;
- `torch-compile`: the steps already run torch.compile'd code;
- `cuda-graphs`: the steps already replay CUDA graphs (`cudaGraphLaunch`) captured by hand, and launch
  no kernel outside them (a torch.compile'd step in `reduce-overhead` mode keeps its own Python around
  the replay, which one whole-step graph skips: there the fix is still open);
- `pinned-memory`: the step's host-to-device copies already come from pinned memory, none pageable.

Such a fix moves behind the finding's other fixes and says why it was passed over (`Fix.passed_over`,
and its text); a fix another one needs first (`prerequisite`: a capturable optimizer before a graph) is a
different change and stays. `pass_over` makes a new Finding with new Fixes; the rule's own is not edited. A finding whose every fix is in place ranks after those with a fix left
(diagnose/rulebook/engine.py). This is the one place where fixes are reordered for what the code has:
the engine applies it to every finding, whatever rule made it.
"""

from __future__ import annotations

import msgspec
import pandas as pd

from diagnose.metrics.optimizer import FOREACH, FUSED
from diagnose.model.findings import Finding
from diagnose.trace.model import KERNEL_LAUNCH
from diagnose.trace.names import name_search
from diagnose.vocabulary.runtime import GRAPH_LAUNCH, HOST_TO_DEVICE, PAGEABLE, PINNED
from diagnose.vocabulary.units import percent

LOADER_KEEPS_UP = 0.05  # waiting for the next batch under this share of the step: the workers keep up
WORKER_LOADER = "_MultiProcessingDataLoaderIter.__next__"


def in_place(ctx) -> dict[str, str]:
    """{fix id: why the trace shows it in place} for the fixes this trace already has (computed once per context)."""
    return ctx.metrics.shared("fixes-in-place", lambda: _find(ctx.metrics))


def _find(m) -> dict[str, str]:
    found: dict[str, str] = {}
    for fix_id, reason in (
        ("dataloader-workers", _workers(m)),
        ("fused-optimizer", _optimizer(m)),
        ("torch-compile", _compiled(m)),
        ("cuda-graphs", _graphed(m)),
        ("pinned-memory", _pinned(m)),
    ):
        if reason:
            found[fix_id] = reason
    return found


def _in_steps(frame, m):
    """The rows of `frame` (with `ts`) inside the measured steps."""
    inside = pd.Series(False, index=frame.index)
    for w in m.steps.windows:
        inside |= (frame["ts"] >= w.start) & (frame["ts"] < w.end)
    return frame[inside]


def _workers(m) -> str:
    """Why the DataLoader's workers already keep up, or ''."""
    ops = m.trace.ops
    if not len(ops) or not m.steps.windows:
        return ""
    loader = _in_steps(ops[ops["name"].str.contains(WORKER_LOADER, regex=False, na=False)], m)
    if not len(loader):
        return ""
    step = m.budget.profiled_step_us
    share = float(loader["dur"].sum()) / len(m.steps.windows) / step if step > 0 else 1.0
    if share >= LOADER_KEEPS_UP:
        return ""
    return (
        f"the DataLoader already runs worker processes, and waiting for the next batch takes {percent(share)} of "
        f"the step (< {percent(LOADER_KEEPS_UP)}): they keep up"
    )


def _optimizer(m) -> str:
    """Why the optimizer is already fused or foreach, or ''."""
    steps = m.optimizer_steps
    if not steps or not all(s.impl in (FUSED, FOREACH) for s in steps):
        return ""
    return "the optimizer already runs " + ", ".join(f"{s.name} {s.impl}" for s in steps)


def _compiled(m) -> str:
    return "the step already runs torch.compile'd code" if m.compiled.compiled else ""


def _graphed(m) -> str:
    """Why the whole step is already one or more CUDA-graph replays, or '': graph replays and no kernel
    launched outside them, and no torch.compile'd call (whose own Python a whole-step graph still skips)."""
    replays = m.compiled.per_step("replays")
    if replays <= 0 or m.compiled.compiled or not m.steps.windows:
        return ""
    runtime = m.trace.runtime
    calls = _in_steps(runtime[name_search(runtime["name"], KERNEL_LAUNCH)], m)
    if calls["name"].str.contains(GRAPH_LAUNCH).all():
        return f"the step already replays CUDA graphs ({replays:.0f} per step) and launches no kernel outside them"
    return ""


def _pinned(m) -> str:
    """Why the step's host-to-device copies are already pinned, or ''."""
    gpu = m.trace.gpu
    copies = gpu[(gpu["cat"] == "memcpy").to_numpy() & name_search(gpu["name"], HOST_TO_DEVICE)]
    copies = _in_steps(copies, m) if m.steps.windows else copies.iloc[:0]
    names = copies["name"].astype(str)
    if (
        not len(copies)
        or names.str.contains(PAGEABLE, regex=False).any()
        or not names.str.contains(PINNED, regex=False).all()
    ):
        return ""
    return "the step's host-to-device copies already come from pinned memory"


def pass_over(finding: Finding, present: dict[str, str]) -> Finding:
    """A new Finding: `finding` with the fixes the code already has (`present`, from `in_place`) moved behind the
    others, each saying why it was passed over; a prerequisite fix stays where it is. `finding` itself is left
    as it is (the engine builds each finding once, before the Diagnosis exists)."""
    keep, moved = [], []
    for f in finding.fixes:
        reason = present.get(f.id)
        if reason and not f.prerequisite:
            moved.append(msgspec.structs.replace(f, passed_over=reason, how=f"Passed over: {reason}. {f.how}"))
        else:
            keep.append(f)
    return msgspec.structs.replace(finding, fixes=keep + moved) if moved else finding


def all_in_place(finding: Finding) -> bool:
    """True when the finding has fixes and the code has every one of them already."""
    return bool(finding.fixes) and all(f.passed_over for f in finding.fixes)
