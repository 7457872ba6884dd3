"""The memory rules and the memory record on the real H200 captures, and their edges on hand-built ops."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from diagnose.model.config import Config
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.rulebook.engine import Context
from diagnose.model.findings import Diagnosis
from diagnose.memory.patterns import attention_calls, kv_appends, score_matrices, step_index
from diagnose.memory.record import load_memory
from diagnose.rules import ALL_RULES
from diagnose.trace.frames import OP_COLUMNS
from diagnose.trace.load import empty_trace, load_target

from conftest import CAPTURES, SYNTHETIC, load_capture

GB = 1e9


def rule(rule_id):
    return next(r for r in ALL_RULES if r.id == rule_id)


def finding(diagnosis, rule_id):
    return next(f for f in diagnosis.findings if f.rule == rule_id)


def evidence(f, prefix):
    return next(e.value for e in f.evidence if e.metric.startswith(prefix))


def ops_trace(rows: list[dict]):
    """A trace with only CPU ops (no kernels, no memory): for the shape patterns."""
    trace = empty_trace("hand-made")
    frame = pd.DataFrame(
        [
            {"cat": "cpu_op", "dur": 1.0, "pid": 1, "tid": 1, "external_id": None, "input_types": None, **r}
            for r in rows
        ],
        columns=OP_COLUMNS,
    )
    frame["end"] = frame["ts"] + frame["dur"]
    trace.ops = frame
    return trace


# --- the memory record -------------------------------------------------------------------------


def test_record_of_a_capture_folder():
    record = Context(load_capture("kv_concat"), Config()).memory
    assert record.doc["schema"] == "diagnose.memory/1"
    assert record.peak_allocated == 2387738624 and record.peak_reserved == 9208594432
    assert record.limit == (150109880320, "the device's total memory")
    assert len(record.events) == 412 and not record.out_of_memory  # re-recorded 2026-11-30


def test_the_per_process_cap_is_the_limit_of_an_oom():
    record = load_memory(load_capture("train_oom_capped"))
    limit, source = record.limit
    assert limit == 12 * 2**30 and "12.00 GiB allowed" in source
    assert record.out_of_memory and record.oom["requested_bytes"] == 256 * 2**20


def test_no_record_is_a_clear_skip():
    trace = load_target(SYNTHETIC / "synthetic_launch_edge.json")
    ctx = Context(trace, Config())
    assert ctx.memory is None
    reason = ctx.missing("memory")
    assert "no allocator record" in reason and "profile_memory" in reason
    d = diagnose_trace(trace, rules=[rule("vram-limit")])
    assert d.skipped[0].reason == reason and d.details.memory is None


def test_a_broken_memory_json_is_a_warning(tmp_path):
    folder = tmp_path / "cap"
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"status": "oom", "memory": {"max_allocated_bytes": 5}}))
    (folder / "memory.json").write_text("{not json")
    d = diagnose_trace(load_target(folder))
    assert any("unreadable memory record" in w for w in d.warnings)
    assert d.details.memory.peak_allocated_bytes == 5


# --- a failed capture without a trace ----------------------------------------------------------


def test_oom_without_trace_runs_the_memory_rules_and_skips_the_timeline_rules():
    d = diagnose_trace(load_capture("train_oom_capped"))
    assert d.workload_failed and d.verdict.startswith("The workload ran out of memory")
    gpu_rules = {r.id for r in ALL_RULES if "gpu" in r.needs}
    skipped = {s.rule: s.reason for s in d.skipped}
    assert gpu_rules <= set(skipped)
    assert all("stopped (oom)" in skipped[r] for r in gpu_rules)
    assert [f.rule for f in d.findings] == ["vram-limit"]
    assert "kv-fragmentation" in {c.rule for c in d.checked}
    assert "recorded any op" in skipped["attention-memory"]
    Diagnosis.from_dict(json.loads(json.dumps(d.to_dict())))


# --- attention-memory --------------------------------------------------------------------------


def test_attention_naive_numbers():
    f = finding(
        diagnose_trace(load_capture("attention_naive_8k"), rules=[rule("attention-memory")]), "attention-memory"
    )
    assert f.severity == "high" and [x.id for x in f.fixes] == ["flash-attention", "flex-attention"]
    assert evidence(f, "score matrix [1, 16, 8192, 8192]") == 16 * 8192 * 8192
    assert 10.5 < evidence(f, "memory a fused kernel saves") < 10.8
    assert evidence(f, "dense mask [8192, 8192]") == pytest.approx(0.134, abs=1e-3)
    assert 25 < f.est_speedup < 40  # measured with SDPA: 14,729 -> 422 us, 34.9x
    assert any("attention.py:25" in str(o.get("allocated_by")) for o in f.offenders)


def test_attention_sdpa_is_quiet_with_the_reason():
    d = diagnose_trace(load_capture("attention_sdpa_8k"), rules=[rule("attention-memory")])
    assert not d.findings and "fused SDPA kernels (cudnn)" in d.checked[0].detail


def _hand_attention(softmax_parent: str | None = None):
    qk = {
        "name": "aten::bmm",
        "ts": 1.0,
        "input_dims": [[8, 2048, 64], [8, 64, 2048]],
        "input_types": ["c10::Half", "c10::Half"],
    }
    sm = {
        "name": "aten::_softmax",
        "ts": 3.0,
        "input_dims": [[1, 8, 2048, 2048], [], []],
        "input_types": ["c10::Half", "Scalar", "Scalar"],
    }
    pv = {
        "name": "aten::bmm",
        "ts": 4.0,
        "input_dims": [[8, 2048, 2048], [8, 2048, 64]],
        "input_types": ["c10::Half", "c10::Half"],
    }
    rows = [qk, sm, pv]
    if softmax_parent:
        rows.insert(
            0,
            {
                "name": softmax_parent,
                "ts": 0.5,
                "dur": 10.0,
                "input_dims": [[1, 8, 2048, 64]] * 3,
                "input_types": ["c10::Half"] * 3,
            },
        )
    return rows


def test_score_matrix_needs_the_matmul_that_makes_it():
    ops = ops_trace(_hand_attention()).ops
    (s,) = score_matrices(ops, 1024)
    assert (s.tq, s.tk, s.batch_heads, s.nbytes) == (2048, 2048, 8, 8 * 2048 * 2048 * 2)
    assert score_matrices(ops, 4096) == []
    assert score_matrices(ops[ops["name"] != "aten::bmm"], 1024) == []


def test_sdpa_math_fallback_fires_without_timing():
    trace = ops_trace(_hand_attention("aten::_scaled_dot_product_attention_math"))
    (s,) = score_matrices(trace.ops, 1024)
    assert "math path" in s.how
    assert attention_calls(trace.ops)[0].backend == "math"
    f = finding(diagnose_trace(trace, rules=[rule("attention-memory")]), "attention-memory")
    assert f.severity == "medium" and f.est_speedup is None
    assert "at least the scores and the probabilities" in f.basis


def test_dense_mask_passed_to_sdpa_fires_low():
    q = [1, 8, 4096, 64]
    trace = ops_trace(
        [
            {
                "name": "aten::scaled_dot_product_attention",
                "ts": 1.0,
                "dur": 5.0,
                "input_dims": [q, q, q, [1, 1, 4096, 4096], [], []],
                "input_types": ["c10::BFloat16"] * 3 + ["c10::BFloat16", "Scalar", "Scalar"],
            },
            {
                "name": "aten::_scaled_dot_product_efficient_attention",
                "ts": 2.0,
                "input_dims": [q, q, q, [1, 1, 4096, 4096]],
                "input_types": ["c10::BFloat16"] * 4,
            },
        ]
    )
    (call,) = attention_calls(trace.ops)
    assert call.backend == "efficient" and call.mask.dims == (1, 1, 4096, 4096)
    f = finding(diagnose_trace(trace, rules=[rule("attention-memory")]), "attention-memory")
    assert f.severity == "low" and "dense attn_mask" in f.evidence[0].metric


# --- kv-fragmentation --------------------------------------------------------------------------


def test_kv_concat_numbers():
    f = finding(diagnose_trace(load_capture("kv_concat"), rules=[rule("kv-fragmentation")]), "kv-fragmentation")
    assert f.title.startswith("KV cache grown by concatenation")
    assert evidence(f, "cat appends to a cache per step") == 16
    assert evidence(f, "reserved but not allocated at the peak") == pytest.approx(0.741, abs=0.001)
    assert 3.8 < evidence(f, "more concurrent sequences with a paged cache") < 4.4
    assert evidence(f, "sequences in the batch") == 32
    assert [x.id for x in f.fixes] == ["paged-attention", "kv-quantization", "expandable-segments"]
    assert any("kv_cache.py:35" in str(o.get("allocated_by")) for o in f.offenders)


def test_kv_appends_pattern():
    rows = [
        {
            "name": "aten::cat",
            "ts": float(i),
            "input_dims": [[[4, 8, 100 + i, 64], [4, 8, 1, 64]], []],
            "input_types": ["TensorList", "Scalar"],
        }
        for i in range(3)
    ]
    rows += [
        {"name": "aten::cat", "ts": 9.0, "input_dims": [[[4, 8, 100, 64], [4, 8, 100, 64]], []]},
        {"name": "aten::cat", "ts": 9.5, "input_dims": [[[1], [1], [1]], []]},
    ]
    ops = ops_trace(rows).ops
    found = kv_appends(ops, step_index(ops, None), max_append=16, min_cache=64)
    assert [(a.cache_len, a.added, a.dim, a.out_dims) for a in found] == [
        (100, 1, 2, (4, 8, 101, 64)),
        (101, 1, 2, (4, 8, 102, 64)),
        (102, 1, 2, (4, 8, 103, 64)),
    ]
    assert kv_appends(ops, step_index(ops, None), max_append=16, min_cache=128) == []


# --- vram-limit --------------------------------------------------------------------------------


def test_vram_limit_on_the_oom_training_step():
    f = finding(diagnose_trace(load_capture("train_oom_capped"), rules=[rule("vram-limit")]), "vram-limit")
    assert f.severity == "high" and f.title.endswith("2–3 GPUs of this size needed")
    assert evidence(f, "out of memory in") == "the optimizer step creating its state"
    assert evidence(f, "needed (allocated + failed request)") == pytest.approx(12.95, abs=0.01)
    assert evidence(f, "needed with the full optimizer state") == pytest.approx(25.37, abs=0.01)
    assert [x.id for x in f.fixes] == ["fsdp2", "activation-checkpointing", "tensor-parallel"]


def test_train_fits_breakdown_and_gpu_count():
    d = diagnose_trace(
        load_capture("train_fits"), Config(overrides={"vram-limit.max_peak_share": 0.15}), rules=[rule("vram-limit")]
    )
    parts = {p.part: p.bytes for p in d.details.memory.breakdown.parts}
    assert parts["parameters"] == parts["gradients"] == pytest.approx(4.2955 * GB, rel=1e-3)
    assert parts["optimizer state (AdamW)"] == pytest.approx(8.591 * GB, rel=1e-3)
    assert parts["activations and temporaries"] == pytest.approx(4.632 * GB, rel=1e-3)
    f = finding(d, "vram-limit")
    assert f.severity == "medium" and "FSDP2" in f.basis and f.title.endswith("1 GPU of this size needed")


def test_single_huge_request_is_not_a_vram_limit():
    d = diagnose_trace(load_target(CAPTURES / "sweep_attention_naive" / "seq=32768"), rules=[rule("vram-limit")])
    assert not d.findings and "one huge tensor" in d.checked[0].detail


# --- the report data ---------------------------------------------------------------------------


def test_details_memory_timeline_and_breakdown():
    memory = diagnose_trace(load_capture("attention_naive_8k")).details.memory
    timeline = memory.timeline
    assert timeline.peak_allocated == 10955522048 and len(timeline.steps) == 4
    assert all(len(p) == 3 for p in timeline.points)
    assert memory.breakdown.top_allocating[0].where.endswith("attention.py:25 in naive")
    assert memory.snapshot.fragmentation == pytest.approx(0.6693)


def test_a_reserve_made_before_the_trace_is_not_called_fragmentation(tmp_path):
    """gemv_decode_1tok_w4a16's trace file alone: 2.35 GB reserved from its first allocator event on, 0.75 GB
    allocated at most in the trace (the int4 packing's temporaries peaked before it). Its folder knows the
    run's allocated peak (1.78 GB, meta.json) and is quiet; the trace alone cannot tell the cached reserve
    from fragmentation and says so instead of firing."""
    bare = tmp_path / "trace.json.gz"
    bare.write_bytes((CAPTURES / "gemv_decode_1tok_w4a16" / "trace.json.gz").read_bytes())
    trace = load_target(bare)
    record = load_memory(trace)
    assert record.reserved_before_trace and record.peak_reserved > 2.5 * record.peak_allocated
    d = diagnose_trace(trace, Config(), rules=[rule("kv-fragmentation")])
    assert not any(f.rule == "kv-fragmentation" for f in d.findings)
    quiet = next(c.detail for c in d.checked if c.rule == "kv-fragmentation")
    assert "reserved before the trace's first allocator event" in quiet
    assert not load_memory(load_target(CAPTURES / "gemv_decode_1tok_w4a16")).reserved_before_trace  # meta.json peaks


def test_a_reserve_that_grows_in_the_trace_is_still_weighed(tmp_path):
    bare = tmp_path / "trace.json.gz"  # conv_channels_last_bf16: 3.49 GB reserved at its first event, 3.60 GB later
    bare.write_bytes((CAPTURES / "conv_channels_last_bf16" / "trace.json.gz").read_bytes())
    assert not load_memory(load_target(bare)).reserved_before_trace
