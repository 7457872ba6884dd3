"""Where the bundled workload and the bundled real H200 captures are, installed or in a checkout."""

from __future__ import annotations

from pathlib import Path

DEMO_WORKLOAD = ("workloads/tiny_decode.py", "make_step")
DEMO_CAPTURE = "captures/decode_eager"


def bundled_root() -> Path:
    """The fixtures folder (installed as the `diagnose.fixtures` package)."""
    import diagnose.fixtures as pkg

    return Path(pkg.__file__).resolve().parent


def demo_workload() -> str:
    """`path.py:function` of the default workload."""
    path, name = DEMO_WORKLOAD
    return f"{bundled_root() / path}:{name}"


def demo_capture() -> Path:
    """The bundled real H200 capture analysed when there is no GPU."""
    return bundled_root() / DEMO_CAPTURE
