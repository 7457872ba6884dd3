"""The report in a real browser: headless Chromium renders it, runs its script without a console error,
sorts a table on click, and takes a screenshot. Skipped where Chromium is not installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from diagnose.ruleset.assemble import diagnose_trace
from diagnose.rulebook.engine import verdict
from diagnose.model.findings import Diagnosis, Summary
from diagnose.report.html import render_html
from diagnose.model.details import Capture, CaptureError, Device

from conftest import load_capture

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (.ci/run installs it)")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--enable-logging=stderr",
    "--v=0",
]
SECTIONS = (
    "verdict",
    "summary",
    "findings",
    "finding-launch-overhead",
    "charts",
    "timeline",
    "kernel-chart",
    "top-kernels-table",
    "steps-table",
    "rules",
    "capture",
)


def run_chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Open `page` in headless Chromium with a fresh profile; stdout and stderr captured."""
    command = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def console_messages(stderr: str) -> list[str]:
    """What the page wrote to the console (Chromium logs every level as INFO:CONSOLE) or threw."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def write_report(d: Diagnosis, folder: Path, extra_script: str = "") -> Path:
    """report.html for `d` in `folder`, optionally with a script appended that runs after the report's own."""
    html = render_html(d)
    if extra_script:
        html = html.replace("</body>", f"<script>{extra_script}</script></body>")
    path = folder / "report.html"
    path.write_text(html, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def eager() -> Diagnosis:
    """decode_eager: launch-overhead fires."""
    return diagnose_trace(load_capture("decode_eager"))


def test_report_renders_every_section_and_its_script_runs_cleanly(eager, tmp_path):
    result = run_chromium(write_report(eager, tmp_path), tmp_path / "profile", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    for section in SECTIONS:
        assert f'id="{section}"' in dom, section
    assert 'data-ready="1"' in dom, "the report's script did not run to its end"
    assert 'aria-sort="none"' in dom, "sortable tables were not set up"
    assert console_messages(result.stderr) == []


def test_clicking_a_column_header_sorts_the_table(eager, tmp_path):
    column = list(eager.details.steps[0].columns()).index("duration_us")
    click = f"document.querySelectorAll('#steps-table th')[{column}].click();"
    result = run_chromium(write_report(eager, tmp_path, click), tmp_path / "profile", "--dump-dom")
    table = re.search(r'<table class="sortable" id="steps-table">.*?</table>', result.stdout, re.S).group()
    assert 'aria-sort="descending"' in table
    body = table[table.index("<tbody>") :]
    cells = [re.findall(r"<td([^>]*)>", row) for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]
    shown = [float(re.search(r'data-sort="([^"]*)"', row[column]).group(1)) for row in cells]
    durations = [row.duration_us for row in eager.details.steps]
    assert shown == sorted(durations, reverse=True)
    assert console_messages(result.stderr) == []


@pytest.mark.parametrize("status", ["ok", "oom"])
def test_sparse_reports_render_without_console_errors(tmp_path, status):
    d = Diagnosis(
        target="t.json",
        device=Device(),
        summary=Summary(),
        findings=[],
        skipped=[],
        capture=Capture(status=status, error=CaptureError(type="OutOfMemoryError", message="out of memory"))
        if status != "ok"
        else Capture(),
    )
    d = msgspec.structs.replace(d, verdict=verdict(d))
    result = run_chromium(write_report(d, tmp_path), tmp_path / "profile", "--dump-dom")
    assert 'id="verdict"' in result.stdout and 'data-ready="1"' in result.stdout
    assert ('role="alert"' in result.stdout) == (status != "ok")
    assert console_messages(result.stderr) == []


def test_screenshot_of_the_report(eager, tmp_path):
    shot = tmp_path / "report.png"
    result = run_chromium(
        write_report(eager, tmp_path), tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,2000"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert console_messages(result.stderr) == []
