"""torch.compile-aware diagnosis: compile.json from the capture, compiled regions in any trace,
the compile-breaks rule, and launch-overhead's note on skipped CUDA graphs."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import pytest

from diagnose.child.compile_log import CompileLog, parse
from diagnose.model.config import Config
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.base.errors import InputError
from diagnose.metrics import Metrics
from diagnose.metrics.compiled import compiled_steps, load_compile_record
from diagnose.rules import ALL_RULES
from diagnose.trace import load_target

from conftest import CAPTURES, ROOT, SYNTHETIC, diagnosis_of

BREAKS = next(r for r in ALL_RULES if r.id == "compile-breaks")
LAUNCH = next(r for r in ALL_RULES if r.id == "launch-overhead")
WORKLOAD = ROOT / "fixtures" / "workloads" / "compile_breaks.py"

BREAK_MSG = (
    "Graph break in user code at /home/u/model.py:37\n"
    "Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call:\n\n"
    "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
    "  Explanation: Dynamo does not support tracing `Tensor.item()`."
)
RECOMPILE_MSG = (
    "Recompiling function forward in /home/u/model.py:27\n"
    "    triggered by the following guard failure(s):\n"
    "    - 0/0: tensor 'x' size mismatch at index 1. expected 512, actual 513"
)
SKIP_MSG = (
    "skipping cudagraphs due to cpu device (arg1_1). Found from : \n"
    '   File "/home/u/model.py", line 44, in forward\n    return x * scale'
)


def test_messages_are_parsed_into_file_line_and_reason():
    brk = parse("graph_break", BREAK_MSG)
    assert (brk["file"], brk["line"]) == ("/home/u/model.py", 37)
    assert brk["reason"] == "Unsupported Tensor.item() call with capture_scalar_outputs=False"
    rec = parse("recompile", RECOMPILE_MSG)
    assert (rec["function"], rec["line"]) == ("forward", 27)
    assert rec["reason"] == "0/0: tensor 'x' size mismatch at index 1. expected 512, actual 513"
    skip = parse("cudagraph_skip", SKIP_MSG)
    assert skip["reason"] == "cpu device (arg1_1)" and skip["line"] == 44


def test_the_log_listens_quietly_to_the_artifact_loggers(capsys):
    log = CompileLog()
    log.install()
    try:
        log.set_phase("profile")
        logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks").debug(BREAK_MSG)
        logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs").warning(SKIP_MSG)
        logging.getLogger("torch._inductor.cudagraph_utils.__cudagraphs").warning("cudagraph tree built")
    finally:
        log.uninstall()
    assert capsys.readouterr().err == ""  # nothing reaches the workload's own log
    doc = log.document()
    assert [(e["kind"], e["phase"], e["line"]) for e in doc["events"]] == [
        ("graph_break", "profile", 37),
        ("cudagraph_skip", "profile", 44),
    ]
    assert doc["schema"] == "diagnose.compile/1"


def test_a_process_that_never_compiled_writes_no_compile_json(tmp_path):
    log = CompileLog()
    log.install()
    assert log.write(tmp_path) is None and not (tmp_path / "compile.json").exists()


def _folder_with(tmp_path, capture: str, doc) -> object:
    folder = tmp_path / capture
    shutil.copytree(CAPTURES / capture, folder)
    (folder / "compile.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return folder


def test_a_compile_record_is_checked_before_it_is_read(tmp_path):
    folder = _folder_with(tmp_path, "swiglu_compiled", "not json")
    warnings = []
    assert load_compile_record(load_target(folder), warnings) is None and "unreadable" in warnings[0]
    folder = _folder_with(
        tmp_path / "b",
        "swiglu_compiled",
        {"schema": "diagnose.compile/1", "events": [{"kind": "graph_break", "line": -3}]},
    )
    with pytest.raises(InputError, match="compile.json"):
        load_compile_record(load_target(folder))


def test_trace_mode_counts_graphs_and_the_time_between_them():
    trace = load_target(SYNTHETIC / "synthetic_compile_breaks.json")
    cs = compiled_steps(trace, Metrics(trace).steps.windows)
    assert cs.marked and list(cs.steps["graphs"]) == [4, 4, 4, 4]
    assert list(cs.steps["between_us"]) == [300.0] * 4 and list(cs.steps["eager_ops_between"]) == [3] * 4
    assert cs.between_ops["name"].tolist() == ["aten::item"]


def _pairs(windows):
    """The steps merged two by two: a unit twice as long, as a trace without markers can be read."""
    return [
        dataclasses.replace(a, cpu_end=b.cpu_end, end=b.end, n_gpu_ops=a.n_gpu_ops + b.n_gpu_ops)
        for a, b in zip(windows[::2], windows[1::2])
    ]


@pytest.mark.parametrize(
    "name,graphs,per_entry,between",
    [("synthetic_compile_breaks.json", 8, 4, 600.0), ("synthetic_compile_onegraph.json", 2, 1, 0.0)],
)
def test_the_time_between_graphs_does_not_hang_on_the_unit(name, graphs, per_entry, between):
    """SYNTHETIC: two compiled calls in one step have the user's code between them, not a break; the breaks
    inside each call still count, twice over."""
    trace = load_target(SYNTHETIC / name)
    cs = compiled_steps(trace, _pairs(Metrics(trace).steps.windows))
    assert set(cs.steps["graphs"]) == {graphs} and set(cs.steps["graphs_per_entry"]) == {per_entry}
    assert set(cs.steps["between_us"]) == {between}


def test_real_compiled_captures_run_one_graph_per_step():
    for name, replays in (("swiglu_compiled", 0), ("swiglu_compiled_graphs", 1)):
        trace = load_target(CAPTURES / name)
        cs = compiled_steps(trace, Metrics(trace).steps.windows)
        assert set(cs.steps["graphs"]) == {1} and set(cs.steps["replays"]) == {replays}
        assert set(cs.steps["inductor_kernels"]) == {1} and cs.steps["between_us"].sum() == 0


def test_the_rule_names_dynamos_line_from_compile_json(tmp_path):
    """A synthetic trace with a compile.json beside it: the finding names the line and the reason."""
    folder = tmp_path / "cap"
    folder.mkdir()
    shutil.copy(SYNTHETIC / "synthetic_compile_breaks.json", folder / "trace.json")
    event = parse("graph_break", BREAK_MSG) | {"phase": "warmup"}
    (folder / "compile.json").write_text(json.dumps({"schema": "diagnose.compile/1", "events": [event]}))
    d = diagnose_trace(load_target(folder / "trace.json"), Config(), rules=[BREAKS])
    finding = d.findings[0]
    where = next(e.value for e in finding.evidence if e.metric == "graph break at")
    assert where.startswith("model.py:37 (Unsupported Tensor.item()")
    assert [x.id for x in finding.fixes] == ["fix-graph-break", "fullgraph"]
    assert "/home/u/model.py:37" in finding.fixes[0].code


def test_launch_overhead_notes_skipped_cuda_graphs_and_keeps_its_finding(tmp_path):
    before = diagnose_trace(load_target(CAPTURES / "decode_eager"), Config(), rules=[LAUNCH]).findings[0]
    event = parse("cudagraph_skip", SKIP_MSG) | {"phase": "warmup"}
    folder = _folder_with(tmp_path, "decode_eager", {"schema": "diagnose.compile/1", "events": [event]})
    after = diagnose_trace(load_target(folder), Config(), rules=[LAUNCH]).findings[0]
    assert (after.est_speedup, after.severity, after.recoverable_us) == (
        before.est_speedup,
        before.severity,
        before.recoverable_us,
    )
    note = next(e.value for e in after.evidence if e.metric == "note")
    assert "skipped them 1 time(s): cpu device (arg1_1) (model.py:44)" in note
    graphs = next(f for f in after.fixes if f.id == "cuda-graphs")
    assert "does it for you" in next(f for f in before.fixes if f.id == "cuda-graphs").how
    assert (
        graphs.how.startswith(note) and "The mode is already on" in graphs.how and "does it for you" not in graphs.how
    )
    assert 'torch.compile(step, mode="reduce-overhead")' not in graphs.code


def test_the_real_skipped_graph_capture_is_told_the_cause_not_the_mode_it_has():
    """REAL (H200, compile_graphs_mutation: reduce-overhead with an input updated in place, which inductor logged
    as the reason it skipped the graphs): the cuda-graphs fix names that cause and says the mode is already on."""
    finding = diagnosis_of(CAPTURES / "compile_graphs_mutation").findings[0]
    graphs = next(f for f in finding.fixes if f.id == "cuda-graphs")
    assert finding.rule == "launch-overhead"
    assert "mutated inputs" in graphs.how and "compile_graphs.py:32" in graphs.how and "already on" in graphs.how


# -- a real CPU capture ------------------------------------------------------------------------------
def _backend() -> str:
    """aot_eager: graph breaks and recompiles are Dynamo's, made before any backend runs, so the
    rule sees the same events; inductor's C++ compile of CPU kernels cost ~100 s a test on the
    2-core CI machine. The bundled H200 captures (fixtures/captures/compile_*) are inductor's."""
    return "aot_eager"


def test_a_cpu_capture_with_a_graph_break_names_its_line_and_fires(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch", reason="capturing needs torch")
    from diagnose.commands import main

    # On a small shared CPU, the intra-op thread pool and inductor's background compile workers
    # make some steps take 2-80 ms instead of ~0.3 ms (a 8x32x64 aten::mm measured 2-8 ms); one
    # thread and foreground compiles keep the measured steps steady.
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "cap"
    code = main(
        [
            "-o",
            str(out),
            "--json",
            "--warmup",
            "10",
            "--steps",
            "4",
            "--timed-steps",
            "5",
            f"{WORKLOAD}:make_step",
            "--param",
            "layers=4",
            "--param",
            "d_model=32",
            "--param",
            "batch=1",
            "--param",
            "seq=8",
            "--param",
            f"backend={_backend()}",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    doc = json.loads((out / "compile.json").read_text())
    breaks = [e for e in doc["events"] if e["kind"] == "graph_break"]
    line = next(i for i, text in enumerate(WORKLOAD.read_text().splitlines(), 1) if ".item() > 1e4" in text)
    assert breaks and {(e["file"], e["line"]) for e in breaks} == {(str(WORKLOAD), line)}
    assert "Tensor.item()" in breaks[0]["reason"]
    assert json.loads((out / "meta.json").read_text())["files"]["compile"] == "compile.json"
    fired = [f for f in data["findings"] if f["rule"] == "compile-breaks"]
    assert fired, [c["detail"] for c in data["checked"] if c["rule"] == "compile-breaks"]
    finding = fired[0]
    assert any(
        e["metric"] == "graph break at" and f"compile_breaks.py:{line}" in e["value"] for e in finding["evidence"]
    )


def test_a_cpu_capture_that_recompiles_every_step_names_the_guard_and_line(tmp_path, capsys, monkeypatch):
    """dynamic=False fed a longer sequence every step: dynamo's recompile reasons reach compile.json
    (they are emitted only once the artifact is enabled) and compile-breaks recommends mark-dynamic.
    The guards and recompiles are dynamo's, as in the graph-break test (_backend: aot_eager)."""
    pytest.importorskip("torch", reason="capturing needs torch")
    from diagnose.commands import main

    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    workload = ROOT / "fixtures" / "workloads" / "compile_shapes.py"
    out = tmp_path / "cap"
    code = main(
        [
            "-o",
            str(out),
            "--json",
            "--warmup",
            "1",
            "--steps",
            "2",
            "--timed-steps",
            "2",
            f"{workload}:make_step",
            "--param",
            "d_model=32",
            "--param",
            "batch=1",
            "--param",
            "start=8",
            "--param",
            f"backend={_backend()}",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    recompiles = [e for e in json.loads((out / "compile.json").read_text())["events"] if e["kind"] == "recompile"]
    forward = next(i for i, text in enumerate(workload.read_text().splitlines(), 1) if "def forward" in text)
    assert recompiles and {e["file"] for e in recompiles} == {str(workload)}
    assert {e["line"] for e in recompiles} == {forward} and "size mismatch" in recompiles[0]["reason"]
    finding = next(f for f in data["findings"] if f["rule"] == "compile-breaks")
    assert finding["fixes"][0]["id"] == "mark-dynamic"


def test_compile_seconds_longer_than_the_steps_are_not_booked_to_them(tmp_path):
    # hf_generate_static (H200, script mode): compile.json books 12.25 s of compiling to the timing
    # phase, whose 30 timed steps last 68 ms in all: it ran between them, not in them
    trace = load_target(ROOT / "fixtures" / "captures" / "hf_generate_static")
    d = diagnose_trace(trace, rules=[BREAKS])
    assert not d.findings and d.checked[0].rule == "compile-breaks"
    assert any("not booked to them" in w and "12.25 s in the timing phase" in w for w in d.warnings)
    # the form a capture made before the warm-up had its own phase: the warm-up's 16 s booked to "profile"
    doc = json.loads((ROOT / "fixtures" / "captures" / "hf_generate_static" / "compile.json").read_text())
    doc["phases"] = {"profile": {"frames_compiled": 124, "compile_s": 16.06}}
    folder = _folder_with(tmp_path, "hf_generate_static", doc)
    d = diagnose_trace(load_target(folder), rules=[BREAKS])
    assert not d.findings
    assert any("16.06 s in the profile phase" in w for w in d.warnings)


def test_a_script_capture_books_the_warm_ups_compiling_to_the_warm_up(tmp_path, monkeypatch):
    """In script mode the profiler runs from the start; what dynamo compiles in the warm-up steps is
    the warm-up's, not the profiled steps' (the steps then last far less than the compile took)."""
    pytest.importorskip("torch", reason="capturing needs torch")
    from diagnose.commands import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    script = tmp_path / "compiled_script.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())\n"
        "compiled = torch.compile(model, backend='eager')\n"
        "x = torch.randn(4, 16)\n"
        "for _ in range(40):\n"
        "    model(x) if False else compiled(x)\n"
    )
    out = tmp_path / "cap"
    assert main(["-o", str(out), "--warmup", "3", "--steps", "2", "--timed-steps", "3", str(script)]) in (0, 1)
    phases = json.loads((out / "compile.json").read_text())["phases"]
    assert phases["warmup"]["frames_compiled"] >= 1
    assert phases.get("profile", {}).get("frames_compiled", 0) == 0


def test_hip_graph_replays_count_as_replays():
    """REAL capture (swiglu_compiled_graphs, H200) with its cudaGraphLaunch renamed as ROCm writes it."""
    trace = load_target(CAPTURES / "swiglu_compiled_graphs")
    runtime = trace.runtime
    runtime["name"] = runtime["name"].replace("cudaGraphLaunch", "hipGraphLaunch")
    assert (trace.runtime["name"] == "hipGraphLaunch").any()
    cs = compiled_steps(trace, Metrics(trace).steps.windows)
    assert set(cs.steps["replays"]) == {1}
