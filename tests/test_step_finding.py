"""Steps are found in traces without ProfilerStep ranges (iteration marks, the user's own ranges, a
repeating op pattern), a cold first step is left out, and the summary and report say how."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from diagnose.commands import main
from diagnose.metrics.steps import StepWindow, Steps, _without_cold_start, find_steps
from diagnose.trace import load_target

from conftest import PEER_TRACES, ROOT, diagnosis_of

PARAM = PEER_TRACES / "param" / "linear_kineto.json.gz"
PLAIN = ROOT / "fixtures" / "plain"


def _trace(
    tmp_path,
    iterations: int,
    marks=(),
    step_range: str | None = None,
    first_us: float = 1000.0,
    period_us: float = 1000.0,
):
    """A SYNTHETIC trace of `iterations` loop iterations, each: the `marks` ranges (names), two ops
    launching one kernel each; the first iteration lasts `first_us`, the others `period_us`."""
    events, t, corr = [], 0.0, 1
    for i in range(iterations):
        length = first_us if i == 0 else period_us
        if step_range:
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": step_range,
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": length * 0.9,
                    "args": {},
                }
            )
        offset = 0.0
        for name in marks:
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": name,
                    "pid": 1,
                    "tid": 1,
                    "ts": t + offset,
                    "dur": 20,
                    "args": {},
                }
            )
            offset += 30
        for op in ("aten::mm", "aten::relu"):
            at = t + offset + (length - 300 - offset) * (0 if op == "aten::mm" else 0.5)
            events += [
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    "pid": 1,
                    "tid": 1,
                    "ts": at,
                    "dur": 40,
                    "args": {"External id": corr},
                },
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": at + 5,
                    "dur": 10,
                    "args": {"correlation": corr, "External id": corr},
                },
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"kernel_{op[6:]}",
                    "pid": 0,
                    "tid": 7,
                    "ts": at + 20,
                    "dur": 100,
                    "args": {"correlation": corr, "External id": corr, "device": 0, "stream": 7},
                },
            ]
            corr += 1
        t += length
    path = tmp_path / "synthetic_steps.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    return load_target(path)


def test_profiler_steps_come_first(tmp_path):
    steps = find_steps(_trace(tmp_path, 4, marks=["Optimizer.step#SGD.step"], step_range="ProfilerStep#1"))
    assert steps.how.startswith("ProfilerStep#N")


@pytest.mark.parametrize(
    "mark, edge",
    [
        ("Optimizer.step#SGD.step", "optimizer's step"),
        ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "DataLoader"),
        ("Optimizer.zero_grad#Adam.zero_grad", "zero_grad"),
    ],
)
def test_iteration_marks(tmp_path, mark, edge):
    steps = find_steps(_trace(tmp_path, 6, marks=[mark]))
    assert edge in steps.how and "no ProfilerStep" in steps.how
    assert len(steps.windows) == 5, "six marks make five whole steps"
    assert all(w.duration == pytest.approx(1000.0, abs=150) for w in steps.windows[:-1])
    assert sum(w.n_gpu_ops for w in steps.windows) >= 10


def test_optimizer_step_before_dataloader(tmp_path):
    steps = find_steps(_trace(tmp_path, 5, marks=["enumerate(DataLoader)#_X.__next__", "Optimizer.step#SGD.step"]))
    assert "optimizer's step" in steps.how


def test_user_range_that_repeats(tmp_path):
    steps = find_steps(_trace(tmp_path, 5, marks=["train_step"]))
    assert "'train_step'" in steps.how and len(steps.windows) == 5


def test_two_ranges_repeating_alike_are_not_guessed(tmp_path):
    steps = find_steps(_trace(tmp_path, 5, marks=["forward", "backward"]))
    assert "user's own range" not in steps.how
    assert "repeating pattern" in steps.how, "the op pattern still finds the iterations"


def test_repeating_op_pattern(tmp_path):
    steps = find_steps(_trace(tmp_path, 5))
    assert "repeating pattern of top-level activity" in steps.how
    assert len(steps.windows) == 5


def test_the_last_unmarked_step_holds_the_pause_the_others_hold(tmp_path):
    """SYNTHETIC: every 1,000 µs iteration ends in a 610 µs pause before the next one starts; the last one, with
    no next start, is given the same pause instead of ending at its last activity (470 µs)."""
    steps = find_steps(_trace(tmp_path, 5))
    assert [round(w.duration) for w in steps.windows] == [1000] * 5
    assert "the last step given the 610 µs pause" in steps.how


def test_no_pattern_is_one_window(tmp_path):
    steps = find_steps(_trace(tmp_path, 2))
    assert len(steps.windows) == 1 and "one window" in steps.how and steps.cold_start_us is None


def test_cold_first_step_is_left_out(tmp_path):
    steps = find_steps(_trace(tmp_path, 6, step_range="ProfilerStep#0", first_us=5000.0))
    assert len(steps.windows) == 5 and steps.cold_start_us == pytest.approx(5000, rel=0.05)
    assert "cold start" in steps.how
    assert [w.index for w in steps.windows] == list(range(5))


def test_diagnoses_own_first_step_is_left_out_when_the_profilers_start_up_spills_into_it(tmp_path):
    """SYNTHETIC: diagnose's own step ranges, the first of them 5× the others (compile_graphs' first
    profiled step ran 1,543 µs against 483-781 µs with the same events)."""
    steps = find_steps(_trace(tmp_path, 5, step_range="diagnose/step 0", first_us=5000.0))
    assert len(steps.windows) == 4 and "cold start" in steps.how


def test_a_first_stall_followed_by_a_longer_one_is_kept():
    """host_loader_workers' first four profiled steps: 36 ms, 87 ms, 6 ms, 5 ms (its DataLoader falls
    behind every few steps); the first is not a cold start: the one after it is longer still."""
    windows = [
        StepWindow(index=i, label=f"diagnose/step {i}", cpu_start=t, cpu_end=t + d, start=t, end=t + d)
        for i, (t, d) in enumerate(zip((0, 36_427, 123_436, 129_811), (36_427, 87_009, 6_375, 5_305)))
    ]
    kept = _without_cold_start(Steps(windows, "diagnose step ranges", annotated=True))
    assert len(kept.windows) == 4 and kept.cold_start_us is None


def test_a_slightly_slower_first_step_is_kept(tmp_path):
    steps = find_steps(_trace(tmp_path, 6, step_range="ProfilerStep#0", first_us=1040.0))
    assert len(steps.windows) == 6 and steps.cold_start_us is None


def _windows(durations: list[float]) -> list[StepWindow]:
    starts = np.concatenate(([0.0], np.cumsum(durations)[:-1]))
    return [
        StepWindow(index=i, label="pattern", cpu_start=t, cpu_end=t + d, start=t, end=t + d)
        for i, (t, d) in enumerate(zip(starts, durations))
    ]


def test_an_unmarked_first_step_that_stands_apart_from_an_even_loop_is_left_out():
    """SYNTHETIC, shaped as matmul_fp32 with its markers stripped: diagnose's warm-up step, 1.11x the others,
    which differ by 8 µs among themselves; with markers it is not analysed, so without them it is not either."""
    kept = _without_cold_start(Steps(_windows([23_869, 21_497, 21_493, 21_490, 21_489]), "pattern", True), 1.5)
    assert len(kept.windows) == 4 and kept.cold_start_us == pytest.approx(23_869)
    assert [w.index for w in kept.windows] == [0, 1, 2, 3]


def test_an_unmarked_first_step_within_the_loops_own_spread_is_kept():
    """SYNTHETIC, shaped as kv_concat stripped: the first step is the longest, by less than the others differ."""
    kept = _without_cold_start(Steps(_windows([68_925, 64_350, 67_810, 67_461, 64_580]), "pattern", True), 1.5)
    assert len(kept.windows) == 5 and kept.cold_start_us is None


def test_profiler_step_zero_is_held_to_the_unmarked_bar_and_diagnoses_own_first_step_is_not(tmp_path):
    """SYNTHETIC: ProfilerStep#0 holds the profiler's start-up (1.5x the median leaves it out); diagnose's own
    first step follows a warm-up step that absorbed it (2x)."""
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    steps = find_steps(_trace(tmp_path / "a", 6, step_range="ProfilerStep#0", first_us=1800.0))
    assert len(steps.windows) == 5 and "cold start" in steps.how
    own = find_steps(_trace(tmp_path / "b", 6, step_range="diagnose/step 0", first_us=1800.0))
    assert len(own.windows) == 6 and own.cold_start_us is None


def test_summary_and_report_say_how(tmp_path, capsys):
    path = tmp_path / "synthetic_steps.json.gz"
    _trace(tmp_path, 6, step_range="ProfilerStep#0", first_us=5000.0)
    assert main([str(path), "-o", str(tmp_path / "out"), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert "  steps: ProfilerStep#N ranges" in text and "cold start" in text
    summary = json.loads((tmp_path / "out" / "findings.json").read_text())["summary"]
    assert summary["steps_analysed"] == 5 and summary["cold_start_us"] > 4000


def test_param_trace_steps_and_verdict(tmp_path, capsys):
    """param's 40 iterations of a linear model (RTX 2080 Ti, no ProfilerStep ranges): the optimizer's
    40 steps give 39 whole iterations, and on the profiled step the GPU waits on the host between small
    kernels (the default estimate's verdict is pinned in fixtures/cases/launch-overhead.yaml)."""
    assert main([str(PARAM), "--json", "-o", str(tmp_path), "--set", "timeline.profiler_overhead=0"]) == 0
    data = json.loads(capsys.readouterr().out)
    summary = data["summary"]
    assert summary["steps_analysed"] == 39 and "optimizer's step" in summary["steps_found_by"]
    assert 15_000 < summary["step_time_us"] < 40_000, "one iteration, not the whole trace"
    first = data["findings"][0]
    assert first["rule"] == "launch-overhead" and first["fixes"][0]["id"] == "cuda-graphs"
    # its GPU records' `External id` is their correlation id: kernels are linked to ops by nesting
    assert first["offenders"][0]["op"].startswith("aten::")


def test_identical_layers_of_one_forward_are_not_steps(tmp_path):
    """SYNTHETIC: embedding, six identical layers, head: one forward, not six steps."""
    events, t = [], 0.0
    for name in ["aten::embedding"] + ["aten::rms_norm", "aten::mm", "aten::silu"] * 6 + ["aten::mm_head"]:
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": 10, "args": {}})
        t += 20
    path = tmp_path / "synthetic_layers.json"
    path.write_text(json.dumps({"traceEvents": events}))
    steps = find_steps(load_target(path))
    assert len(steps.windows) == 1 and "one window" in steps.how


TRITON = PEER_TRACES / "hta" / "triton_example" / "triton_example.json.gz"


def test_a_step_left_open_past_the_session_is_cut_at_its_end(tmp_path, capsys):
    """HTA's triton_example: its ProfilerStep#1 is written as lasting 13.3 s, but the profiling session
    (kineto's `Trace` span) ended 1.7 ms into it, after one compiled call and one kernel. The step is cut
    there, the report says so, and the verdict is a cold start, not 13 s of host work."""
    trace = load_target(TRITON)
    assert trace.session_end_us is not None and trace.session_end_us < 2_000
    steps = find_steps(trace)
    assert len(steps.windows) == 1 and steps.windows[0].end <= trace.session_end_us + 1
    assert "13.3 s after the profiling session" in steps.how and "cut at the session's end" in steps.how
    assert main([str(TRITON), "-o", str(tmp_path / "out"), "--no-html"]) == 0
    text = capsys.readouterr().out
    assert "  steps: " in text and "cut at the session's end" in text
    data = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert data["summary"]["profiled_step_time_us"] < 2_000
    assert not data["findings"] and "cold start" in data["verdict"]
    # its ProfilerStep range has another thread id than the ops it holds: the compiled call is still found
    compile_line = next(c["detail"] for c in data["checked"] if c["rule"] == "compile-breaks")
    assert compile_line.startswith("1 compiled graph(s) per step")
    assert main([str(TRITON), "-o", str(tmp_path / "html")]) == 0
    assert "cut at the session&#39;s end" in (tmp_path / "html" / "report.html").read_text()  # the steps caption


def test_steps_inside_the_session_are_left_as_recorded(tmp_path):
    """SYNTHETIC: the same step ranges with a session span that covers them, and one that ends 400 µs
    before the last step's range does (under the slack): nothing is cut."""
    _trace(tmp_path, 4, step_range="ProfilerStep#0")
    path = tmp_path / "synthetic_steps.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for end in (4_000.0, 3_500.0):
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "Trace"] + [
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler (0)",
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "ts": -50,
                "dur": end + 50,
            }
        ]
        path.write_bytes(gzip.compress(json.dumps(doc).encode()))
        steps = find_steps(load_target(path))
        assert "session" not in steps.how and len(steps.windows) == 4


def _op(name: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def test_work_launched_after_the_last_step_is_not_the_steps(tmp_path):
    """SYNTHETIC: two ProfilerStep ranges, each launching one long kernel; after the last range ends, the next
    iteration (recorded until the profiler stopped) launches a kernel on another stream that runs inside the last
    step's window. It is not the step's work: one GPU op per step, not 1.5."""
    from diagnose import analyze

    events = []
    for i, (start, gpu_ts) in enumerate(((0.0, 20.0), (100.0, 520.0))):
        events.append({**_op(f"ProfilerStep#{i}", start, 100.0), "cat": "user_annotation"})
    for corr, (host, gpu_ts, stream, dur) in enumerate(
        ((10.0, 20.0, 7, 500.0), (110.0, 520.0, 7, 500.0), (210.0, 600.0, 8, 50.0)), start=1
    ):
        events += [
            _op("aten::mm", host, 20.0, **{"External id": corr}),
            {**_op("cudaLaunchKernel", host + 5, 5.0, correlation=corr), "cat": "cuda_runtime"},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "kernel_mm",
                "pid": 0,
                "tid": stream,
                "ts": gpu_ts,
                "dur": dur,
                "args": {"correlation": corr, "device": 0, "stream": stream},
            },
        ]
    path = tmp_path / "after_the_last_step.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    d = analyze(path)
    assert d.summary.steps_analysed == 2
    assert d.summary.gpu_ops_per_step == 1.0


def test_a_library_range_is_never_the_users_range(tmp_path):
    """SYNTHETIC: inductor's own range repeats once per iteration; it is activity of the loop, not the user's step
    range, so the steps come from the activity's pattern and the steps line does not call it the user's."""
    steps = find_steps(_trace(tmp_path, 5, marks=["## Call CompiledFxGraph fabc123 ##"]))
    assert "user's own range" not in steps.how
    assert "repeating pattern" in steps.how and len(steps.windows) >= 4


def test_one_step_is_said_to_be_one(tmp_path):
    """SYNTHETIC: a trace with one ProfilerStep range (the tutorial's schedule(wait=1, warmup=1, active=1))
    says that every per-step number rests on one iteration; two steps say nothing of the kind."""
    from diagnose.vocabulary.markers import ONE_STEP

    one = find_steps(_trace(tmp_path, 1, step_range="ProfilerStep#2"))
    assert len(one.windows) == 1 and ONE_STEP in one.how and one.how.startswith("ProfilerStep#N")
    two = find_steps(_trace(tmp_path, 2, step_range="ProfilerStep#2"))
    assert len(two.windows) == 2 and ONE_STEP not in two.how


def test_the_text_report_prints_the_steps_line_of_a_one_step_trace():
    """REAL (H100): the tutorial recipe's trace of a Llama training step shows its steps line."""
    from diagnose.report.text import render_text

    text = render_text(diagnosis_of(PLAIN / "llama_train_bf16" / "scheduled.json.gz"))
    assert "steps: ProfilerStep#N ranges recorded by torch.profiler; one step only" in text
