"""`diagnose diff`: statistics, matching, attribution on the bundled before/after pairs, the gate,
the renderers (the Markdown table parsed with markdown-it-py), the CLI and `--baseline`."""

from __future__ import annotations

import json
import sys

import numpy as np
import msgspec
import pytest
from conftest import CAPTURES, ROOT, diagnosis_of

from diagnose.commands import main
from diagnose.diff import DIFF_SCHEMA, diff_diagnoses
from diagnose.diff.matching import shape_changes
from diagnose.vocabulary.kernels import kernel_family
from diagnose.diff.stats import gate_trips, ratio_interval, step_change

# (before, after, the bucket that caused the change): the bundled H200 pairs of a pathology and its fix
PAIRS = [
    ("decode_eager", "decode_graphed", "launch"),
    ("matmul_fp32", "matmul_bf16", "compute"),
    ("swiglu_eager", "swiglu_compiled", "compute"),
    ("sync_item", "sync_free", "sync_wait"),
    ("host_loader_inline", "host_loader_workers", "host_work"),
]


def analysed(name: str):
    """The capture's analysis at the default settings, made once per session (conftest.diagnosis_of: the
    golden test's, shared among the workers)."""
    return diagnosis_of(CAPTURES / name)


# --- statistics ---------------------------------------------------------------------------------


def test_same_distribution_gives_no_significant_change():
    rng = np.random.default_rng(1)
    a, b = rng.normal(1000, 30, 30), rng.normal(1000, 30, 30)
    change = step_change(list(a), list(b), basis="synthetic")
    low, high = change.interval_pct
    assert low < 0 < high and change.verdict == "no significant change"
    assert not gate_trips(change, 0.0)


def test_a_ten_percent_slowdown_is_slower_and_trips_a_five_percent_gate():
    rng = np.random.default_rng(2)
    a, b = rng.normal(1000, 30, 30), rng.normal(1100, 30, 30)
    change = step_change(list(a), list(b), basis="synthetic")
    assert change.verdict == "slower" and change.interval_pct[0] > 0
    assert gate_trips(change, 5.0) and not gate_trips(change, 15.0)


def test_a_tiny_but_certain_change_stays_below_the_minimum_effect():
    before, after = [1000.0 + i * 0.01 for i in range(30)], [1003.0 + i * 0.01 for i in range(30)]
    change = step_change(before, after, basis="synthetic")
    assert change.excludes_zero() and change.verdict == "no significant change"


def test_the_interval_is_reproducible_and_brackets_the_ratio():
    before, after = [10.0, 11.0, 12.0, 13.0], [20.0, 21.0, 25.0, 22.0]
    first, second = ratio_interval(before, after), ratio_interval(before, after)
    assert first == second and first[1] <= first[0] <= first[2]


# --- matching ------------------------------------------------------------------------------------


def test_cublas_choosing_another_tile_or_precision_is_one_gemm_family():
    names = [
        "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4"
        "_execute_kernel__5x_cublas",
        "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
        "nvjet_sm90_hsh_8x64_64x16_4x1_v_bz_bias_TNN",
    ]
    assert {kernel_family(n) for n in names} == {"gemm"}


def test_template_arguments_and_argument_lists_are_stripped():
    a = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, std::array<char*, 3> >(int, X)"
    b = "void at::native::vectorized_elementwise_kernel<8, at::native::AddFunctor<c10::BFloat16>, std::array<char*, 3> >(int, Y)"
    assert kernel_family(a) == kernel_family(b) == "at::native::vectorized_elementwise_kernel"
    assert kernel_family("triton_red_fused_add_mean_3") == "triton_red_fused_add_mean"
    assert (
        kernel_family("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == "nccl AllReduce"
    )
    assert kernel_family("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD"


def test_an_op_with_new_input_shapes_is_a_shape_change():
    before = {("aten::mm", "[[16, 1024], [1024, 1024]]"): {"us_per_step": 10.0, "kernels_per_step": 1}}
    after = {("aten::mm", "[[8, 1024], [1024, 1024]]"): {"us_per_step": 6.0, "kernels_per_step": 1}}
    (change,) = shape_changes(before, after)
    assert change["op"] == "aten::mm" and change["before"] == ["[[16, 1024], [1024, 1024]]"]
    assert shape_changes(before, before) == []


# --- the bundled pairs ---------------------------------------------------------------------------


@pytest.mark.parametrize("before,after,cause", PAIRS)
def test_the_fix_is_faster_and_attributed_to_its_cause(before, after, cause):
    report = diff_diagnoses(analysed(before), analysed(after), fail_on_regression=5)
    assert report.step.verdict == "faster"
    assert report.top_cause is not None and report.top_cause.id == cause
    assert not report.gate_tripped


@pytest.mark.parametrize("before,after,cause", PAIRS)
def test_undoing_the_fix_is_slower_attributed_to_its_cause_and_trips_the_gate(before, after, cause):
    report = diff_diagnoses(analysed(after), analysed(before), fail_on_regression=5)
    assert report.step.verdict == "slower" and report.top_cause.id == cause
    assert report.gate_tripped


def test_a_capture_against_itself_is_no_change():
    report = diff_diagnoses(analysed("decode_eager"), analysed("decode_eager"), fail_on_regression=0)
    assert report.step.verdict == "no significant change" and not report.gate_tripped
    assert all(abs(b.delta_us) < 1e-9 for b in report.buckets) and report.top_cause is None
    assert all(c.status == "unchanged" for c in report.findings)


def test_the_matmul_precision_change_is_one_gemm_change():
    report = diff_diagnoses(analysed("matmul_fp32"), analysed("matmul_bf16"))
    compute = next(b for b in report.buckets if b.id == "compute")
    top = compute.items[0]
    assert top.name == "gemm" and top.status == "matched" and top.delta_us < -15000
    assert "nvjet" in top.detail and "xmma" in top.detail  # both tiles named, one change


def test_findings_that_disappear_carry_their_evidence():
    report = diff_diagnoses(analysed("sync_item"), analysed("sync_free"))
    sync = next(c for c in report.findings if c.rule == "sync-stall")
    assert sync.status == "disappeared" and sync.before.evidence and sync.after is None
    data = report.to_dict()
    row = next(f for f in data["findings"] if f["rule"] == "sync-stall")
    assert row["before"]["evidence"] and row["after"] is None


def test_json_schema_and_the_buckets_sum_to_the_change():
    report = diff_diagnoses(analysed("decode_eager"), analysed("decode_graphed"))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["schema"] == DIFF_SCHEMA and data["top_cause"] == "launch"
    assert data["step"]["verdict"] == "faster" and data["step"]["n_before"] == 30
    total = sum(b["delta_us"] for b in data["buckets"])
    before = sum(b["before_us"] for b in data["buckets"])
    after = sum(b["after_us"] for b in data["buckets"])
    assert total == pytest.approx(after - before, abs=0.01)
    assert sum(b["share_of_change"] for b in data["buckets"]) == pytest.approx(1.0, abs=0.01)


def test_profiled_durations_are_used_when_a_side_has_no_unprofiled_timing():
    before, after = analysed("decode_eager"), analysed("decode_graphed")
    stripped = msgspec.structs.replace(after, capture=msgspec.structs.replace(after.capture, timing=msgspec.UNSET))
    report = diff_diagnoses(before, stripped)
    # each side on its report's own basis: BEFORE's timed steps, AFTER's profiled ones, and a warning saying so
    assert "own step basis" in report.step.basis
    assert report.step.n_before == len(before.capture.timing.unprofiled_step_us)
    assert report.step.n_after == len(stripped.details.steps)
    assert any("different bases" in w for w in report.warnings)


# --- renderers -----------------------------------------------------------------------------------


def test_markdown_renders_a_table_and_three_top_changes():
    from markdown_it import MarkdownIt

    from diagnose import report as registry

    report = diff_diagnoses(analysed("decode_graphed"), analysed("decode_eager"), fail_on_regression=5)
    text = registry.get("md").render_diff(report, outputs={"diff html": "out dir/diff.html"})
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    kinds = [t.type for t in tokens]
    assert "table_open" in kinds
    rows, row = [], None
    for t in tokens:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(t.content)
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    header, body = rows[0], rows[1:]
    assert header == ["", "before", "after", "change", "share of change"]
    assert body[0][0] == "step time" and all(len(r) == 5 for r in body)
    assert any("launch" in r[0] for r in body)
    ordered = [t for t in tokens if t.type == "ordered_list_open"]
    items = [t for t in tokens if t.type == "list_item_open"]
    assert ordered and len(items) == 3
    assert "out%20dir/diff.html" in text and "TRIPPED" in text


def test_markdown_escapes_names_from_the_trace():
    from diagnose import report as registry

    report = diff_diagnoses(analysed("decode_eager"), analysed("decode_graphed"), paths=("a|b", "<script>"))
    text = registry.get("md").render_diff(report)
    assert "a\\|b" in text and "<script>" not in text


def test_every_renderer_has_a_diff_view():
    from diagnose import report as registry

    report = diff_diagnoses(analysed("sync_item"), analysed("sync_free"))
    assert set(registry.diff_renderers()) >= {"text", "json", "md", "html"}
    html = registry.get("html").render_diff(report)
    assert html.startswith("<!doctype html>") and "sync-stall" in html and "http" not in html.split("<body>")[0]
    assert json.loads(registry.get("json").render_diff(report))["schema"] == DIFF_SCHEMA
    assert "Verdict:" in registry.get("text").render_diff(report)


# --- the command line ----------------------------------------------------------------------------


def test_cli_diff_writes_both_files_and_the_gate_sets_the_exit_code(tmp_path, capsys):
    out = tmp_path / "d"
    code = main(
        [
            "diff",
            str(CAPTURES / "decode_graphed"),
            str(CAPTURES / "decode_eager"),
            "--fail-on-regression",
            "5",
            "-o",
            str(out),
            "--format",
            "json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["gate"] == {"fail_on_regression_pct": 5.0, "tripped": True}
    assert (out / "diff.json").is_file() and (out / "diff.html").is_file()
    assert (
        main(
            [
                "diff",
                str(CAPTURES / "decode_eager"),
                str(CAPTURES / "decode_graphed"),
                "--fail-on-regression",
                "5",
                "-q",
            ]
        )
        == 0
    )


def test_cli_diff_analyses_each_side_once(monkeypatch, capsys):
    from diagnose.front import pipeline

    calls = []
    real = pipeline.analyse
    monkeypatch.setattr(pipeline, "analyse", lambda path, *a, **k: calls.append(path) or real(path, *a, **k))
    assert main(["diff", str(CAPTURES / "sync_item"), str(CAPTURES / "sync_free")]) == 0
    assert len(calls) == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["diff", "nope", str(CAPTURES / "decode_eager")],
        ["diff", str(CAPTURES / "decode_eager")],
        ["diff", str(CAPTURES / "decode_eager"), str(CAPTURES / "decode_eager"), "--fail-on-regression", "-3"],
        ["diff", "model.py:make_step", str(CAPTURES / "decode_eager")],
        [str(CAPTURES / "decode_eager"), "--fail-on-regression", "5"],
        [str(CAPTURES / "decode_eager"), "--baseline", "/no/such/folder"],
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("def make_step():\n    return lambda: None\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("diagnose: error:") and err.count("\n") == 1


def test_baseline_compares_the_run_with_the_folder(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            str(CAPTURES / "decode_eager"),
            "--baseline",
            str(CAPTURES / "decode_graphed"),
            "--fail-on-regression",
            "10",
            "-o",
            str(out),
            "--format",
            "md",
        ]
    )
    text = capsys.readouterr().out
    assert code == 1 and "Slower" in text
    assert {"findings.json", "report.html", "diff.json", "diff.html"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "diff.json").read_text())["top_cause"] == "launch"


# --- the planted-regression workload -------------------------------------------------------------

TINY = dict(batch=2, seq=16, d_model=32, heads=4, layers=2, vocab=64, cpu_work=1, workers=0, device="cpu")


@pytest.mark.parametrize(
    "knob",
    [
        {},
        {"tf32": False},
        {"sdpa": "math"},
        {"item_per_layer": True},
        {"autocast": False},
        {"batch": 1},
        {"workers": 1},
    ],
)
def test_the_regression_workload_runs_each_knob_on_cpu(knob):
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "fixtures" / "workloads"))
    try:
        import regressions
    finally:
        sys.path.pop(0)
    step = regressions.make_step(**{**TINY, **knob})
    step()
    step()


def _recorded():
    sys.path.insert(0, str(ROOT / "fixtures"))
    try:
        from record import CAPTURES as RECORDED, REGRESSIONS
    finally:
        sys.path.pop(0)
    return RECORDED, REGRESSIONS


def test_every_planted_regression_is_recorded():
    recorded, regressions = _recorded()
    assert set(regressions) <= set(recorded) and "regress_base" in recorded
    assert sum(1 for n in recorded if n.startswith("regress_base_r")) >= 10


@pytest.mark.parametrize("name", sorted(_recorded()[1]))
def test_each_planted_regression_is_its_true_cause(name):
    cause = _recorded()[1][name]
    if not (CAPTURES / name).is_dir() or not (CAPTURES / "regress_base").is_dir():
        pytest.skip(f"fixtures/captures/{name} not recorded yet (python fixtures/record.py on a GPU)")
    report = diff_diagnoses(analysed("regress_base"), analysed(name), fail_on_regression=5)
    assert report.buckets[0].id == cause
    if name == "regress_workers0":
        # Measured on the H200: loading in the main process stalls the host for 1.5 ms at the step start,
        # the GPU queue runs dry, and every later launch of the step is exposed: launch grows by 6.3 ms,
        # host work (the DataLoader range, named) by 1.5 ms. The stall is the cause; launch follows from it.
        assert report.buckets[1].id == "launch" and "queue ran dry" in report.buckets[1].note
        assert any("DataLoader" in item.name for item in report.buckets[0].items)
    if name == "regress_half_batch":  # per step it is faster: the shapes say why
        assert report.step.verdict == "faster" and report.shape_changes
    elif name == "regress_item_per_layer":
        # four .item() per step cost 1 % of a 33 ms step on the H200: below a 5 % gate, caught by a 0.5 % one
        assert not report.gate_tripped and report.step.interval_pct[0] > 0
        assert diff_diagnoses(analysed("regress_base"), analysed(name), fail_on_regression=0.5).gate_tripped
    else:
        assert report.step.verdict == "slower" and report.gate_tripped


def test_identical_reruns_do_not_trip_the_gate():
    reruns = sorted(p.name for p in CAPTURES.glob("regress_base_r*"))
    if not reruns or not (CAPTURES / "regress_base").is_dir():
        pytest.skip("the re-runs of regress_base are not recorded yet (python fixtures/record.py on a GPU)")
    tripped = [
        n for n in reruns if diff_diagnoses(analysed("regress_base"), analysed(n), fail_on_regression=5).gate_tripped
    ]
    assert len(reruns) >= 10 and not tripped, f"false alarms: {tripped} of {len(reruns)}"


def test_large_sides_are_analysed_at_the_same_time_with_the_same_result(monkeypatch):
    """Above the size threshold BEFORE is analysed in a forked process while AFTER is analysed here."""
    from diagnose.front import diff_command
    from diagnose.model.config import Config

    paths = [CAPTURES / "sync_item", CAPTURES / "sync_free"]
    sequential = diff_command.analyse_both(paths, Config())
    monkeypatch.setattr(diff_command, "CONCURRENT_MIN_BYTES", 0)
    concurrent = diff_command.analyse_both(paths, Config())
    assert [d.to_dict() for d in concurrent] == [d.to_dict() for d in sequential]


def test_a_drained_queue_is_credited_to_the_stall_only_when_the_launches_are_the_same():
    from diagnose.diff.attribution import BucketChange, drained_queue_first
    from diagnose.model.findings import Summary

    def changes():
        return [
            BucketChange("launch", "launch", 900, 7200),
            BucketChange("host_work", "host work", 0, 1500),
            BucketChange("compute", "compute", 25000, 25010),
        ]

    same = drained_queue_first(changes(), Summary(gpu_ops_per_step=379), Summary(gpu_ops_per_step=379), 7810)
    assert [c.id for c in same[:2]] == ["host_work", "launch"] and "ran dry" in same[1].note
    more_work = drained_queue_first(changes(), Summary(gpu_ops_per_step=379), Summary(gpu_ops_per_step=600), 7810)
    assert more_work[0].id == "launch" and not more_work[0].note, "more launches: dispatch itself grew"
    small = [BucketChange("launch", "launch", 900, 7200), BucketChange("host_work", "host work", 0, 100)]
    assert (
        drained_queue_first(small, Summary(gpu_ops_per_step=379), Summary(gpu_ops_per_step=379), 6400)[0].id == "launch"
    )


def test_the_step_line_names_the_basis_it_compared():
    """Two trace files are compared on their estimated unprofiled steps, and the step line says so (it
    said "profiled"); two capture folders on their unprofiled timing; one of each, each on its own."""
    from diagnose.report.diff_views import step_line

    traces = [diagnosis_of(CAPTURES / name / "trace.json.gz") for name in ("decode_eager", "sync_item")]
    folders = [analysed(name) for name in ("decode_eager", "sync_item")]
    assert "; estimated unprofiled, " in step_line(diff_diagnoses(*traces))
    assert "; unprofiled, " in step_line(diff_diagnoses(*folders))
    assert "; each side's own basis, " in step_line(diff_diagnoses(folders[0], traces[1]))
