"""Write a synthetic kineto trace of many tiny events, streamed (never held in memory):

    python benchmarks/make_tiny_trace.py /tmp/tiny.json --events 10000000

Half the events are 2 µs kernels, half the cudaLaunchKernel calls that launched them (joined by
`correlation`), in steps of STEP_KERNELS kernels marked by ProfilerStep ranges on the host and
the GPU: the shape of a launch-bound workload, at the smallest size an event can have. It is
synthetic: for scale (memory and time per event), not for what the rules conclude.

Never write the output inside the repository: traces of this size belong in /tmp.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

STEP_KERNELS = 1000
KERNEL_US, LAUNCH_US, GAP_US = 2.0, 4.0, 1.0


def write(path: Path, events: int) -> dict:
    """Write the trace; what was written (events, kernels, steps, bytes)."""
    kernels = max(1, events // 2)
    steps = (kernels + STEP_KERNELS - 1) // STEP_KERNELS
    with open(path, "w") as f:
        f.write(
            '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "synthetic GPU", "numSms": 132, '
            '"totalGlobalMem": 150000000000, "computeMajor": 9, "computeMinor": 0}], "traceEvents": [\n'
        )
        t, written = 0.0, 0
        for step in range(steps):
            n = min(STEP_KERNELS, kernels - step * STEP_KERNELS)
            span = n * (LAUNCH_US + GAP_US) + 10
            f.write(
                json.dumps(
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "name": f"ProfilerStep#{step}",
                        "pid": 1,
                        "tid": 1,
                        "ts": t,
                        "dur": span,
                    }
                )
                + ",\n"
            )
            f.write(
                json.dumps(
                    {
                        "ph": "X",
                        "cat": "gpu_user_annotation",
                        "name": f"ProfilerStep#{step}",
                        "pid": 0,
                        "tid": 7,
                        "ts": t + 1,
                        "dur": span,
                    }
                )
                + ",\n"
            )
            lines = []
            for i in range(n):
                c = step * STEP_KERNELS + i
                ts = t + i * (LAUNCH_US + GAP_US)
                lines.append(
                    f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,'
                    f'"ts":{ts:.3f},"dur":{LAUNCH_US},"args":{{"correlation":{c}}}}}'
                )
                lines.append(
                    f'{{"ph":"X","cat":"kernel","name":"k{c % 7}","pid":0,"tid":7,"ts":{ts + 3:.3f},'
                    f'"dur":{KERNEL_US},"args":{{"correlation":{c},"device":0,"stream":7}}}}'
                )
            f.write(",\n".join(lines))
            written += 2 + 2 * n
            t += span + 5
            f.write(",\n" if step < steps - 1 else "\n")
        f.write("]}\n")
    return {"out": str(path), "events": written, "kernels": kernels, "steps": steps, "bytes": path.stat().st_size}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--events", type=int, default=10_000_000, help="about how many events (default 10 million)")
    args = p.parse_args()
    print(json.dumps(write(args.out, args.events)))


if __name__ == "__main__":
    main()
