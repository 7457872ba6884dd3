"""Thresholds declare the range of values they take, and a value outside it is refused at --set
time (or when pyproject.toml is read) with one line: a threshold a rule divides by is declared
with a `minimum` above 0, so `--set vram-limit.usable_share=0` is exit 2, not a ZeroDivisionError.

Every rule is then run on real captures with every threshold at the lowest value its range
accepts, and again at the highest (1 for a fraction, a huge number otherwise): no exception, strict
JSON (no NaN or Infinity), every renderer still renders.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import CAPTURES, load_capture

from diagnose import report
from diagnose.ruleset.assemble import diagnose_trace
from diagnose.commands import main
from diagnose.model.config import Config
from diagnose.rulebook.engine import known_thresholds
from diagnose.rules import ALL_RULES

pytestmark = pytest.mark.hostile

KNOWN = known_thresholds(ALL_RULES)
# captures on which most rules fire or get far: memory, attention, KV cache, compile, launch, host, sync
CAPTURES_USED = [
    "attention_naive_8k",
    "kv_concat",
    "compile_breaks",
    "decode_eager",
    "matmul_fp32",
    "train_oom_capped",
    "host_loader_inline",
    "sync_item",
    "gemv_decode_1tok",
]


def test_a_divisor_set_to_zero_is_refused_at_set_time(tmp_path, capsys):
    code = main([str(CAPTURES / "matmul_bf16"), "--set", "vram-limit.usable_share=0", "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and not (tmp_path / "o").exists()
    assert err.splitlines() == [
        "diagnose: error: threshold vram-limit.usable_share must be ≥ 0.01 (a rule divides by it), got 0"
    ]


def test_a_divisor_set_to_zero_in_pyproject_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "pyproject.toml").write_text('[tool.diagnose.thresholds]\n"vram-limit.usable_share" = 0\n')
    monkeypatch.chdir(tmp_path)
    code = main([str(CAPTURES / "matmul_bf16"), "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1 and "must be ≥ 0.01 (a rule divides by it)" in err


@pytest.mark.parametrize("key", sorted(KNOWN))
def test_every_threshold_accepts_its_lowest_value_and_nothing_below(key):
    th = KNOWN[key]
    assert th.problem(th.lowest) is None
    assert th.problem(th.default) is None, "the default lies in the declared range"
    below = th.lowest - 1 if th.value_kind == "count" else th.lowest - max(1e-9, th.lowest / 2)
    assert th.problem(below) is not None


def _edge(which: str) -> dict[str, float]:
    out = {}
    for key, th in KNOWN.items():
        if which == "lowest":
            out[key] = th.lowest
        else:
            out[key] = 1.0 if th.value_kind == "fraction" else 1e12
    return out


def _strict(text: str) -> dict:
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"findings JSON holds {name}"))


@pytest.mark.parametrize("name", CAPTURES_USED)
@pytest.mark.parametrize("which", ["lowest", "highest"])
def test_every_rule_runs_with_every_threshold_at_the_edge_of_its_range(name, which):
    trace = load_capture(name)
    d = diagnose_trace(trace, Config(overrides=_edge(which)))
    data = _strict(report.get("json").render(d))
    assert len(data["findings"]) + len(data["checked"]) + len(data["skipped"]) == len(ALL_RULES)
    for f in d.findings:
        assert f.est_speedup is None or (math.isfinite(f.est_speedup) and f.est_speedup >= 1)
    for fmt in ("text", "md", "html"):
        assert report.get(fmt).render(d)


def test_the_defect_gate_at_zero_fires_only_on_a_defect(tmp_path, capsys):
    """`compute-bound.min_defect_saving=0` (its lowest) with `min_share` at its default: a capture whose
    matrix math is under `min_share` and has no defect to fix stays quiet, not an IndexError."""
    code = main(
        [str(CAPTURES / "decode_eager"), "--set", "compute-bound.min_defect_saving=0", "-o", str(tmp_path / "o")]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    data = json.loads((tmp_path / "o" / "findings.json").read_text())
    assert "compute-bound" in {c["rule"] if isinstance(c, dict) else c for c in data["checked"]}


@pytest.mark.slow
def test_each_threshold_alone_at_its_lowest_value():
    """One threshold at a time at the lowest value its range accepts, the others at their defaults
    (the edges of one gate meet the defaults of the next: how min_defect_saving=0 failed)."""
    trace = load_capture("decode_eager")
    for key, th in sorted(KNOWN.items()):
        d = diagnose_trace(trace, Config(overrides={key: th.lowest}))
        _strict(report.get("json").render(d))
