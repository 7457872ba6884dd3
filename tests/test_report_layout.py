"""The report and the diff page at 800 and 1400 px in headless Chromium: nothing clipped, no chart
text drawn smaller than legible, no two chart labels on top of each other, no page wider than the
window. Skipped where Chromium is not installed (.ci/run installs it)."""

from __future__ import annotations

import functools
import html
import json
import re
from pathlib import Path

import pytest

from diagnose.report.html import render_html
from diagnose.report.svg import LEGIBLE_PX

from conftest import CAPTURES, ROOT, diagnosis_of
from test_browser import CHROMIUM, run_chromium

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")

# Captures whose reports hold every kind of part: long fix code, wide offender tables, a roofline
# crowded with ceilings and points, memory charts, a failed run's traceback, rank views.
REPORTS = [
    "decode_eager",
    "attention_naive_8k",
    "regress_base",
    "compile_breaks",
    "compile_new_shapes",
    "train_oom_capped",
    "conv_nchw",
    "kv_concat",
    "host_loader_inline",
    "ddp_straggler",
]
WIDTHS = (800, 1400)

PROBE = """(() => {
  const problems = [];
  const page = document.documentElement.clientWidth;
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + ' "' + (el.textContent || '').trim().slice(0, 50) + '"';
  if (document.documentElement.scrollWidth > page + 1)
    problems.push({kind: 'page-wider', what: 'the page', width: document.documentElement.scrollWidth, room: page});
  for (const el of document.querySelectorAll('pre, .table-wrap, .chart-card, table, .code, h1, p, li')) {
    if (el.scrollWidth > el.clientWidth + 1)
      problems.push({kind: 'overflow', what: name(el), width: el.scrollWidth, room: el.clientWidth,
                     scrolls: ['auto', 'scroll'].includes(getComputedStyle(el).overflowX)});
  }
  for (const el of document.body.querySelectorAll('*')) {
    const o = getComputedStyle(el).overflowX;
    if ((o === 'hidden' || o === 'clip') && el.scrollWidth > el.clientWidth + 1)
      problems.push({kind: 'clipped', what: name(el), width: el.scrollWidth, room: el.clientWidth});
  }
  for (const svg of document.querySelectorAll('svg')) {
    const ctm = svg.getScreenCTM(), scale = ctm ? ctm.a : 1, boxes = [];
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (!r.width) continue;
      const px = parseFloat(getComputedStyle(t).fontSize) * scale;
      if (px < MIN_PX) problems.push({kind: 'small-text', what: name(t), px: px});
      boxes.push([r, t]);
    }
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const [a, ta] = boxes[i], [b, tb] = boxes[j];
      const ox = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const oy = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (ox > 1 && oy > 1) problems.push({kind: 'collide', what: name(ta) + ' / ' + name(tb)});
    }
  }
  const out = document.createElement('pre');
  out.id = 'layout-probe';
  out.textContent = JSON.stringify(problems);
  document.body.appendChild(out);
})();""".replace("MIN_PX", repr(LEGIBLE_PX - 0.05))


@functools.cache
def report_html(name: str) -> str:
    """report.html of a bundled capture, from the session's analysis of it."""
    return render_html(diagnosis_of(CAPTURES / name))


@functools.cache
def diff_page() -> str:
    """diff.html of two bundled captures: a regression with many moved kernels and ops."""
    from diagnose.diff import diff_diagnoses
    from diagnose.report.diff_html import render_diff_html

    before, after = (diagnosis_of(CAPTURES / n) for n in ("regress_base", "regress_tf32_off"))
    return render_diff_html(diff_diagnoses(before, after, paths=("regress_base", "regress_tf32_off")))


def layout_problems(page_html: str, width: int, folder: Path) -> list[dict]:
    """What the probe found wrong with `page_html` laid out `width` px wide."""
    page = folder / "page.html"
    page.write_text(page_html.replace("</body>", f"<script>{PROBE}</script></body>"), encoding="utf-8")
    result = run_chromium(page, folder / "profile", "--dump-dom", f"--window-size={width},2400")
    found = re.search(r'<pre id="layout-probe">(.*?)</pre>', result.stdout, re.S)
    assert found, result.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def unacceptable(problems: list[dict], width: int) -> list[dict]:
    """At 1400 px nothing may overflow; at 800 px a table, chart or code block may scroll inside
    its own box (it is not clipped), but nothing may be cut off or widen the page."""
    if width >= 1400:
        return problems
    return [p for p in problems if not (p["kind"] == "overflow" and p["scrolls"])]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", REPORTS)
def test_report_lays_out_at_every_width(name, width, tmp_path):
    problems = unacceptable(layout_problems(report_html(name), width, tmp_path), width)
    assert problems == [], f"{name} at {width} px: {problems[:6]}"


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_page_lays_out_at_every_width(width, tmp_path):
    problems = unacceptable(layout_problems(diff_page(), width, tmp_path), width)
    assert problems == [], f"diff.html at {width} px: {problems[:6]}"


def test_diff_page_wears_the_report_style():
    css = (ROOT / "diagnose" / "report" / "templates" / "report.css").read_text()
    assert css.strip() in diff_page() and css.strip() in report_html("decode_eager")


def test_the_probe_sees_a_clipped_table_and_a_small_label(tmp_path):
    bad = (
        '<html><body><div class="table-wrap" style="width:300px;overflow:hidden"><table><tr><td style="white-space:nowrap">'
        + "x" * 200
        + '</td></tr></table></div><svg viewBox="0 0 1000 100" style="width:300px">'
        '<text x="0" y="50" font-size="12">tiny</text><text x="2" y="50" font-size="12">over</text></svg>'
        "</body></html>"
    )
    kinds = {p["kind"] for p in layout_problems(bad, 1400, tmp_path)}
    assert {"clipped", "overflow", "small-text", "collide"} <= kinds
