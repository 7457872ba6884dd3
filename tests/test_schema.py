"""`diagnose schema`: the JSON Schema of findings.json from the typed model, and files checked against it."""

from __future__ import annotations

import json

import pytest

from diagnose.commands import main
from diagnose.model.findings import LABEL_KEYS, SCHEMA, CheatSheet, Diagnosis, Finding, Offender, Summary, Verify
from diagnose.model.details import Device

from conftest import CAPTURES, ROOT

# findings.json of fixtures/captures/ddp_straggler as diagnose wrote it at main 727cab9, before offenders,
# the summary and verify entries were typed (its largest `details` sections, step_timeline, inventory and
# memory, set to null to keep the file small)
OLD_FINDINGS = ROOT / "fixtures" / "golden" / "old_findings_main_727cab9_ddp_straggler.json"
GOLDEN = ROOT / "fixtures" / "golden" / "findings.json"


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """findings.json of a bundled capture, as `diagnose` writes it."""
    out = tmp_path_factory.mktemp("schema") / "out"
    assert main([str(CAPTURES / "decode_eager"), "-o", str(out), "--no-html", "-q"]) == 0
    return json.loads((out / "findings.json").read_text())


def test_schema_prints_a_json_schema_of_every_part(capsys):
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == SCHEMA
    typed = {"Diagnosis", "Finding", "Evidence", "Fix", "Skipped", "Checked", "Details", "CheatSheet"}
    typed |= {"Offender", "Summary", "Accounting", "Bucket", "RankSummary", "RankRow", "Verify", "Trial", "Numerics"}
    assert typed <= set(schema["$defs"])
    severity = schema["$defs"]["Finding"]["properties"]["severity"]
    assert set(severity["enum"]) == {"high", "medium", "low"}
    offender = schema["$defs"]["Offender"]
    assert set(offender["properties"]["label"]["enum"]) == set(LABEL_KEYS)
    assert {"op", "chain", "allocated_by", "us_per_step", "rank"} <= set(offender["properties"])
    assert "extra" not in offender["properties"] and offender["additionalProperties"]
    assert schema["$defs"]["Summary"]["properties"]["accounting"]


def test_a_written_findings_json_fits_and_reads_back_typed(written, tmp_path, capsys):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(written))
    assert main(["schema", str(path)]) == 0
    assert "fits diagnose.model.findings/1" in capsys.readouterr().out
    d = Diagnosis.from_dict(written)
    assert isinstance(d.findings[0].sheet, CheatSheet) and d.findings[0].sheet.bottleneck
    assert d.to_dict() == written


@pytest.mark.parametrize(
    "spoil, says",
    [
        (lambda d: d["findings"][0].update(severity="urgent"), "severity"),
        (lambda d: d["findings"][0]["evidence"][0].update(value=[1, 2]), "evidence"),
        (lambda d: d.pop("findings"), "findings"),
        (lambda d: d.update(schema="someone.else/3"), "not 'diagnose.model.findings/1'"),
    ],
)
def test_a_findings_json_that_does_not_fit_is_exit_2_naming_the_field(written, spoil, says, tmp_path, capsys):
    data = json.loads(json.dumps(written))
    spoil(data)
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(data))
    assert main(["schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and says in err and len(err.strip().splitlines()) == 1


def test_the_report_shows_the_cheat_sheet_the_finding_carries(written):
    from diagnose.report.html import render_html

    data = json.loads(json.dumps(written))
    data["findings"][0]["sheet"]["bottleneck"] = "a sheet from an older diagnose"
    assert "a sheet from an older diagnose" in render_html(Diagnosis.from_dict(data))


def test_an_offender_is_written_flat_with_its_label_and_read_back_typed(written):
    rows = written["findings"][0]["offenders"]
    assert rows and all(r["label"] == "op" and isinstance(r["op"], str) for r in rows)
    first = Diagnosis.from_dict(written).findings[0].offenders[0]
    assert isinstance(first, Offender) and first.name == rows[0]["op"] and first.key == "op"
    assert first.row() == {k: v for k, v in rows[0].items() if k != "label"}
    assert list(first.row())[0] == "op"  # the name is the first column


def test_a_findings_json_from_before_the_typed_model_reads_typed():
    old = json.loads(OLD_FINDINGS.read_text())
    assert not any("label" in o for f in old["findings"] for o in f["offenders"])
    d = Diagnosis.from_dict(old)
    assert isinstance(d.summary, Summary) and d.summary.accounting.buckets[0].id == "compute"
    assert d.summary.ranks.count == 2 and [r.rank for r in d.summary.ranks.per_rank] == [0, 1]
    assert d.summary.ranks.arrivals.clock_offset_us.keys() == {"0", "1"}
    labels = {f.rule: [o.label for o in f.offenders] for f in d.findings}
    assert labels["launch-overhead"] == ["op"] * 8 and labels["memory-bound"] == ["chain"] * 8
    assert labels["straggler"][0] == "rank" and set(labels["straggler"][1:]) == {"op"}
    again = d.to_dict()
    added = {  # additive, None when absent
        "estimated_unprofiled_step_time_us",
        "profiler_share_of_host_time",
        "python_tracing_us_per_step",
        "estimated_step_range_us",
        "steps_method",
        "step_unit_known",
    }
    assert all(again["summary"][k] is None for k in added)
    ranks = again["summary"]["ranks"]  # the timed arrivals are additive too: None when absent
    assert ranks.pop("timed_arrivals") is None
    for row in ranks["per_rank"]:
        assert row.pop("timed_wait_us") is None and row.pop("timed_step_us") is None
    for row in ranks["arrivals"]["per_rank"]:
        assert row.pop("behind_us") is None and row.pop("behind_host_us") is None
    assert {k: v for k, v in again["summary"].items() if k not in added} == old["summary"]
    for was, now in zip(old["findings"], again["findings"]):  # the same rows, `label` added
        assert [{k: v for k, v in row.items() if k != "label"} for row in now["offenders"]] == was["offenders"]
        assert all(x.pop("passed_over") == "" for x in now["fixes"])  # additive: empty when absent
        assert now.pop("step_range") is None  # additive: None when absent
        assert {k: v for k, v in now.items() if k != "offenders"} == {k: v for k, v in was.items() if k != "offenders"}


def test_the_old_findings_json_fits_the_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from diagnose.model.findings import findings_schema

    validator = jsonschema.Draft202012Validator(findings_schema())
    assert [e.message for e in validator.iter_errors(json.loads(OLD_FINDINGS.read_text()))] == []


def test_every_golden_row_without_its_label_reads_with_the_label_its_rule_gives():
    """An older findings.json has no `label`: every offender shape the rules write (the golden rows, all
    rules and all bundled traces) is read back with the label its rule declares, and the same columns."""
    golden = json.loads(GOLDEN.read_text())
    seen = set()
    for conclusions in golden.values():
        for f in conclusions["findings"]:
            for row in f["offenders"]:
                old = {k: v for k, v in row.items() if k != "label"}
                o = Offender.from_row(old)
                assert o.label == row["label"], (f["rule"], row)
                assert o.row() == old
                seen.add((f["rule"], o.label))
    assert ("host-bound", "code") in seen and ("host-bound", "host work") in seen  # one list, two shapes
    assert len({rule for rule, _ in seen}) >= 14


def test_a_mixed_list_names_each_row_by_its_label():
    from diagnose.report.markdown import render_markdown
    from diagnose.report.text import render_text

    rows = [
        Offender.of("host work", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", us_per_step=900.0),
        Offender.of("code", "train.py:42 build_batch", us_per_step=400.0, share_of_step=0.2),
    ]
    f = Finding("host-bound", "high", "Host-bound", [], [], offenders=rows)
    d = Diagnosis(target="t", device=Device(), summary=Summary(), findings=[f], skipped=[])
    assert "top offender: enumerate(DataLoader)" in render_text(d)
    assert "top offender: enumerate\\(DataLoader\\)" in render_markdown(d)  # Markdown-escaped
    data = json.loads(json.dumps(d.to_dict()))
    assert [r["label"] for r in data["findings"][0]["offenders"]] == ["host work", "code"]
    assert data["findings"][0]["offenders"][1]["code"] == "train.py:42 build_batch"
    assert Diagnosis.from_dict(data).findings[0].offenders == rows
    assert data["summary"] == {}  # a trace with no operation writes an empty summary, as before


def test_verify_entries_are_typed_and_the_old_plain_form_reads():
    from diagnose.verify.model import FixTrial, Verification

    trial = FixTrial(
        "cuda-graph",
        "torch.cuda.graphs",
        "ok",
        verdict="verified",
        speedup=8.6,
        interval=[8.5, 8.8],
        baseline_us=2062.1,
        fixed_us=238.2,
        n_baseline=30,
        n_fixed=30,
        numerics={"verdict": "match", "tensors": 180, "max_abs_diff": 0.0, "failed": 0},
        budget={"step_time_us": 238.2, "gpu_busy_fraction": 0.9, "buckets_us": {"compute": 200.0}},
    )
    v = Verification("cuda-graphs", True, trials=[trial])
    entry = v.record()
    assert isinstance(entry, Verify) and entry.best == "cuda-graph" and entry.trials[0].numerics.tensors == 180
    f = Finding("launch-overhead", "high", "t", [], [], est_speedup=4.1, verify=[entry])
    d = Diagnosis(target="t", device=Device(), summary=Summary(), findings=[f], skipped=[])
    data = json.loads(json.dumps(d.to_dict()))
    assert Diagnosis.from_dict(data).findings[0].verify == [entry]
    data["findings"][0]["verify"] = [v.to_dict()]  # the plain form findings.json held before
    assert Diagnosis.from_dict(data).findings[0].verify[0].trials[0].budget.buckets_us == {"compute": 200.0}


@pytest.mark.parametrize(
    "spoil, says",
    [
        (lambda o: o.update(label="colour"), "label"),
        (lambda o: o.update(rank="one"), "rank"),
    ],
)
def test_an_offender_row_that_does_not_fit_is_named(written, spoil, says, tmp_path, capsys):
    data = json.loads(json.dumps(written))
    spoil(data["findings"][0]["offenders"][0])
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(data))
    assert main(["schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert "offenders[0]" in err and says in err


def test_the_typed_summary_keeps_every_number_the_metrics_give():
    """typed() drops a key its Struct does not declare: every key Metrics.summary writes is declared."""
    from diagnose.model.findings import Accounting
    from diagnose.metrics import Metrics

    from conftest import load_capture

    summary = Metrics(load_capture("decode_eager")).summary()
    assert set(summary) <= set(Summary.__struct_fields__)
    assert set(summary["accounting"]) == set(Accounting.__struct_fields__)
