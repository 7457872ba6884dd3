"""The Triton kernels that `diagnose probe` times: a copy and a STREAM triad over fp32 buffers.

Imported only where Triton is installed (diagnose/child/gpu_probe.py asks first). Each kernel
moves every byte once: copy reads N and writes N elements, triad reads 2N and writes N.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    """dst[i] = src[i]."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, tl.load(src + offsets, mask=mask), mask=mask)


@triton.jit
def triad_kernel(a, b, c, scalar, n, BLOCK: tl.constexpr):
    """a[i] = b[i] + scalar · c[i]."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(b + offsets, mask=mask) + scalar * tl.load(c + offsets, mask=mask)
    tl.store(a + offsets, value, mask=mask)


def launch_copy(src, dst, block: int) -> None:
    """Copy `src` into `dst` (same size, contiguous) with blocks of `block` elements."""
    n = src.numel()
    copy_kernel[(triton.cdiv(n, block),)](src, dst, n, BLOCK=block, num_warps=8 if block >= 4096 else 4)


def launch_triad(a, b, c, scalar: float, block: int) -> None:
    """a = b + scalar · c with blocks of `block` elements."""
    n = a.numel()
    triad_kernel[(triton.cdiv(n, block),)](a, b, c, scalar, n, BLOCK=block, num_warps=8 if block >= 4096 else 4)
