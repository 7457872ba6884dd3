"""Hostile input (the input side): each family is built here at test time, small (bombs
are streamed, never files in the repository), and must end in its documented exit code with one
line on stderr and no traceback, within bounds on time and (for the bomb) peak memory.

Error cases run with -q: the progress display is off, so stderr holds only the error line.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from conftest import CAPTURES, ROOT, diagnosis_of
from diagnose.commands import main
from diagnose.base.errors import InputError
from diagnose.trace import load_target, source

sys.path.insert(0, str(ROOT / "fixtures" / "golden"))
import make_golden  # noqa: E402

pytestmark = pytest.mark.hostile

SMALL = CAPTURES / "matmul_bf16"  # a small real H200 capture folder
DEEP = 5000  # nesting levels: past the decoder's recursion limit (~1,000)

# Runs a command and prints, as JSON, its exit code, output and the peak RSS of that command alone.
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.monotonic()
stdin = open(sys.argv[1], "rb") if sys.argv[1] != "-" else subprocess.DEVNULL
r = subprocess.run(sys.argv[2:], stdin=stdin, capture_output=True, text=True, errors="replace")
print(json.dumps({"rc": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "seconds": time.monotonic() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def run_diagnose(*args, stdin: Path | None = None, timeout: float = 120) -> dict:
    """`python -m diagnose ARGS` in a subprocess: rc, stdout, stderr, seconds and peak RSS (MB)."""
    command = [sys.executable, "-c", _MEASURE, str(stdin) if stdin else "-", sys.executable, "-m", "diagnose", *args]
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return json.loads(out.stdout)


def assert_one_line_error(stderr: str, *fragments: str) -> None:
    """stderr is exactly one `diagnose: error:` line (no traceback) holding every fragment."""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("diagnose: error: ") and "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def cli(capsys, *args) -> tuple[int, str]:
    """diagnose.commands.main in this process: (exit code, stderr)."""
    code = main([*map(str, args), "-q"])
    return code, capsys.readouterr().err


def copy_capture(tmp_path: Path, src: Path = SMALL) -> Path:
    folder = tmp_path / "capture"
    shutil.copytree(src, folder)
    return folder


def trace_doc(folder: Path = SMALL) -> dict:
    return json.loads(gzip.decompress((folder / "trace.json.gz").read_bytes()))


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


# -- what may be opened ------------------------------------------------------------------------


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # nobody ever writes: opening it for reading would block forever
    r = run_diagnose(str(fifo), "-o", str(tmp_path / "out"), "-q", timeout=60)
    assert r["rc"] == 2
    assert_one_line_error(r["stderr"], str(fifo), "named pipe")
    assert r["seconds"] < 30


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_an_endless_device_is_refused(device, tmp_path):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    r = run_diagnose(device, "-o", str(tmp_path / "out"), "-q", timeout=60)
    assert r["rc"] == 2
    assert_one_line_error(r["stderr"], device, "character device")
    assert r["seconds"] < 30 and r["peak_mb"] < 500


def test_a_socket_is_refused(tmp_path, capsys):
    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        code, err = cli(capsys, path, "-o", tmp_path / "out")
    assert code == 2
    assert_one_line_error(err, "socket")


def test_an_endless_device_on_standard_input_is_refused(tmp_path):
    r = run_diagnose("-", "-o", str(tmp_path / "out"), "-q", stdin=Path("/dev/zero"), timeout=60)
    assert r["rc"] == 2
    assert_one_line_error(r["stderr"], "standard input", "character device")


# -- standard input and pipes ------------------------------------------------------------------


def _findings(stdout: str) -> list:
    return [(f["rule"], f["severity"], f["title"]) for f in json.loads(stdout)["findings"]]


def test_gzip_on_standard_input_reads_like_the_file(tmp_path):
    """`zcat t.json.gz | diagnose -` and `diagnose - < t.json.gz`: the same findings as the file."""
    expected = run_diagnose(str(SMALL / "trace.json.gz"), "--json", "-o", str(tmp_path / "file"))
    assert expected["rc"] == 0
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress((SMALL / "trace.json.gz").read_bytes()))
    for target, stdin in (("-", SMALL / "trace.json.gz"), ("-", plain), ("/dev/stdin", SMALL / "trace.json.gz")):
        command = [sys.executable, "-m", "diagnose", target, "--json", "-o", str(tmp_path / "pipe")]
        with open(stdin, "rb") as f:  # through a real pipe, as from zcat
            feeder = subprocess.Popen(["cat"], stdin=f, stdout=subprocess.PIPE)
            r = subprocess.run(command, stdin=feeder.stdout, capture_output=True, text=True, timeout=120, cwd=ROOT)
            feeder.stdout.close()
            feeder.wait()
        assert r.returncode == 0, r.stderr
        assert _findings(r.stdout) == _findings(expected["stdout"]), target


def test_a_utf8_byte_order_mark_is_accepted(tmp_path, capsys):
    plain = gzip.decompress((SMALL / "trace.json.gz").read_bytes())
    for name, data in (("bom.json", source.UTF8_BOM + plain), ("bom.json.gz", gzip.compress(source.UTF8_BOM + plain))):
        (tmp_path / name).write_bytes(data)
        code, err = cli(capsys, tmp_path / name, "-o", tmp_path / "out")
        assert code == 0, err


# -- decompression ceiling ---------------------------------------------------------------------


def _write_whitespace_bomb(path: Path, inflated: int) -> None:
    """gzip of `{"traceEvents": [ <inflated bytes of spaces> ]}`, compressed a block at a time."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b" " * (1 << 20)
    with open(path, "wb") as f:
        f.write(deflate.compress(b'{"traceEvents": ['))
        for _ in range(inflated // len(block)):
            f.write(deflate.compress(block))
        f.write(deflate.compress(b"]}"))
        f.write(deflate.flush())


def test_a_gzip_bomb_stops_at_the_ceiling_fast_and_small(tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    _write_whitespace_bomb(bomb, 1 << 30)  # ~1 MB that inflates to 1 GB
    assert bomb.stat().st_size < 2 << 20
    r = run_diagnose(str(bomb), "-o", str(tmp_path / "out"), "-q", timeout=120)
    assert r["rc"] == 2
    assert_one_line_error(r["stderr"], str(bomb), "decompression bomb", "--max-trace-bytes")
    assert r["seconds"] < 20, r["seconds"]
    assert r["peak_mb"] < 500, r["peak_mb"]


def test_the_ceiling_follows_the_compressed_size_with_a_floor_and_a_cap():
    assert source.ceiling(1 << 10) == source.INFLATE_FLOOR_BYTES
    assert source.ceiling(10 << 20) == 100 * (10 << 20)
    assert source.ceiling(1 << 40) == source.MAX_TRACE_BYTES
    assert source.ceiling(1 << 40, max_bytes=123) == 123
    # the bundled traces inflate far less than the ratio allows
    for path in sorted(CAPTURES.glob("*/trace.json.gz")):
        assert len(gzip.decompress(path.read_bytes())) < source.INFLATE_RATIO * path.stat().st_size


def test_max_bytes_bounds_plain_and_gzip_traces(tmp_path):
    with pytest.raises(InputError, match="max-trace-bytes"):
        load_target(SMALL / "trace.json.gz", max_bytes=10_000)
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.decompress((SMALL / "trace.json.gz").read_bytes()))
    with pytest.raises(InputError, match="limit on a trace"):
        load_target(plain, max_bytes=10_000)
    assert len(load_target(plain, max_bytes=plain.stat().st_size).gpu)


def test_whitespace_padding_is_never_copied_into_a_piece(tmp_path):
    """A plain trace padded with whitespace decodes to the same events (the padding is left out)."""
    doc = trace_doc()
    padded = json.dumps(doc).replace('"traceEvents": [', '"traceEvents": [' + " " * (3 << 20), 1)
    padded = padded[: padded.rindex("]")] + "\n" * (3 << 20) + padded[padded.rindex("]") :]
    (tmp_path / "padded.json").write_text(padded)
    assert len(load_target(tmp_path / "padded.json").gpu) == len(load_target(SMALL / "trace.json.gz").gpu)


@pytest.mark.parametrize("cut", [10, 100, -8])
def test_truncated_gzip_is_one_line(tmp_path, capsys, cut):
    data = (SMALL / "trace.json.gz").read_bytes()
    (tmp_path / "t.json.gz").write_bytes(data[:cut])
    code, err = cli(capsys, tmp_path / "t.json.gz", "-o", tmp_path / "out")
    assert code == 2
    assert_one_line_error(err, "gzip")


# -- schemas of the files beside the trace ----------------------------------------------------

META_VARIANTS = {
    "a list": ("[]", "JSON object"),
    "null": ("null", "JSON object"),
    "a string": ('"ok"', "JSON object"),
    "a number": ("3", "JSON object"),
    "status a number": ('{"status": 3}', "$.status"),
    "device a list": ('{"device": []}', "$.device"),
    "sm_count a string": ('{"device": {"sm_count": "many"}}', "$.device.sm_count"),
    "negative memory": ('{"device": {"total_memory_bytes": -1}}', "$.device.total_memory_bytes"),
    "timing a string": ('{"timing": "fast"}', "$.timing"),
    "median a string": ('{"timing": {"median_us": "2 ms"}}', "$.timing.median_us"),
    "step times of text": ('{"timing": {"unprofiled_step_us": ["a"]}}', "$.timing.unprofiled_step_us"),
    "memory file outside": ('{"files": {"memory": "../../etc/passwd"}}', "$.files.memory"),
    "error a string": ('{"error": "boom"}', "$.error"),
    "params nested": ('{"params": {"x": {"y": 1}}}', "$.params"),
    "deep": (nested(DEEP), "nested too deeply"),
}


@pytest.mark.parametrize("variant", META_VARIANTS, ids=list(META_VARIANTS))
def test_meta_json_is_checked_against_its_schema(variant, tmp_path, capsys):
    text, field = META_VARIANTS[variant]
    folder = copy_capture(tmp_path)
    (folder / "meta.json").write_text(text)
    code, err = cli(capsys, folder, "-o", tmp_path / "out")
    assert code == 2
    assert_one_line_error(err, "meta.json", field)


MEMORY_VARIANTS = {
    "a list": ("[]", "JSON object"),
    "stats a list": ('{"schema": "diagnose.memory/1", "stats": [1]}', "$.stats"),
    "peak a string": ('{"schema": "diagnose.memory/1", "stats": {"allocated_bytes.all.peak": "big"}}', "$.stats"),
    "fragmentation above 1": (
        '{"schema": "diagnose.memory/1", "snapshot": {"fragmentation": 7}}',
        "$.snapshot.fragmentation",
    ),
    "top blocks of text": (
        '{"schema": "diagnose.memory/1", "snapshot": {"top_blocks": ["x"]}}',
        "$.snapshot.top_blocks",
    ),
    "oom request a string": (
        '{"schema": "diagnose.memory/1", "oom": {"requested_bytes": "1 GB"}}',
        "$.oom.requested_bytes",
    ),
    "deep": ('{"schema": "diagnose.memory/1", "x": ' + nested(DEEP) + "}", "nested too deeply"),
}


@pytest.mark.parametrize("variant", MEMORY_VARIANTS, ids=list(MEMORY_VARIANTS))
def test_memory_json_is_checked_against_its_schema(variant, tmp_path, capsys):
    text, field = MEMORY_VARIANTS[variant]
    folder = copy_capture(tmp_path, CAPTURES / "train_oom_capped")
    (folder / "memory.json.gz").unlink()  # meta.json names it; a plain memory.json is read when it is gone
    (folder / "memory.json").write_text(text)
    code, err = cli(capsys, folder, "-o", tmp_path / "out")
    assert code == 2
    assert_one_line_error(err, "memory.json", field)


def _ncu_csv() -> str:
    header = '"ID","Kernel Name","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed"'
    return header + '\n"","","usecond","%"\n"0","kernel_a","12.5","{value}"\n'


@pytest.mark.parametrize(
    "value,message", [("inf", "dram_pct"), ("-3", "dram_pct"), ("1" * 200_000, "field larger than field limit")]
)
def test_an_ncu_csv_is_checked(value, message, tmp_path, capsys):
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text(_ncu_csv().replace("{value}", value))
    code, err = cli(capsys, SMALL / "trace.json.gz", "--ncu-csv", csv_path, "-o", tmp_path / "out")
    assert code == 2
    assert_one_line_error(err, "ncu.csv", message)


def test_an_ncu_csv_with_missing_values_is_fine(tmp_path, capsys):
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text(_ncu_csv().replace("{value}", "n/a"))
    code, err = cli(capsys, SMALL / "trace.json.gz", "--ncu-csv", csv_path, "-o", tmp_path / "out")
    assert code == 0, err


# -- deep nesting in the trace ------------------------------------------------------------------


def _with_deep(where: str) -> str:
    doc = trace_doc()
    text = json.dumps(doc)
    if where == "top":
        return nested(DEEP)
    if where == "top-level key":
        return text[:-1] + ', "extra": ' + nested(DEEP) + "}"
    event = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    changed = dict(event)
    if where == "event":
        changed["extra"] = "@@"
    else:
        changed["args"] = {**event.get("args", {}), ("Input Dims" if where == "input dims" else "extra"): "@@"}
    return text.replace(json.dumps(event), json.dumps(changed), 1).replace('"@@"', nested(DEEP))


@pytest.mark.parametrize("where", ["top", "top-level key", "event", "args", "input dims"])
def test_deeply_nested_json_in_a_trace_is_one_line(where, tmp_path, capsys):
    (tmp_path / "deep.json").write_text(_with_deep(where))
    code, err = cli(capsys, tmp_path / "deep.json", "-o", tmp_path / "out")
    assert code == 2
    assert_one_line_error(err, "nested too deeply")


# -- timestamp outliers -------------------------------------------------------------------------


def _same_conclusions(mutated: dict, original: dict) -> None:
    """Same rules firing, quiet and skipped, with the same severity, title, fixes and offending
    ops; the numbers may move by the dropped kernel's share (one of ~390)."""

    def shape(c):
        return (
            [
                (f["rule"], f["severity"], f["title"], f["fixes"], [o.get("op") for o in f["offenders"]])
                for f in c["findings"]
            ],
            c["checked"],
            c["skipped"],
        )

    assert shape(mutated) == shape(original)
    for got, want in zip(mutated["findings"], original["findings"]):
        if want["est_speedup"] is not None:
            assert got["est_speedup"] == pytest.approx(want["est_speedup"], rel=0.02)


@pytest.mark.parametrize("field,value", [("ts", 1e15), ("dur", 1e30), ("ts", -9e18)])
def test_one_far_off_kernel_does_not_wipe_the_diagnosis(field, value, tmp_path):
    original_folder = CAPTURES / "decode_eager"
    doc = trace_doc(original_folder)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    kernels[len(kernels) // 2][field] = value
    folder = tmp_path / "decode_eager"
    folder.mkdir()
    shutil.copy(original_folder / "meta.json", folder)
    (folder / "trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    trace = load_target(folder)
    assert len(trace.gpu) == len(load_target(original_folder).gpu) - 1
    assert any(
        "1 event with times far outside" in w and kernels[len(kernels) // 2]["name"][:40] in w for w in trace.warnings
    ), trace.warnings
    original = make_golden.conclusions(original_folder)
    assert original["findings"], "the original capture must have a finding for this test to mean anything"
    _same_conclusions(make_golden.conclusions(folder), original)


def test_no_bundled_trace_loses_an_event_to_the_outlier_rule():
    for path in make_golden.targets():
        if path.suffix == ".json" or path.name.endswith(".json.gz") or (path / "trace.json.gz").exists():
            warnings = diagnosis_of(path).warnings  # the trace's own warnings among them
            assert not any("far outside" in w for w in warnings), (path, warnings)


def test_loading_stays_fast(tmp_path):
    """The checks are vectorised: the largest bundled capture loads about as fast as before."""
    start = time.monotonic()
    load_target(CAPTURES / "host_loader_inline")
    assert time.monotonic() - start < 30


def test_an_impossible_estimate_is_dropped_with_its_reason():
    """Whatever a rule computes from a broken input, no finding promises an absurd or negative speedup: a
    Finding is normalised when it is made."""
    from diagnose.model.findings import Finding, Offender

    for value in (3.072e12, float("inf"), float("nan"), 0.5):
        f = Finding("launch-overhead", "high", "t", [], [], est_speedup=value, basis="b")
        assert f.est_speedup is None and f.basis.startswith("no estimate")
    kept = Finding(
        "launch-overhead",
        "high",
        "t",
        [],
        [],
        est_speedup=7.93,
        basis="b",
        offenders=[Offender.of("op", "k", us_per_step=float("nan"), tb_per_s=float("nan"), kernel="k")],
    )
    assert kept.est_speedup == 7.93 and kept.offenders[0].row() == {"op": "k", "kernel": "k", "tb_per_s": None}


def test_a_gzipped_memory_record_is_read_and_a_bomb_is_refused(tmp_path, capsys):
    import gzip

    from diagnose.ruleset.assemble import diagnose_trace
    from diagnose.trace import load_target

    folder = copy_capture(tmp_path, CAPTURES / "attention_sdpa_8k")
    assert (folder / "memory.json.gz").is_file()  # as captures write it
    details = diagnose_trace(load_target(folder)).details.memory
    assert details and details.peak_allocated_bytes > 0
    (folder / "memory.json.gz").write_bytes(gzip.compress(b" " * (300 << 20), compresslevel=9))
    code, err = cli(capsys, folder, "-o", tmp_path / "bomb")
    assert code == 2
    assert_one_line_error(err, "memory.json.gz", "inflates past")
