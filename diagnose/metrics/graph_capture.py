"""Is the analysed window a CUDA/HIP graph being captured rather than a steady state?

While a stream is captured (`cudaStreamBeginCapture` … `cudaStreamEndCapture`, `hip…` alike),
kernel launch calls only record nodes into the graph: the kernels run later, when the graph is
replayed. A trace recorded then (vLLM and SGLang capture at start-up) shows the host launching
hundreds of kernels and the GPU doing almost nothing, which reads like launch overhead; it is
set-up, not the workload's steady state. The window is called a capture when at least
CAPTURED_SHARE of its kernel launches fall inside capture spans.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from diagnose.metrics.steps import Steps
from diagnose.trace.model import Trace
from diagnose.trace.names import name_match, name_search
from diagnose.vocabulary.runtime import CAPTURE_BEGIN, CAPTURE_END, GRAPH_INSTANTIATE, KERNEL_LAUNCH
from diagnose.vocabulary.units import percent

CAPTURED_SHARE = 0.5


@dataclasses.dataclass
class GraphCapture:
    """The capture spans of the analysed window and the launches inside them."""

    captures: int
    captured_launches: int
    launches: int
    instantiations: int

    @property
    def share(self) -> float:
        """Share of the window's kernel launches that were captured, not run."""
        return self.captured_launches / self.launches if self.launches else 0.0

    @property
    def dominates(self) -> bool:
        """True when the window is mostly a graph capture (not a steady state)."""
        return self.share >= CAPTURED_SHARE

    def text(self) -> str:
        """'1 graph capture holds 428 of 428 kernel launches (100 %)'."""
        graphs, verb = (
            (f"{self.captures} graph capture", "holds")
            if self.captures == 1
            else (f"{self.captures} graph captures", "hold")
        )
        return (
            f"{graphs} (cudaStreamBeginCapture … EndCapture) {verb} {self.captured_launches:,} of the "
            f"{self.launches:,} kernel launches ({percent(self.share)})"
        )


def graph_capture(trace: Trace, steps: Steps) -> GraphCapture | None:
    """The capture spans inside the analysed steps; None when the trace captured no graph there."""
    runtime = trace.runtime
    if not len(runtime) or not steps.windows:
        return None
    names = runtime["name"]
    begins = runtime[name_match(names, CAPTURE_BEGIN)]
    if not len(begins):
        return None
    ends = runtime[name_match(names, CAPTURE_END)].sort_values("ts")
    start, stop = steps.windows[0].cpu_start, max(w.cpu_end for w in steps.windows)
    inside = runtime[(runtime["ts"] >= start) & (runtime["ts"] <= stop)]
    launch_ts = inside.loc[name_search(inside["name"], KERNEL_LAUNCH), "ts"].to_numpy(float)
    end_ts = ends["end"].to_numpy(float)
    captured, spans = np.zeros(len(launch_ts), dtype=bool), 0
    for b in begins["ts"].to_numpy(float):
        later = end_ts[end_ts > b]
        e = later[0] if len(later) else stop
        if e < start or b > stop:
            continue
        spans += 1
        captured |= (launch_ts >= b) & (launch_ts <= e)
    if not spans:
        return None
    inst = int(name_match(inside["name"], GRAPH_INSTANTIATE).sum())
    return GraphCapture(
        captures=spans, captured_launches=int(captured.sum()), launches=len(launch_ts), instantiations=inst
    )
