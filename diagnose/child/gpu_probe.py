"""Measure the GPU this process sees: the HBM bandwidth a kernel reaches and the dense matmul rate of
each precision, so that the roofline and the memory/compute rules judge kernels against this very GPU
rather than against a datasheet.

- **Bandwidth**: Triton copy and STREAM-triad kernels (diagnose/child/triton_kernels.py) over
  buffers of `BUFFER_BYTES` each, far larger than any L2, counting bytes read plus written; the best
  of a few block sizes. Without Triton, a torch copy (`Tensor.copy_`) stands in and the record says so.
- **Matmul rates**: `MATMUL_N`³ products through torch.matmul (cuBLAS/hipBLASLt, what a workload's
  matmuls run on) in bf16, fp16, TF32 and fp32, and FP8 (e4m3, `torch._scaled_mm`) on GPUs of
  compute capability 8.9 and up; random operands (zeros run faster than real data).

Each figure is the median of `REPEATS` timed calls (CUDA events) after `WARMUP` untimed ones.
The result is cached per device (diagnose/base/measured_peaks.py): a capture or `diagnose probe` measures
once per GPU and software stack.

    python -m diagnose.child.gpu_probe [--refresh] [--cache-dir DIR]   # prints the record as JSON
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

from diagnose.base import measured_peaks

BUFFER_BYTES = 1 << 30
MATMUL_N = 8192
WARMUP = 3
REPEATS = 15
BLOCKS = (1024, 4096, 16384)
MATMUL_DTYPES = ("bf16", "fp16", "tf32", "fp32")


def _time_us(torch, call, repeats: int = REPEATS, warmup: int = WARMUP) -> float:
    """Median time of one call of `call` on the current stream, in µs."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def bandwidth(torch) -> dict:
    """Achievable HBM bandwidth in TB/s (bytes read + written), by copy and by triad."""
    n = BUFFER_BYTES // 4
    a, b, c = (torch.rand(n, device="cuda", dtype=torch.float32) for _ in range(3))
    out: dict = {"buffer_bytes": BUFFER_BYTES}
    try:
        from diagnose.child import triton_kernels
        import triton
    except Exception as exc:  # no Triton (or a broken one): torch's own copy stands in
        us = _time_us(torch, lambda: b.copy_(a))
        out.update(
            method=f"torch Tensor.copy_ (Triton unavailable: {type(exc).__name__}: {exc})",
            copy_tbps=2 * BUFFER_BYTES / us / 1e6,
        )
        out["tbps"] = out["copy_tbps"]
        return out
    copy_us = min(_time_us(torch, lambda blk=blk: triton_kernels.launch_copy(a, b, blk)) for blk in BLOCKS)
    triad_us = min(_time_us(torch, lambda blk=blk: triton_kernels.launch_triad(a, b, c, 1.5, blk)) for blk in BLOCKS)
    torch.testing.assert_close(a, b + 1.5 * c)  # the kernels did the work they are timed for
    out.update(
        method=f"Triton {triton.__version__} copy and triad kernels, best of blocks {list(BLOCKS)}",
        copy_tbps=2 * BUFFER_BYTES / copy_us / 1e6,
        triad_tbps=3 * BUFFER_BYTES / triad_us / 1e6,
    )
    out["tbps"] = max(out["copy_tbps"], out["triad_tbps"])
    return out


def matmul_rates(torch) -> tuple[dict, dict]:
    """({precision: TFLOP/s}, {precision: why not measured}) for N³ products."""
    n = MATMUL_N
    flops = 2 * n**3
    rates, skipped = {}, {}
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for rung in MATMUL_DTYPES:
            torch.backends.cuda.matmul.allow_tf32 = rung == "tf32"
            x = torch.randn(n, n, device="cuda", dtype=dtypes[rung])
            y = torch.randn(n, n, device="cuda", dtype=dtypes[rung])
            try:
                rates[rung] = flops / _time_us(torch, lambda x=x, y=y: torch.matmul(x, y)) / 1e6
            except RuntimeError as exc:
                skipped[rung] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            del x, y
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    major, minor = torch.cuda.get_device_capability()
    fp8 = getattr(torch, "float8_e4m3fn", None)
    if torch.version.hip:
        skipped["fp8"] = "not measured on ROCm (e4m3fnuz scaling differs)"
    elif (major, minor) < (8, 9) or fp8 is None or not hasattr(torch, "_scaled_mm"):
        skipped["fp8"] = f"no FP8 tensor cores (compute capability {major}.{minor}) or no torch._scaled_mm"
    else:
        x = torch.randn(n, n, device="cuda").to(fp8)
        y = torch.randn(n, n, device="cuda").to(fp8).t()  # _scaled_mm takes its second operand column-major
        one = torch.tensor(1.0, device="cuda")
        try:
            rates["fp8"] = (
                flops
                / _time_us(torch, lambda: torch._scaled_mm(x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
                / 1e6
            )
        except RuntimeError as exc:
            skipped["fp8"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return rates, skipped


def device_key_fields(torch) -> dict:
    """The facts that identify this GPU and software stack (what the cache is keyed on)."""
    props = torch.cuda.get_device_properties(0)
    try:
        triton_version = __import__("triton").__version__
    except Exception:
        triton_version = None
    return {
        "name": props.name,
        "uuid": str(getattr(props, "uuid", "") or ""),
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or torch.version.hip,
        "triton": triton_version,
    }


def measure(torch) -> dict:
    """The probe record of the current GPU (see the module docstring)."""
    started = time.perf_counter()
    device = device_key_fields(torch)
    hbm = bandwidth(torch)
    torch.cuda.empty_cache()
    rates, skipped = matmul_rates(torch)
    torch.cuda.empty_cache()
    return {
        "schema": measured_peaks.SCHEMA,
        "device": device,
        "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hbm_tbps": hbm["tbps"],
        "bandwidth": hbm,
        "tflops": rates,
        "skipped": skipped,
        "matmul": f"torch.matmul {MATMUL_N}³, random operands; fp8: torch._scaled_mm e4m3 → bf16",
        "timing": f"median of {REPEATS} calls after {WARMUP} warm-ups, CUDA events",
        "seconds": round(time.perf_counter() - started, 2),
    }


def probe(torch, cache_dir=None, refresh: bool = False) -> dict:
    """The cached record for this GPU, measured (and cached) when there is none or `refresh`."""
    key = measured_peaks.cache_key(device_key_fields(torch))
    if not refresh:
        cached = measured_peaks.read_cache(key, cache_dir)
        if cached is not None:
            return dict(cached, cached=True)
    record = measure(torch)
    record["cache_file"] = str(measured_peaks.write_cache(key, record, cache_dir) or "")
    return dict(record, cached=False)


def main(argv: list[str] | None = None) -> int:
    """Print the probe record as JSON (exit 0), or a one-line reason on stderr (exit 2)."""
    parser = argparse.ArgumentParser(prog="python -m diagnose.child.gpu_probe")
    parser.add_argument("--refresh", action="store_true", help="measure again even when a cached record exists")
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed in this Python", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA or ROCm GPU is visible to torch", file=sys.stderr)
        return 2
    try:
        record = probe(torch, args.cache_dir, args.refresh)
    except Exception as exc:  # the GPU refused the work: one line, no traceback
        print(
            f"the probe failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr
        )
        return 2
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
