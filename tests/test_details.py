"""The typed Details sections and capture (diagnose/model/details.py and each builder's sections.py): in the
schema, typed by the builders themselves and held by Details as built, encoded as the plain rows were, and an
older findings.json still reads."""

from __future__ import annotations

import json

import msgspec
import pytest

from conftest import CAPTURES, ROOT, load_capture
from diagnose.memory.details import memory_details
from diagnose.memory.sweep import load_sweep
from diagnose.metrics import views
from diagnose.model.config import Config
from diagnose.model.details import Capture, Details, capture_of
from diagnose.model.findings import Diagnosis, findings_schema
from diagnose.ncu import read_ncu
from diagnose.ncu.details import enrich_top_kernels, ncu_details
from diagnose.ncu.roofline import roofline
from diagnose.report.json_report import render_json
from diagnose.ruleset.assemble import details
from diagnose.rulebook.engine import Context

OLD_FINDINGS = ROOT / "fixtures" / "golden" / "old_findings_main_727cab9_ddp_straggler.json"
SECTIONS = {"TopKernel", "StepTimeline", "StepRow", "InventoryRow", "Memory", "PeakBreakdown", "Sweep"}
SECTIONS |= {"Roofline", "RooflinePoint", "Ncu", "NcuKernel", "RankBudget", "FailedRank", "Capture", "Device"}


def plain(value):
    """JSON-shaped builtins of a section, typed or not (numpy numbers as Python ones)."""
    return json.loads(msgspec.json.encode(value, enc_hook=lambda v: v.tolist()))


def test_every_section_and_the_capture_are_in_the_schema():
    schema = findings_schema()
    assert SECTIONS <= set(schema["$defs"])
    refs = {name: prop for name, prop in schema["$defs"]["Details"]["properties"].items()}
    assert "TopKernel" in json.dumps(refs["top_kernels"]) and "Memory" in json.dumps(refs["memory"])
    assert "Capture" in json.dumps(schema["$defs"]["Diagnosis"]["properties"]["capture"])


@pytest.mark.parametrize("name, ncu", [("decode_eager", None), ("matmul_bf16", "matmul_bf16.ncu.csv.gz")])
def test_each_builder_returns_its_typed_section_and_details_holds_it_as_built(name, ncu):
    table = read_ncu(ROOT / "fixtures" / "ncu" / ncu) if ncu else None
    ctx = Context(load_capture(name), Config(), ncu=table)
    made = details(ctx, table, 1.25)
    m = ctx.metrics
    top = views.top_kernels(m)
    built = {
        "top_kernels": enrich_top_kernels(top, m) if table is not None else top,
        "step_timeline": views.step_timeline(m),
        "steps": views.per_step(m),
        "memory": memory_details(ctx),
        "roofline": roofline(m),
        "inventory": views.work_inventory(m),
    }
    if table is not None:
        built["ncu"] = ncu_details(m, table, 1.25)
        assert made.ncu is not None and made.top_kernels[0].sm_pct is not msgspec.UNSET
        assert top[0].sm_pct is msgspec.UNSET  # enriching made new rows; the builder's are as they were
    for section, value in built.items():
        assert value, section
        rows = value if isinstance(value, list) else [value]
        assert all(isinstance(r, msgspec.Struct) for r in rows), section  # typed by the builder, not later
        assert getattr(made, section) == value, section
        # as JSON text (the order of keys counts too): what findings.json writes is the builder's section
        assert json.dumps(plain(getattr(made, section))) == json.dumps(plain(value)), section


def test_a_sweep_section_reads_back_as_written(tmp_path):
    sweep = load_sweep(CAPTURES / "sweep_attention_naive")
    ctx = Context(load_capture("sweep_attention_naive/seq=16384"), Config(), sweep=sweep)
    section = details(ctx).memory
    assert section is not None and section.sweep and section.sweep.param == "seq"
    assert json.dumps(plain(section)) == json.dumps(plain(memory_details(ctx)))


def test_a_column_a_row_lacks_stays_out_of_findings_json():
    d = Diagnosis.from_dict(json.loads(render_json(_decode())))
    data = json.loads(render_json(d))
    assert "sm_pct" not in data["details"]["top_kernels"][0]  # measured without Nsight Compute
    assert "stopped_early" not in data["capture"]["steps"] and "rank" not in data["capture"]
    assert render_json(d) == render_json(_decode())


def test_the_capture_keeps_what_meta_json_had_and_nothing_it_lacked():
    c = capture_of({"status": "oom", "error": {"type": "OOM", "message": "m", "traceback": ""}, "argv": ["x"]})
    assert c.failed and c.error_or_empty.type == "OOM"
    assert msgspec.to_builtins(c) == {"status": "oom", "error": {"type": "OOM", "message": "m", "traceback": ""}}
    assert not Capture().failed and not capture_of({"status": "ok"}).failed
    with pytest.raises(msgspec.ValidationError, match="status"):
        capture_of({"status": 3})


def test_an_older_findings_json_reads_its_sections_typed():
    d = Diagnosis.from_dict(json.loads(OLD_FINDINGS.read_text()))
    assert isinstance(d.details, Details) and d.details.ranks and d.details.ranks[0].wait_basis == ""
    assert d.details.top_kernels and d.details.top_kernels[0].sm_pct is msgspec.UNSET
    assert d.capture.timing and d.capture.timing.paid_step_us


def _decode() -> Diagnosis:
    from diagnose.ruleset.assemble import diagnose_trace

    return diagnose_trace(load_capture("decode_eager"))
