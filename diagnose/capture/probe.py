"""Ask (in a child process, so this one never imports torch) whether a CUDA GPU is usable."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

PROBE = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"


def cuda_available(python: str | None = None, timeout_s: float = 120) -> bool:
    """True when `python` (default: this interpreter) has torch and sees a CUDA device."""
    if python is None and importlib.util.find_spec("torch") is None:
        return False
    try:
        result = subprocess.run([python or sys.executable, "-c", PROBE], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0
