"""diagnose and Holistic Trace Analysis agree on GPU idle and kernel time per stream.

HTA (PyPI `holistictraceanalysis`) is not a project dependency: this test runs only where it is
installed (benchmarks/bench_vs_hta.py installs it in a separate venv and runs the same check at
several sizes), and skips cleanly everywhere else.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import CAPTURES, ROOT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("hta") is None, reason="Holistic Trace Analysis (holistictraceanalysis) is not installed"
)


def test_idle_and_kernel_time_per_stream_agree(tmp_path, monkeypatch):
    """Within 1 % of each stream's span, with HTA's rounding of ns timestamps turned off."""
    monkeypatch.setenv("HTA_DISABLE_NS_ROUNDING", "1")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_vs_hta

    trace = CAPTURES / "sync_item" / "trace.json.gz"
    ours = bench_vs_hta.diagnose_side(str(trace))
    (tmp_path / trace.name).symlink_to(trace)
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis(trace_dir=str(tmp_path))
    rank = sorted(ta.t.traces)[0]
    idle, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False)
    for stream, d in ours["streams"].items():
        rows = idle[idle["stream"] == int(stream)]
        hta_idle = float(rows["idle_time"].sum())
        assert abs(d["idle_us"] - hta_idle) <= 0.01 * d["span_us"], (stream, d, hta_idle)
