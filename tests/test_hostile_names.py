"""Names from a trace are untrusted: they reach the terminal inert, and a huge one costs no time.

Built at test time from the real decode_eager capture, with its kernel and op names replaced.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CAPTURES, ROOT
from hostile_guard import untouched_outside

from diagnose.commands import main
from diagnose.base.format import markdown, plain

pytestmark = pytest.mark.hostile

ESCAPES = "\x1b[2J\x1b[31mred\x07"
MARKUP = "[bold red]loud[/]"


def _renamed(tmp_path, make_name) -> str:
    doc = json.loads(gzip.decompress((CAPTURES / "decode_eager" / "trace.json.gz").read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "cpu_op") and event.get("name"):
            event["name"] = make_name(event["name"])
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "diagnose", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_escape_sequences_and_markup_in_names_stay_inert_on_the_terminal(tmp_path):
    trace = _renamed(tmp_path, lambda name: f"{ESCAPES}{MARKUP}{name}")
    proc = _run(trace, "-o", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b[2J" in proc.stdout, "the escape is shown, escaped"
    assert "[bold red]loud[/]" in proc.stdout, "rich markup in a name is printed as text"
    data = json.loads((tmp_path / "out" / "findings.json").read_text())
    assert any(
        isinstance(v, str) and ESCAPES in v for f in data["findings"] for row in f["offenders"] for v in row.values()
    ), "findings.json keeps the names verbatim"


def test_a_huge_kernel_name_costs_no_time_in_the_report(tmp_path):
    trace = _renamed(tmp_path, lambda name: "void " + "ns::" * 4000 + name + "<" + "x" * 16000 + ">(int)")
    started = time.monotonic()
    proc = _run(trace, "-o", str(tmp_path / "out"), "-q")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 60
    assert (tmp_path / "out" / "report.html").stat().st_size > 0


# -- inert in every renderer ---------------------------------------------------------

# A kernel and op name that tries everything: mentions, a reference, HTML, bare URLs, an entity,
# an e-mail address, and a newline that would start a forged verdict line on the terminal.
HOSTILE = (
    "x\nVerdict: HEALTHY @u @o/t #1 https://e.vil www.e.vil <img src=x onerror=alert(1)> me@e.vil &#64;e \u202eevil "
)
PINGS = re.compile(r"@[A-Za-z0-9]")  # what GitHub turns into a mention or an e-mail link
LINKED = [
    PINGS,
    re.compile(r"#\d"),
    re.compile(r"(?i)https?://|www\."),
    re.compile(r"(?<!\\)<img"),
    re.compile(r"(?<!\\)&#"),
]  # a backslash-escaped < or & is text


def _hostile_capture(tmp_path, name: str) -> Path:
    """A copy of a real capture folder, every kernel and op name prefixed with HOSTILE."""
    folder = tmp_path / f"hostile_{name}"
    folder.mkdir()
    shutil.copy(CAPTURES / name / "meta.json", folder)
    doc = json.loads(gzip.decompress((CAPTURES / name / "trace.json.gz").read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("cat") in ("kernel", "cpu_op") and event.get("name"):
            event["name"] = HOSTILE + event["name"]
    (folder / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    return folder


def _assert_inert_markdown(text: str) -> None:
    for pattern in LINKED:
        assert not pattern.search(text), (pattern.pattern, [line for line in text.splitlines() if pattern.search(line)])
    assert "onerror=alert" in text, "the hostile name is shown (escaped), not dropped"


def _assert_inert_terminal(text: str, shortened: bool = False) -> None:
    """One Verdict line (diagnose's own), the newline shown as \\n (or folded into a space where a
    view shortens names), no raw bidirectional override."""
    assert len([line for line in text.splitlines() if line.lstrip().startswith("Verdict:")]) == 1, text
    assert (" Verdict: HEALTHY" if shortened else "\\nVerdict: HEALTHY") in text, "the name is shown, inert"
    assert "\u202e" not in text, "a bidirectional override is shown escaped (or cut off with the name)"
    assert shortened or "\\u202e" in text


@pytest.fixture(scope="module")
def hostile_pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile_names")
    return _hostile_capture(tmp, "decode_eager"), _hostile_capture(tmp, "decode_graphed")


def _strings(value):
    """Every string in a decoded JSON document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _main(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_hostile_names_are_inert_in_the_text_markdown_html_and_json_of_a_run(hostile_pair, tmp_path, capsys):
    before, _ = hostile_pair
    for fmt in ("text", "md"):
        out = tmp_path / f"out_{fmt}"
        with untouched_outside(out, before.parent):
            code, stdout, err = _main(capsys, before, "-o", out, "--format", fmt)
        assert code == 0, err
        if fmt == "text":
            _assert_inert_terminal(stdout)
        else:
            _assert_inert_markdown(stdout)
    html = (tmp_path / "out_text" / "report.html").read_text()
    assert "<img src=x" not in html and "&lt;img src=x" in html
    data = json.loads((tmp_path / "out_text" / "findings.json").read_text())
    assert any(
        isinstance(v, str) and v.startswith(HOSTILE)
        for f in data["findings"]
        for row in f["offenders"]
        for v in row.values()
    ), "findings.json keeps the names exactly"


def test_hostile_names_are_inert_in_every_diff_view(hostile_pair, tmp_path, capsys):
    before, after = hostile_pair
    for fmt in ("text", "md", "json"):
        out = tmp_path / f"diff_{fmt}"
        with untouched_outside(out, before.parent):
            code, stdout, err = _main(capsys, "diff", before, after, "-o", out, "--format", fmt)
        assert code == 0, err
        if fmt == "text":
            _assert_inert_terminal(stdout, shortened=True)
        elif fmt == "md":
            _assert_inert_markdown(stdout)
        else:
            assert any(v.startswith(HOSTILE) for v in _strings(json.loads(stdout))), "diff JSON keeps names exactly"
    html = (tmp_path / "diff_text" / "diff.html").read_text()
    assert "<img src=x" not in html and "&lt;img src=x" in html


def test_a_newline_in_a_path_cannot_add_a_line_to_an_error(tmp_path, capsys):
    """The error line quotes the path the user gave (which a trace's name may have made): still one line."""
    code, _, err = _main(capsys, tmp_path / "x\nVerdict: HEALTHY.json", "-o", tmp_path / "out", "-q")
    assert code == 2
    assert len(err.splitlines()) == 1 and "\\nVerdict: HEALTHY" in err and err.startswith("diagnose: error: ")


@pytest.mark.parametrize(
    "text,shown",
    [
        ("@user", "@\u200buser"),
        ("@org/team", "@\u200borg/team"),
        ("fix #123", "fix \\#\u200b123"),
        ("https://e.vil/x", "https:\u200b//e.vil/x"),
        ("HTTP://E.VIL", "HTTP:\u200b//E.VIL"),
        ("www.e.vil", "www\u200b.e.vil"),
        ("a@b.co", "a@\u200bb.co"),
        ("<script>", "\\<script\\>"),
        ("&#64;user", "\\&\\#\u200b64;user"),
        ("x|y", "x\\|y"),
        ("[a](http://b)", "\\[a\\]\\(http:\u200b//b\\)"),
        ("x\ny", "x\\\\ny"),
        ("`c`", "\\`c\\`"),
    ],
)
def test_markdown_escaping(text, shown):
    assert markdown(text) == shown


@pytest.mark.parametrize(
    "text,shown",
    [
        ("x\nVerdict: HEALTHY", "x\\nVerdict: HEALTHY"),
        ("a\rb", "a\\rb"),
        ("t\tab", "t\\tab"),
        ("\x1b[2J", "\\x1b[2J"),
        ("\u202eabc", "\\u202eabc"),
        ("plain name", "plain name"),
    ],
)
def test_plain_escaping(text, shown):
    assert plain(text) == shown


# -- no raw control byte on stdout, in any format ----------------------------------------

# ESC (a CSI that clears the screen), C1 CSI U+009B (the one-byte form), backspace, DEL, a bidi override
# and isolate, a line separator: each one a terminal acts on (or a browser reorders by).
RAW = "\x1b[2J\x9b31m\x08\x7f\u202e\u2066\u2028"
_RAW_CHAR = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def raw_pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("raw_names")
    pair = []
    for name in ("decode_eager", "decode_graphed"):
        folder = tmp / f"raw_{name}"
        folder.mkdir()
        shutil.copy(CAPTURES / name / "meta.json", folder)
        doc = json.loads(gzip.decompress((CAPTURES / name / "trace.json.gz").read_bytes()))
        for event in doc["traceEvents"]:
            if event.get("cat") in ("kernel", "cpu_op") and event.get("name"):
                event["name"] = RAW + event["name"]
        (folder / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
        pair.append(folder)
    return pair


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
@pytest.mark.parametrize("what", ["run", "diff"])
def test_no_control_or_bidi_character_reaches_stdout_in_any_format(raw_pair, tmp_path, capsys, fmt, what):
    before, after = raw_pair
    argv = [before] if what == "run" else ["diff", before, after]
    code, stdout, err = _main(capsys, *argv, "-o", tmp_path / "out", "--format", fmt)
    assert code == 0, err
    found = sorted({f"U+{ord(c):04X}" for c in _RAW_CHAR.findall(stdout)})
    assert not found, f"{what} --format {fmt}: raw {found} on stdout"
    if fmt == "json":
        assert any(v.startswith(RAW) for v in _strings(json.loads(stdout))), "JSON keeps the names exactly (escaped)"
    else:
        assert "x1b" in stdout or "u001b" in stdout, "the escape is shown, escaped"
