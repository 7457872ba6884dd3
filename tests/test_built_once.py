"""A Diagnosis is built once: a Finding is normalised when made, the Diagnosis by its one constructor,
and neither is patched afterwards, nor are its device, its capture or the rows of its report sections.
Every later step (the engine's framework and in-place passes, --verify, a warning added by a command)
makes a new one and leaves what it was given as it was."""

from __future__ import annotations

import msgspec
import pytest

from diagnose.memory.sections import PeakPart
from diagnose.metrics.sections import TopKernel
from diagnose.model.details import Capture, CaptureError, Details, Device, RankBudget
from diagnose.model.findings import MAX_SPEEDUP, Diagnosis, Evidence, Finding, Offender, Skipped, Summary, Verify
from diagnose.model.fixes import fix
from diagnose.model.frameworks import Framework, in_framework_api
from diagnose.ncu.sections import NcuKernel
from diagnose.rulebook.in_place import pass_over


def finding(*fix_ids: str, est: float | None = None) -> Finding:
    return Finding(
        rule="launch-overhead",
        severity="high",
        title="t",
        evidence=[Evidence("m", 1.0)],
        fixes=[fix(i) for i in fix_ids],
        est_speedup=est,
        recoverable_us=None if est is None else 100.0,
    )


def diagnosis(*findings: Finding) -> Diagnosis:
    return Diagnosis.assemble(
        target="t",
        device=Device(),
        summary=Summary(step_time_us=1000.0),
        findings=list(findings),
        skipped=[],
        checked=[],
        capture=Capture(),
        details=Details(),
        warnings=["from the trace"],
    )


@pytest.mark.parametrize(
    "made, field, value",
    [
        (lambda: finding("cuda-graphs"), "fixes", []),
        (lambda: finding("cuda-graphs"), "verify", []),
        (lambda: finding("cuda-graphs").fixes[0], "passed_over", "in place"),
        (lambda: Offender.of("op", "aten::mm", us_per_step=5.0), "us_per_step", 1.0),
        (lambda: Skipped("r", "why"), "reason", "other"),
        (lambda: Verify(fix="cuda-graphs", applicable=True), "verdict", "verified"),
        (lambda: diagnosis(finding("cuda-graphs")), "findings", []),
        (lambda: diagnosis(), "verdict", "patched"),
        (lambda: diagnosis().summary, "step_time_us", 1.0),
        (lambda: diagnosis().details, "steps", []),
        (lambda: diagnosis().device, "name", "patched"),
        (lambda: diagnosis().capture, "status", "failed"),
        (lambda: Capture(error=CaptureError(type="RuntimeError")).error, "message", "patched"),
        (
            lambda: RankBudget(
                rank=0,
                step_us=1.0,
                step_basis="profiled",
                wait_us=0.0,
                profiled_step_us=1.0,
                wait_share=0.0,
                buckets=[],
            ),
            "wait_us",
            5.0,
        ),
        (lambda: TopKernel("gemm", "kernel", 1, 5.0, 5.0, 0.5), "name", "patched"),
        (lambda: PeakPart("parameters", 1024), "bytes", 0),
        (lambda: NcuKernel("gemm", 5.0, 5.5, *[None] * 8), "bound", "memory"),
    ],
)
def test_a_finding_its_parts_and_a_diagnosis_cannot_be_patched(made, field, value):
    with pytest.raises(AttributeError):
        setattr(made(), field, value)


def test_a_frozen_finding_is_still_normalised_when_made():
    wild = finding("cuda-graphs", est=MAX_SPEEDUP * 10)
    assert wild.est_speedup is None and wild.basis.startswith("no estimate: the computation gave")
    assert isinstance(finding("cuda-graphs", est=2).est_speedup, float)
    row = Offender.of("op", "aten::mm", us_per_step=float("nan"), calls=3)
    assert row.us_per_step is None and row.extra == {"calls": 3}


def test_the_in_place_and_framework_passes_make_new_findings():
    made = finding("pinned-memory", "torch-compile")
    passed = pass_over(made, {"pinned-memory": "pinned already"})
    assert [f.id for f in passed.fixes] == ["torch-compile", "pinned-memory"]
    assert passed.fixes[-1].passed_over == "pinned already"
    assert [f.id for f in made.fixes] == ["pinned-memory", "torch-compile"]
    assert not any(f.passed_over for f in made.fixes) and not made.fixes[0].how.startswith("Passed over")
    written = in_framework_api(made, [Framework("transformers.Trainer", "samples")])
    assert written.fixes[1].api == "transformers.Trainer" and "torch_compile=True" in written.fixes[1].code
    assert made.fixes[1].api == "" and "torch_compile=True" not in made.fixes[1].code
    assert pass_over(made, {}) is made and in_framework_api(made, []) is made  # nothing to change: the same one


def test_verify_entries_and_later_warnings_join_through_a_new_diagnosis():
    d = diagnosis(finding("cuda-graphs", est=1.05), finding("torch-compile", est=1.02))
    entries = [[Verify(fix="cuda-graphs", applicable=False, why="a code change")], []]
    verified = d.verified(entries)
    assert [f.verify for f in verified.findings] == entries and all(f.verify is None for f in d.findings)
    assert verified.verdict == d.verdict and verified.warnings == d.warnings
    noted = verified.noted("--verify: nothing was run")
    assert noted.warnings == ["--verify: nothing was run", "from the trace"] and verified.warnings == ["from the trace"]
    with pytest.raises(ValueError):
        d.verified([[]])
    assert msgspec.json.decode(msgspec.json.encode(noted), type=Diagnosis) == noted
