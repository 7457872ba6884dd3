"""The framework a step runs under, recognised from real H200 captures, and fixes written in its API."""

from __future__ import annotations

import pytest

from diagnose.ruleset.assemble import diagnose_trace
from diagnose.model.config import Config
from diagnose.model.fixes import CODE_COLUMNS
from diagnose.model.frameworks import (
    API_CODE,
    COMPILED_API_CODE,
    Framework,
    detect_frameworks,
    from_frames,
    in_framework_api,
)
from diagnose.model.findings import Finding
from diagnose.metrics import Metrics
from diagnose.model.fixes import fix
from diagnose.rules import ALL_RULES

from conftest import load_capture


@pytest.mark.parametrize(
    "capture, expected",
    [
        ("hf_trainer_fp32", ["transformers.Trainer", "accelerate"]),  # the Trainer runs its backward through accelerate
        ("hf_trainer_bf16", ["transformers.Trainer", "accelerate"]),
        ("hf_generate_dynamic", ["transformers.generate"]),
        ("hf_generate_static", ["transformers.generate"]),
        ("lightning_fp32", ["lightning"]),
        ("tv_resnet50_nchw", ["torchvision"]),
        ("conv_nchw", []),
        ("decode_eager", []),
        ("regress_base", []),
    ],
)
def test_each_capture_names_the_framework_its_step_ran_under(capture, expected):
    trace = load_capture(capture)
    found = [f.key for f in detect_frameworks(trace, Metrics(trace).python_samples)]
    assert [k for k in found if k in expected or k not in ("transformers",)] == expected
    assert "torchvision" not in found or capture.startswith("tv_")  # transformers imports torchvision: not evidence


def _fixes(capture: str, rule: str):
    diagnosis = diagnose_trace(load_capture(capture), Config(), ALL_RULES)
    finding = next(f for f in diagnosis.findings if f.rule == rule)
    return finding.fixes


def test_trainer_fp32_gets_bf16_as_a_training_argument():
    first = _fixes("hf_trainer_fp32", "compute-bound")[0]
    assert first.id == "bf16-tensor-cores" and first.api == "transformers.Trainer"
    assert "TrainingArguments(" in first.code and "bf16=True" in first.code
    assert "transformers/trainer.py" in first.code  # the evidence is named with the code


def test_lightning_fp32_gets_bf16_mixed_precision():
    first = _fixes("lightning_fp32", "compute-bound")[0]
    assert first.api == "lightning" and 'precision="bf16-mixed"' in first.code


def test_generate_gets_a_static_cache_before_graphs():
    fixes = _fixes("hf_generate_dynamic", "launch-overhead")
    assert [f.id for f in fixes] == ["static-shapes", "remove-sync", "cuda-graphs"]
    assert all(f.api == "transformers.generate" for f in fixes)
    assert all('cache_implementation="static"' in f.code for f in fixes)


def test_torchvision_resnet_gets_channels_last_for_torchvision_and_plain_code_stays_plain():
    assert _fixes("tv_resnet50_nchw", "memory-layout")[0].api == "torchvision"
    plain = _fixes("conv_nchw", "memory-layout")[0]
    assert plain.api == "" and "model.to(memory_format=torch.channels_last)" in plain.code


def test_python_function_events_name_the_framework_and_import_time_does_not():
    frames = [
        ("/usr/lib/python3/site-packages/transformers/__init__.py", "<module>"),
        ("/x/site-packages/lightning/pytorch/trainer/trainer.py", "<module>"),
        ("/x/site-packages/transformers/trainer.py", "training_step"),
    ]
    found = from_frames(frames, "python_function events")
    assert [f.key for f in found] == ["transformers.Trainer"]
    assert found[0].evidence == "python_function events: transformers/trainer.py training_step"


def test_a_fix_without_a_variant_for_the_framework_keeps_its_code():
    finding = Finding(rule="x", severity="high", title="t", evidence=[], fixes=[fix("w4a16", code="plain")])
    out = in_framework_api(finding, [Framework("transformers.Trainer", "samples")])
    assert out.fixes[0].code == "plain" and out.fixes[0].api == ""


@pytest.mark.parametrize(
    "fix_id, key, compiled",
    [(f, k, False) for f, variants in API_CODE.items() for k in variants]
    + [(f, k, True) for f, variants in COMPILED_API_CODE.items() for k in variants],
)
def test_every_api_variant_fits_the_report(fix_id, key, compiled):
    finding = Finding(rule="x", severity="high", title="t", evidence=[], fixes=[fix(fix_id)])
    where = Framework(key, "Python stack samples: a/long/path/to/its/file.py fn", compiled=compiled)
    code = in_framework_api(finding, [where]).fixes[0].code
    assert max(len(line) for line in code.splitlines()) <= CODE_COLUMNS


def test_generate_that_already_runs_compiled_is_not_told_to_compile_again():
    plain = Finding(rule="x", severity="high", title="t", evidence=[], fixes=[fix("cuda-graphs")])
    eager = in_framework_api(plain, [Framework("transformers.generate", "samples")]).fixes[0].code
    assert 'cache_implementation="static"' in eager and "already" not in eager
    again = Finding(rule="x", severity="high", title="t", evidence=[], fixes=[fix("cuda-graphs")])
    compiled = in_framework_api(again, [Framework("transformers.generate", "samples", compiled=True)]).fixes[0].code
    assert "already runs the decoding forward compiled" in compiled
    # the static-cache capture (quiet at the default threshold: 23.6 % launch-bound idle < 25 %)
    d = diagnose_trace(
        load_capture("hf_generate_static"), Config(overrides={"launch-overhead.min_recoverable_share": 0.2})
    )
    launch = next(f for f in d.findings if f.rule == "launch-overhead")
    graphs = next(x for x in launch.fixes if x.id == "cuda-graphs")
    assert graphs.api == "transformers.generate" and "already runs the decoding forward compiled" in graphs.code


def test_the_terminal_summary_shows_the_fix_in_the_frameworks_api(tmp_path, capsys):
    from diagnose.commands import main

    from conftest import CAPTURES

    main(["-o", str(tmp_path / "out"), str(CAPTURES / "hf_trainer_fp32")])
    out = capsys.readouterr().out
    assert "in transformers.Trainer: args = TrainingArguments(..., bf16=True)" in out
