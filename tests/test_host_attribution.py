"""Naming the host code behind silent GPU idle time (stack samples), and the dynamic-shapes rule."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
import time
import weakref

import numpy as np
import pytest

from diagnose.child.sampler import StackSampler
from diagnose.model.config import Config
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.metrics import Metrics
from diagnose.metrics.host import silent_split, subtract
from diagnose.metrics.pyframes import NO_SAMPLE, SAMPLES_FILE, python_samples
from diagnose.rules import ALL_RULES
from diagnose.trace import load_target

from conftest import CAPTURES, PEER_TRACES, ROOT, diagnosis_of, load_capture

HOST = next(r for r in ALL_RULES if r.id == "host-bound")
SHAPES = next(r for r in ALL_RULES if r.id == "dynamic-shapes")


def _finding(trace, rule, **overrides):
    d = diagnose_trace(trace, Config(overrides=overrides), rules=[rule])
    return (d.findings or [None])[0], d


# -- the sampler (no torch needed) ------------------------------------------------------------


def _spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def _nested(depth, seconds):
    return _nested(depth - 1, seconds) if depth else _spin(seconds)


def test_sampler_records_the_main_thread_stack_in_full():
    sampler = StackSampler(interval_s=0.001)
    sampler.start()
    _nested(40, 0.2)
    sampler.stop()
    data = sampler.to_dict()
    assert data["cost"]["samples"] >= 5 and data["cost"]["error"] is None
    names = [[data["frames"][f][2] for f in data["stacks"][sid]] for _, sid in data["samples"]]
    spinning = [n for n in names if n[-1] == "_spin"]
    assert spinning, names[:3]
    # every stack is complete, each frame named through the sampler's (code, instruction) cache or worked out anew
    assert all(n[-42:-1] == ["_nested"] * 41 for n in spinning)
    assert data["clock"]["start_ns"] <= data["clock"]["stop_ns"]


def test_the_sampler_keeps_no_local_of_the_workload_alive_after_its_function_returns():
    """A sampled frame held until the next sample would keep its locals (a step's batch, its tensors) alive
    past the function's return: the workload's memory peak and its frees would change under the sampler."""

    class Batch:
        pass

    def step():
        batch = Batch()
        _spin(0.05)  # long enough for several samples inside this frame, even on a loaded machine
        return weakref.ref(batch)

    sampler = StackSampler(interval_s=0.001)
    sampler.start()
    alive = []
    for _ in range(5):
        ref = step()
        alive.append(ref() is not None)  # checked at once, before the sampler's next sample
    sampler.stop()
    assert any(code is step.__code__ for code, _ in sampler.frames), "no sample landed inside step()"
    assert not any(alive), f"a sampled frame kept its local alive after returning in {sum(alive)} of 5 steps"


def test_sampler_clock_marker_brackets_the_range(tmp_path):
    entered = []

    class Range:
        def __init__(self, name):
            entered.append(name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    sampler = StackSampler()
    sampler.start(mark=Range)
    sampler.stop()
    assert entered == ["diagnose/pysamples clock"]
    assert sampler.clock["uncertainty_us"] >= 0
    sampler.write(tmp_path)
    assert json.loads(gzip.decompress((tmp_path / SAMPLES_FILE).read_bytes()))["schema"] == "diagnose.pysamples/1"


def test_sampler_is_stopped_by_a_broken_stack_walk_not_the_workload():
    sampler = StackSampler(interval_s=0.001)
    sampler._intern = lambda frame: 1 / 0
    sampler.start()
    _spin(0.05)
    sampler.stop()
    assert sampler.error.startswith("ZeroDivisionError")
    assert threading.main_thread().is_alive()


# -- attribution on a real trace with a synthetic samples file ----------------------------------


def _synthetic_samples(folder, trace, stacks, frames, roots=("/usr/lib/python3.11/",)):
    """Write a SYNTHETIC pysamples file: samples every 0.5 ms over the measured steps, aligned to
    the trace through its first step range (in place of the sampler's clock marker)."""
    m = Metrics(trace)
    marker = trace.ops[trace.ops["name"] == "diagnose/step 0"].iloc[0]
    marker_ns = 1_800_000_000_000_000_000
    start_ns = marker_ns - 5_000_000  # the sampler "started" 5 ms before the marker range
    t = np.arange(m.steps.start, m.steps.end, 500.0)
    rel_us = t - float(marker["ts"]) + 5_000.0
    rows = [[round(float(r), 1), i % len(stacks)] for i, r in enumerate(rel_us)]
    doc = {
        "schema": "diagnose.pysamples/1",
        "interval_s": 0.0005,
        "synthetic": True,
        "clock": {"marker": "diagnose/step 0", "marker_ns": marker_ns, "start_ns": start_ns},
        "library_roots": list(roots),
        "cwd": "/home/user/project",
        "frames": frames,
        "stacks": stacks,
        "samples": rows,
        "cost": {"samples": len(rows)},
    }
    (folder / SAMPLES_FILE).write_bytes(gzip.compress(json.dumps(doc).encode()))


def _copy_capture(tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(CAPTURES / name, folder)
    return folder


def test_host_bound_names_the_users_lines_from_samples(tmp_path):
    folder = _copy_capture(tmp_path, "host_loader_inline")
    frames = [
        ["/home/user/project/train.py", 10, "<module>"],
        ["/home/user/project/train.py", 42, "build_batch"],
        ["/usr/lib/python3.11/json/decoder.py", 353, "raw_decode"],
        ["/home/user/project/train.py", 57, "tokenise"],
    ]
    _synthetic_samples(folder, load_target(folder), stacks=[[0, 1, 2], [0, 3]], frames=frames)
    trace = load_target(folder)
    samples, _ = python_samples(trace)
    assert samples is not None and set(samples.where) == {"train.py:42 build_batch", "train.py:57 tokenise"}
    finding, _ = _finding(trace, HOST)
    assert finding.severity == "high"
    codes = [o.name for o in finding.offenders if o.label == "code"]
    assert set(codes[:2]) == {"train.py:42 build_batch", "train.py:57 tokenise"}  # library frame skipped
    by_line = {o.name: o.us_per_step for o in finding.offenders if o.label == "code"}
    work = next(e.value for e in finding.evidence if e.metric == "host work per step")
    assert sum(by_line.values()) == pytest.approx(work, rel=0.01)  # the lines account for the host work
    assert not any(e.metric == "command that would name the code" for e in finding.evidence)


def test_attribution_shares_each_stretch_among_its_samples():
    from diagnose.metrics.pyframes import PySamples

    s = PySamples(
        t=np.array([1.0, 2.0, 3.0, 12.0]),
        where=np.array(["a:1 f", "a:1 f", "b:2 g", "b:2 g"], dtype=object),
        file=np.array(["a", "a", "b", "b"], dtype=object),
        line=np.array([1, 1, 2, 2]),
        function=np.array(["f", "f", "g", "g"], dtype=object),
        interval_s=0.001,
        cost={},
        path="",
    )
    out = s.attribute(np.array([[0.0, 6.0], [10.0, 14.0], [20.0, 21.0], [20_000.0, 20_002.0]]))
    got = dict(zip(out["where"], out["us"]))
    # [20, 21] has no sample inside: it goes to the nearest (12.0, within NEAREST_US); the last is far from any
    assert got == pytest.approx({"a:1 f": 4.0, "b:2 g": 2.0 + 4.0 + 1.0, NO_SAMPLE: 2.0})


def test_samples_without_their_clock_range_are_refused_with_a_warning(tmp_path):
    folder = _copy_capture(tmp_path, "host_loader_inline")
    trace = load_target(folder)
    _synthetic_samples(folder, trace, stacks=[[0]], frames=[["/x/train.py", 1, "f"]])
    doc = json.loads(gzip.decompress((folder / SAMPLES_FILE).read_bytes()))
    doc["clock"]["marker"] = "diagnose/pysamples clock"
    (folder / SAMPLES_FILE).write_bytes(gzip.compress(json.dumps(doc).encode()))
    trace = load_target(folder)
    samples, problem = python_samples(trace)
    assert samples is None and "Python stack samples not used" in problem
    d = diagnose_trace(trace)
    assert any("Python stack samples not used" in w for w in d.warnings)


# -- trace mode --------------------------------------------------------------------------------


def test_trace_mode_fires_lower_and_gives_the_command_that_would_name_the_code(tmp_path):
    """HTA's triton_example with its profiling-session span taken out (SYNTHETIC, derived): its step then
    runs 13.3 s past its last event with nothing recorded, host time that nothing names. (With the span,
    the step is cut at the session's end: tests/test_step_finding.py.)"""
    doc = json.loads(gzip.decompress((PEER_TRACES / "hta" / "triton_example" / "triton_example.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "Trace"]
    path = tmp_path / "triton_example_without_session.synthetic.json"
    path.write_text(json.dumps(doc))
    trace = load_target(path)
    assert trace.session_end_us is None
    finding, _ = _finding(trace, HOST)
    assert finding is not None and finding.severity == "medium"  # high share, nothing names it
    command = next(e.value for e in finding.evidence if e.metric == "command that would name the code")
    assert command.startswith("diagnose ") and "cannot" not in command
    assert "samples the Python stack" in finding.basis


def test_capture_without_samples_gives_its_own_command():
    finding, _ = _finding(load_capture("sync_item"), HOST, **{"host-bound.min_host_share": 0.1})
    command = next(e.value for e in finding.evidence if e.metric == "command that would name the code")
    assert command == "diagnose fixtures/workloads/sync_logging.py:make_step --param sync=True"


def test_alexnet_quiet_line_says_where_the_silent_time_went():
    trace = load_target(next((PEER_TRACES / "hta" / "critical_path" / "alexnet").glob("*.json.gz")))
    finding, d = _finding(trace, HOST)
    assert finding is None
    detail = next(c.detail for c in d.checked if c.rule == "host-bound")
    assert "silent host time 99.5 % of the step" in detail
    assert "inside kernel-launching or compiling ops 99 %" in detail and "aten::cudnn_convolution" in detail
    assert "first-call setup" in detail


def test_a_compiled_regions_steady_host_time_is_not_called_first_call_setup():
    """REAL (H200): hf_generate_static's steady steps spend most of their silent host time inside its compiled
    forward (guards, CUDA-graph bookkeeping): the compiled code's own host side, not compiling or first-call setup."""
    finding, d = _finding(load_capture("hf_generate_static"), HOST)
    assert finding is None
    detail = next(c.detail for c in d.checked if c.rule == "host-bound")
    assert "most in Torch-Compiled Region" in detail and "the compiled code's own host side" in detail
    assert "first-call setup" not in detail


def test_a_graph_tree_step_is_priced_as_one_whole_step_graph_against_its_measured_fix():
    """REAL (H100, compile_graphs_h100: torch.compile mode="reduce-overhead", recorded beside
    benchmarks/whole_step_graph.py's measurement of one hand-captured graph of the whole step, same machine and
    session): every wait of the GPU for the compiled call's host side is what that graph removes, and the estimate
    is within 1.25x of the measured speedup (it was 1.25x from launch-overhead alone, against 2.09x measured)."""
    measured = json.loads((ROOT / "benchmarks" / "results-whole-step-graph-h100.json").read_text())
    assert "H100" in measured["device"] and measured["speedup"] > 1.5
    finding, d = _finding(load_capture("compile_graphs_h100"), HOST)
    assert diagnosis_of(CAPTURES / "compile_graphs_h100").findings[0].rule == "host-bound"
    assert finding.fixes[0].id == "cuda-graphs"
    assert "already replays CUDA graphs" in finding.fixes[0].how
    assert 1 / 1.25 <= finding.est_speedup / measured["speedup"] <= 1.25
    waits = next(e for e in finding.evidence if e.metric.startswith("GPU waiting for the compiled call's host side"))
    host_paced = ("launch", "host_in_ops", "host_work", "host_python", "unexplained")
    idle = sum(b.share for b in d.summary.accounting.buckets if b.id in host_paced)
    assert waits.value == pytest.approx(idle, abs=0.002)
    step = d.summary.accounting.step_us
    assert step / finding.est_speedup >= d.summary.gpu_busy_us_per_step - 0.5  # never faster than the GPU's own work


def test_eager_launches_around_the_compiled_call_keep_the_whole_step_pricing_out():
    """REAL (H200): hf_generate_static's compiled forward replays its graph tree, but generate's loop launches eager
    kernels around it (sampling, the next input ids): its host waits are not the compiled call's own Python, so
    host-bound keeps pricing silent host work only, and stays quiet."""
    trace = load_capture("hf_generate_static")
    m = Metrics(trace)
    assert m.compiled.per_step("replays") > 0 and m.compiled.per_step("launches_outside") > 0
    finding, d = _finding(trace, HOST)
    assert finding is None
    detail = next(c.detail for c in d.checked if c.rule == "host-bound")
    assert detail.startswith("host work in GPU idle time")
    graphs = load_capture("compile_graphs")
    assert Metrics(graphs).compiled.per_step("launches_outside") == 0


def test_silent_split_adds_up():
    for name in ("host_loader_inline", "kv_concat", "sync_item"):
        trace = load_capture(name)
        s = silent_split(trace, Metrics(trace).timeline.silent)
        assert s.named_us + s.unnamed_us + s.setup_us == pytest.approx(s.total_us, rel=1e-6, abs=1e-3)


def test_subtract_intervals():
    a = np.array([[0.0, 10.0], [20.0, 30.0]])
    b = np.array([[2.0, 4.0], [8.0, 22.0], [29.0, 40.0]])
    assert subtract(a, b).tolist() == [[0.0, 2.0], [4.0, 8.0], [22.0, 29.0]]
    assert subtract(a, np.empty((0, 2))).tolist() == a.tolist()


# -- dynamic-shapes ----------------------------------------------------------------------------


def test_dynamic_shapes_names_the_op_its_cost_and_the_changing_shapes():
    finding, _ = _finding(load_capture("kv_concat"), SHAPES)
    ev = {e.metric: e.value for e in finding.evidence}
    assert (finding.offenders[0].label, finding.offenders[0].name) == ("op", "aten::_cudnn_attention_forward")
    assert ev["its host µs per step"] > 100 * ev["its kernels' µs per step"]
    assert (
        "1061, 128" in ev["shapes that changed between steps"]
        and "1064, 128" in ev["shapes that changed between steps"]
    )
    assert [x.id for x in finding.fixes] == ["static-shapes", "shape-bucketing"]


def test_dynamic_shapes_is_quiet_on_one_time_setup():
    trace = load_target(next((PEER_TRACES / "hta" / "critical_path" / "alexnet").glob("*.json.gz")))
    finding, d = _finding(trace, SHAPES)
    assert finding is None
    assert "does not recur" in next(c.detail for c in d.checked if c.rule == "dynamic-shapes")


def test_dynamic_shapes_is_quiet_when_shapes_do_not_change():
    trace = load_capture("sync_item")
    finding, d = _finding(trace, SHAPES, **{"dynamic-shapes.min_share": 0.001, "dynamic-shapes.min_host_ratio": 2})
    assert finding is None
    assert "same input shapes every step" in next(c.detail for c in d.checked if c.rule == "dynamic-shapes")


def test_dynamic_shapes_says_when_an_ops_host_time_is_profiled_and_the_step_is_not():
    """REAL (H200): compile_graphs' compiled region holds 490 µs of host time as recorded in one step, against a step
    of about 300 µs without the profiler: the line says which base each number is on."""
    finding, d = _finding(load_capture("compile_graphs"), SHAPES)
    assert finding is None and d.summary.step_time_us < 490
    detail = next(c.detail for c in d.checked if c.rule == "dynamic-shapes")
    assert "490 µs host under the profiler vs 89 µs of kernels" in detail


# -- workloads and capture (CPU) -----------------------------------------------------------------


def test_python_batch_capture_writes_samples_that_name_the_workload(tmp_path, capsys):
    pytest.importorskip("torch")
    from diagnose.commands import main

    out = tmp_path / "cap"
    target = f"{ROOT / 'fixtures' / 'workloads' / 'python_batch.py'}:make_step"
    code = main(
        [
            target,
            "-o",
            str(out),
            "--json",
            "--warmup",
            "1",
            "--steps",
            "3",
            "--timed-steps",
            "2",
            "--param",
            "batch=64",
            "--param",
            "length=256",
            "--param",
            "d_model=16",
        ]
    )
    capsys.readouterr()
    assert code == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["files"]["pysamples"] == SAMPLES_FILE
    samples, _ = python_samples(load_target(out))
    assert samples is not None and len(samples.t)
    assert any("python_batch.py" in w for w in samples.where)
    trace = load_target(out)
    steps = Metrics(trace).steps
    # Aligned to the trace's clock, not merely present: every sample of the workload's own code lies
    # inside the ranges diagnose recorded around its calls (the profiled warm-up step and the measured
    # steps; the warm-up is profiled too, so a share inside the measured steps depends on the load).
    ops = trace.ops
    ranges = ops[ops["name"].str.match(r"^diagnose/(warmup|step) \d+$")]
    assert len(ranges) == 4  # one warm-up step and three measured
    workload = np.array(["python_batch.py" in w for w in samples.where])
    t = samples.t[workload]
    covered = np.zeros(len(t), dtype=bool)
    for start, end in zip(ranges["ts"].to_numpy(float), ranges["end"].to_numpy(float)):
        covered |= (t >= start - 1e3) & (t <= end + 1e3)
    assert covered.all(), t[~covered]
    assert ((t >= steps.start) & (t <= steps.end)).any()
