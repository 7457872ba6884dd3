"""Where the Nsight Compute command-line tool is, for the --ncu pass and for reading .ncu-rep files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_ncu() -> str | None:
    """The ncu executable: $DIAGNOSE_NCU, else `ncu` on PATH, else the CUDA toolkit's default place."""
    explicit = os.environ.get("DIAGNOSE_NCU")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    found = shutil.which("ncu")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/ncu")
    return str(default) if default.is_file() else None
