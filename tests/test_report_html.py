"""The HTML report: its sections and numbers, the failure banner, escaping of trace strings, no external URL."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET

import msgspec
import pytest
from markupsafe import escape

from diagnose.ruleset.assemble import diagnose_trace
from diagnose.rulebook.engine import verdict
from diagnose.metrics.sections import StepRow
from diagnose.model.details import Capture, CaptureError, Device
from diagnose.model.findings import Checked, Diagnosis, Offender, Skipped, Summary
from diagnose.base.format import short_name
from diagnose.report.charts import (
    MIN_CHART_STEPS,
    STEP_COLUMNS,
    step_times_chart,
    step_timeline_chart,
    top_kernels_chart,
)
from diagnose.base.format import column_label
from diagnose.vocabulary.units import duration, percent
from diagnose.report.html import LONGEST_STEPS, FIRST_STEPS, STEP_ROWS, render_html, steps_view
from diagnose.trace import load_target

from conftest import PEER_TRACES, load_capture

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
CPU_ONLY = sorted((PEER_TRACES / "hta" / "cpu_only").glob("*.json.gz"))


def esc(text) -> str:
    """What the template's autoescape makes of `text`."""
    return str(escape(text))


@pytest.fixture(scope="module")
def eager() -> Diagnosis:
    """decode_eager: a real H200 capture where launch-overhead fires."""
    return diagnose_trace(load_capture("decode_eager"))


@pytest.fixture(scope="module")
def eager_html(eager) -> str:
    """The rendered decode_eager report."""
    return render_html(eager)


@pytest.fixture(scope="module")
def graphed() -> Diagnosis:
    """decode_graphed: the same model replayed from a CUDA graph; no rule fires."""
    return diagnose_trace(load_capture("decode_graphed"))


@pytest.fixture(scope="module")
def cpu_only() -> Diagnosis:
    """A CPU-only peer trace (HTA): no GPU, every rule skipped."""
    if not CPU_ONLY:
        pytest.skip("peer trace hta/cpu_only not present")
    return diagnose_trace(load_target(CPU_ONLY[0]))


def failed_without_trace(status: str = "failed") -> Diagnosis:
    """A workload that died before profiling: no trace, no summary, no device."""
    d = Diagnosis(
        target="fixtures/workloads/big.py:make_step",
        device=Device(),
        summary=Summary(),
        findings=[],
        skipped=[Skipped("launch-overhead", "no GPU activity in the trace")],
        capture=Capture(
            target="fixtures/workloads/big.py:make_step",
            mode="function",
            status=status,
            error=CaptureError(
                type="RuntimeError",
                message="shape mismatch in layer 3",
                traceback='Traceback (most recent call last):\n  File "big.py", line 9',
            ),
        ),
    )
    return msgspec.structs.replace(d, verdict=verdict(d))


def svgs(page: str) -> list[str]:
    """Every inline <svg> element of the page."""
    return re.findall(r"<svg\b.*?</svg>", page, re.S)


def test_first_screen_shows_verdict_device_and_headline_numbers(eager, eager_html):
    s, top = eager.summary, eager.findings[0]
    assert esc(eager.verdict) in eager_html
    for fact in ("NVIDIA H200", "132", "2.11.0+cu130", "13.0"):
        assert f"<b>{fact}</b>" in eager_html
    assert esc(eager.target) in eager_html
    assert duration(s.step_time_us) in eager_html
    assert "measured without the profiler" in eager_html
    assert percent(s.gpu_busy_fraction) in eager_html
    assert duration(top.recoverable_us) in eager_html
    assert f"{top.est_speedup:.3g}×" in eager_html
    assert eager_html.index('id="verdict"') < eager_html.index('id="summary"') < eager_html.index('id="findings"')


def test_each_finding_shows_evidence_fixes_estimate_and_why(eager, eager_html):
    assert eager.findings
    for f in eager.findings:
        assert f'id="finding-{f.rule}"' in eager_html
        assert esc(f.title) in eager_html
        assert f'<span class="badge">{f.severity}</span>' in eager_html
        assert f'<code class="rule-id">{f.rule}</code>' in eager_html
        for e in f.evidence:
            assert f">{esc(e.text())}</li>" in eager_html
        for x in f.fixes:
            assert esc(x.title) in eager_html and esc(x.how) in eager_html
            assert f"<pre><code>{esc(x.code)}</code></pre>" in eager_html
        assert esc(f.basis) in eager_html and "How the estimate was made" in eager_html
        assert esc(f.why) in eager_html and "Why this happens" in eager_html


def test_offenders_table_has_a_column_per_key_the_name_first(eager, eager_html):
    f = eager.findings[0]
    table = re.search(rf'<table class="sortable" id="finding-{f.rule}-offenders">.*?</table>', eager_html, re.S)
    assert table, "offenders table missing"
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", table.group())
    assert headers == [column_label(k) for k in f.offenders[0].row()]
    assert headers[0] == column_label(f.offenders[0].key) == "op"
    assert column_label("idle_before_us_per_step") == "idle before µs per step"
    assert table.group().count("<tr>") == len(f.offenders) + 1
    for row in f.offenders:
        assert esc(row.name) in table.group()


def test_top_kernels_table_shortens_names_and_keeps_the_full_one(eager, eager_html):
    table = re.search(r'<table class="sortable" id="top-kernels-table">.*?</table>', eager_html, re.S).group()
    kernels = eager.details.top_kernels
    assert table.count("<tr>") == len(kernels) + 1
    long_names = [k.name for k in kernels if len(k.name) > 44]
    assert long_names, "the capture has long C++ kernel names"
    for name in long_names:
        assert f'title="{esc(name)}"' in table
        assert f">{esc(short_name(name, 44))}</td>" in table


def test_per_step_table_has_a_row_per_step(eager, eager_html):
    table = re.search(r'<table class="sortable" id="steps-table">.*?</table>', eager_html, re.S).group()
    assert table.count("<tr>") == len(eager.details.steps) + 1


def _steps(n: int) -> list[StepRow]:
    """n steps of 100 µs, every 7th one 10× longer."""
    return [StepRow(i, None, 0.0, 1000.0 if i % 7 == 3 else 100.0, 1, 0.0, 0.0, 0.0, 0.0) for i in range(n)]


def test_a_long_trace_lists_its_first_and_longest_steps_and_draws_them_all():
    few = steps_view(_steps(STEP_ROWS))
    assert len(few["steps"]["rows"]) == STEP_ROWS
    many = _steps(5_000)
    view = steps_view(many)
    listed = [row[0]["sort"] for row in view["steps"]["rows"]]
    assert listed[:FIRST_STEPS] == list(range(FIRST_STEPS)) and len(listed) == FIRST_STEPS + LONGEST_STEPS
    assert all(many[i].duration_us == 1000.0 for i in listed[FIRST_STEPS:])
    assert "5,000 measured steps" in view["steps_note"]
    chart = step_times_chart(many)
    ET.fromstring(chart)
    assert chart.count("<rect") >= STEP_COLUMNS and "µs (profiled)" in chart and "median 100 µs" in chart
    assert ">30,000<" not in chart and "step (index among the measured steps)" in chart


def test_the_step_chart_draws_a_line_for_tens_of_steps_and_leaves_a_few_to_the_table():
    assert "<polyline" in step_times_chart(_steps(12))
    assert step_times_chart(_steps(MIN_CHART_STEPS - 1)) == ""
    assert step_times_chart([StepRow(0, None, 0.0, float("nan"), 0, 0.0, 0.0, 0.0, 0.0)] * 30) == ""


def test_charts_are_well_formed_svg_with_axes_and_legend(eager, eager_html):
    charts = svgs(eager_html)
    assert len(charts) == 5  # step budget, timeline, top kernels, roofline, memory over time (4 steps: no step chart)
    for chart in charts:
        ET.fromstring(chart)
    timeline = step_timeline_chart(eager.details.step_timeline)
    assert "stream 7" in timeline and "GPU idle" in timeline
    assert "time since the step started (µs, profiled)" in timeline
    assert "idle: waiting for the host" in timeline and "after a sync" in timeline
    kernels = top_kernels_chart(eager.details.top_kernels)
    assert "µs per step (profiled)" in kernels
    assert f"<title>{esc(eager.details.top_kernels[1].name)}" in kernels


def test_short_name_drops_qualifiers_and_argument_lists():
    name = (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>"
        "(int, float, c10::Half const*, c10::Half const*, c10::Half const*, float*, float*, c10::Half*)"
    )
    assert short_name(name) == "vectorized_layer_norm_kernel<Half, float, false>"
    assert short_name("aten::addmm") == "aten::addmm"
    assert short_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"
    assert short_name("x" * 100, 20) == "x" * 19 + "…"


def test_checked_rules_are_listed_with_their_numbers(graphed):
    page = render_html(graphed)
    assert graphed.checked
    for c in graphed.checked:
        assert re.search(rf'<tr class="checked"><td>{re.escape(c.rule)}</td>.*?{re.escape(esc(c.detail))}', page)
    assert "No bottleneck found" in page


def test_cpu_only_trace_lists_skipped_rules_with_reasons(cpu_only):
    page = render_html(cpu_only)
    assert cpu_only.skipped
    for s in cpu_only.skipped:
        assert f'<tr class="skipped"><td>{esc(s.rule)}</td>' in page
        assert esc(s.reason) in page
    assert "No GPU activity in this trace" in page
    assert "profiled: includes profiler overhead" in page
    assert not svgs(page)


@pytest.mark.parametrize("status", ["oom", "failed"])
def test_failed_workload_shows_the_banner_and_the_error(eager, status):
    error = CaptureError(
        type="torch.OutOfMemoryError",
        message="CUDA out of memory. Tried to allocate 2.00 GiB",
        traceback='Traceback (most recent call last):\n  File "step.py", line 3, in step',
    )
    d = msgspec.structs.replace(eager, capture=msgspec.structs.replace(eager.capture, status=status, error=error))
    page = render_html(msgspec.structs.replace(d, verdict=verdict(d)))
    banner = re.search(
        r'<section class="card verdict sev-failed banner" id="verdict" role="alert">.*?</section>', page, re.S
    )
    assert banner, "failure banner missing"
    assert f"status {status}" in banner.group()
    assert "CUDA out of memory. Tried to allocate 2.00 GiB" in banner.group()
    error = re.search(r'<details id="capture-error" open>.*?</details>', page, re.S).group()
    assert "torch.OutOfMemoryError" in error and esc('File "step.py", line 3') in error


def test_failed_workload_without_a_trace_still_renders():
    page = render_html(failed_without_trace())
    assert 'role="alert"' in page
    assert "shape mismatch in layer 3" in page
    assert "the workload stopped before a step was measured" in page
    assert not svgs(page)


def test_no_banner_when_the_workload_ran(eager_html):
    assert 'role="alert"' not in eager_html and "workload failed" not in eager_html


def test_empty_diagnosis_renders():
    page = render_html(Diagnosis(target="t.json", device=Device(), summary=Summary(), findings=[], skipped=[]))
    assert "No step summary" in page and "No rule ran." in page


def hostile(eager: Diagnosis, payload: str) -> Diagnosis:
    """A copy of `eager` with `payload` in every string a trace or a workload can control."""
    d = copy.deepcopy(eager)
    replace = msgspec.structs.replace  # the Diagnosis and its parts are frozen: the hostile ones are made anew
    capture = replace(
        d.capture,
        target=payload,
        status="failed",
        params={payload: payload},
        error=CaptureError(type=payload, message=payload, traceback=payload),
    )
    f = d.findings[0]
    fixes = [replace(f.fixes[0], title=payload, how=payload, code=payload), *f.fixes[1:]]
    f = replace(
        f,
        evidence=[replace(f.evidence[0], metric=payload), *f.evidence[1:]],
        title=payload,
        why=payload,
        basis=payload,
        fixes=fixes,
        offenders=[Offender.of("op", payload, **{payload: payload, "kernel": payload + "x" * 80})],
    )
    kernels = [replace(k, name=payload, op=payload, input_dims=payload) for k in d.details.top_kernels]
    kernels[0] = replace(kernels[0], name="void ns::" + payload + "(" + payload + ")")
    ops = [replace(op, name=payload, cat=payload) for op in d.details.step_timeline.ops]
    details = replace(
        d.details,
        top_kernels=kernels,
        step_timeline=replace(d.details.step_timeline, ops=ops),
        steps=[replace(step, label=payload) for step in d.details.steps],
    )
    d = replace(
        d,
        target=payload,
        device=replace(d.device, name=payload),
        capture=capture,
        details=details,
        warnings=[payload],
        findings=[f, *d.findings[1:]],
        checked=[Checked(payload, payload)],
        skipped=[Skipped(payload, payload)],
    )
    return replace(d, verdict=verdict(d))


@pytest.mark.parametrize("payload", [SCRIPT, IMG])
def test_untrusted_strings_are_escaped_everywhere(eager, payload):
    page = render_html(hostile(eager, payload))
    assert "<script>alert" not in page
    assert "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page or "&lt;img src=x" in page
    for chart in svgs(page):
        ET.fromstring(chart)
    assert page.count("<script>") == 1  # only the report's own sorting script


def test_chart_functions_escape_names_themselves(eager):
    timeline = eager.details.step_timeline
    ops = [msgspec.structs.replace(op, name=SCRIPT, cat=IMG) for op in timeline.ops]
    timeline = msgspec.structs.replace(timeline, ops=ops)
    kernels = [msgspec.structs.replace(k, name=IMG, op=SCRIPT) for k in eager.details.top_kernels]
    for chart in (step_timeline_chart(timeline), top_kernels_chart(kernels)):
        assert "<script>alert" not in chart and "<img src=x" not in chart
        ET.fromstring(chart)


def test_no_external_url_is_referenced(eager_html, graphed, cpu_only):
    for page in (eager_html, render_html(graphed), render_html(cpu_only), render_html(failed_without_trace("oom"))):
        assert not re.findall(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
        assert "http://" not in page and "https://" not in page
        assert "@import" not in page


def test_report_stays_small(eager_html):
    assert len(eager_html.encode()) < 120_000
