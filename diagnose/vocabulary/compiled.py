"""torch.compile's marks in a trace, said once (diagnose/metrics/compiled.py reads them).

- `Torch-Compiled Region: F/V` (a cpu_op): dynamo frame F, compiled version V, entered;
- `## Call CompiledFxGraph <hash> ##` (a user annotation, inductor) and `CompiledFunction` /
  `CompiledFunctionBackward` (AOT autograd, training): one compiled graph running, a *graph call*;
- dynamo's and AOT autograd's own ranges around them (cache lookup, pre-graph bytecode, the
  runtime wrapper's prologue);
- inductor's kernels: `triton_…` on a GPU, `cpp_fused_…` on the CPU;
- compiling itself: `dynamo`, `entire_frame_compile` and the `… (dynamo_timed)` ranges.
"""

from __future__ import annotations

import re

REGION_PREFIX = "Torch-Compiled Region"
COMPILED_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/(\d+)$")
"""A compiled region entered: groups (frame, version)."""
GRAPH_CALL = re.compile(r"^(## Call CompiledFxGraph \S+ ##|CompiledFunction|CompiledFunctionBackward)$")
DYNAMO_OWN = re.compile(
    r"^(TorchDynamo Cache Lookup|Pregraph bytecode|AOTDispatcher Runtime Wrapper Prologue|"
    r"Torch-Compiled Region: .*|## .* ##|CompiledFunction.*)$"
)
"""The ranges torch.compile opens for itself (not the user's eager code)."""
INDUCTOR_KERNEL = re.compile(r"^(triton_|cpp_fused_)")
TRITON_PREFIX = "triton_"  # an inductor Triton kernel, and the CPU op named after it that launches it
COMPILING = re.compile(r"^(?:dynamo|entire_frame_compile)$|\(dynamo_timed\)$")
"""torch.compile compiling (dynamo tracing, AOT autograd, inductor codegen): its own ranges, `.search(name)`."""
