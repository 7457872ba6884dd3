"""Every field of every trace event may be missing, null or of the wrong type: the event
is coerced or dropped with a counted warning, never a traceback, and no number printed is NaN.

The trace is synthetic, built here: three ProfilerStep ranges of ops that launch kernels, with an
allocator ([memory]) event after each launch, as torch.profiler(profile_memory=True) writes them.
Each case breaks one field in every event of one family (or in every other one).
"""

from __future__ import annotations

import json

import pytest
from hostile_guard import untouched_outside

from diagnose.commands import main
from diagnose.trace import load_target

pytestmark = pytest.mark.hostile

DROP = object()  # the field is left out
K = {"ph": "X", "cat": "kernel", "name": "void k()", "pid": 0, "tid": 7}
L = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1}
ALLOCATOR_FIELDS = ["Device Type", "Device Id", "Total Reserved", "Total Allocated", "Bytes", "Addr"]
REQUIRED = {"Device Type", "Device Id", "Total Reserved", "Total Allocated"}  # an event without one is dropped
WRONG = {
    "missing": DROP,
    "null": None,
    "a string": "x",
    "a numeric string": "12",
    "a list": [1],
    "an object": {"a": 1},
    "a bool": True,
    "negative": -1,
    "beyond int64": 2**70,
    "a fraction": 1.5,
}


def synthetic_trace(steps: int = 3, ops: int = 5) -> dict:
    """A small well-formed kineto trace (synthetic) with allocator events."""
    events, t = [], 0
    for s in range(steps):
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t, "dur": 100}
        )
        for i in range(ops):
            c = s * 10 + i
            events.append(
                {
                    **OP,
                    "ts": t + i * 20,
                    "dur": 10,
                    "args": {"External id": c, "Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]},
                }
            )
            events.append({**L, "ts": t + i * 20 + 1, "dur": 2, "args": {"correlation": c, "External id": c}})
            events.append(
                {
                    **K,
                    "ts": t + i * 20 + 5,
                    "dur": 8,
                    "args": {
                        "correlation": c,
                        "External id": c,
                        "device": 0,
                        "stream": 7,
                        "grid": [1, 1, 1],
                        "block": [128, 1, 1],
                    },
                }
            )
            events.append(
                {
                    "ph": "i",
                    "cat": "cpu_instant_event",
                    "name": "[memory]",
                    "pid": 1,
                    "tid": 1,
                    "s": "t",
                    "ts": t + i * 20 + 2,
                    "args": {
                        "Device Type": 1,
                        "Device Id": 0,
                        "Addr": 1000 + c,
                        "Bytes": 4096,
                        "Total Allocated": 2**30 + c,
                        "Total Reserved": 2**33,
                    },
                }
            )
        t += 100
    return {"schemaVersion": 1, "traceEvents": events}


def broken(family, field: str, values: list, in_args: bool = True, skip_every_other: bool = False) -> dict:
    """The synthetic trace with `field` of the events `family(e)` picks set to `values` in turn (the
    first event gets the first value, the next the second...; DROP leaves the field out)."""
    doc = synthetic_trace()
    picked = [e for e in doc["traceEvents"] if family(e)]
    if skip_every_other:
        picked = picked[::2]
    for n, event in enumerate(picked):
        target = event.get("args") if in_args else event
        if not isinstance(target, dict):
            continue
        value = values[n % len(values)]
        if value is DROP:
            target.pop(field, None)
        else:
            target[field] = value
    return doc


def is_memory(e):
    return e.get("name") == "[memory]"


def diagnosed(doc: dict, tmp_path, capsys, html: bool = False) -> dict:
    """`diagnose TRACE --json` on `doc`: exit 0 or 1, no traceback, strict JSON (no NaN), nothing
    written outside the output folder; the findings."""
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "out"
    with untouched_outside(out):
        code = main([str(path), "--json", "-q", "-o", str(out)] + ([] if html else ["--no-html"]))
    stdout, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "Traceback" not in err
    return json.loads(stdout, parse_constant=lambda name: pytest.fail(f"findings JSON holds {name}"))


ALLOCATOR_WARNING = (
    "{} allocator events without a number for Device Type, Device Id, Total Allocated or Total Reserved were ignored"
)
UNUSABLE = ["missing", "null", "a string", "a bool", "a list", "an object", "a fraction"]


@pytest.mark.parametrize("field", sorted(REQUIRED))
@pytest.mark.parametrize("how", UNUSABLE)
def test_an_allocator_field_the_rules_need_of_any_type(field, how, tmp_path, capsys):
    """Missing, null, a string... in every allocator event: all 15 dropped and counted, no traceback."""
    data = diagnosed(broken(is_memory, field, [WRONG[how]]), tmp_path, capsys)
    assert ALLOCATOR_WARNING.format(15) in data["warnings"], data["warnings"]


@pytest.mark.parametrize("field", ALLOCATOR_FIELDS)
def test_allocator_fields_of_mixed_types(field, tmp_path, capsys):
    """Each event a different wrong value: those that are numbers kept, the rest dropped and counted."""
    values = list(WRONG.values())
    data = diagnosed(broken(is_memory, field, values), tmp_path, capsys, html=True)
    warned = [w for w in data["warnings"] if "allocator events" in w]
    if field in REQUIRED:
        # usable: "12" (strings of digits are read as numbers), and for the ids -1 and 2**70 too
        kept = {"12", -1, 2**70} if field in ("Device Type", "Device Id") else {"12", 2**70}
        dropped = sum(1 for n in range(15) if not _usable(values[n % len(values)], kept))
        assert warned == [ALLOCATOR_WARNING.format(dropped)], data["warnings"]
    else:
        assert not warned, data["warnings"]


def _usable(value, kept) -> bool:
    return any(value == k and type(value) is type(k) for k in kept)


@pytest.mark.parametrize("field", sorted(REQUIRED))
def test_half_the_allocator_events_broken_keeps_the_other_half(field, tmp_path, capsys):
    doc = broken(is_memory, field, [None], skip_every_other=True)
    data = diagnosed(doc, tmp_path, capsys)
    assert (
        "8 allocator events without a number for Device Type, Device Id, Total Allocated or Total Reserved "
        "were ignored" in data["warnings"]
    )
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    assert len(load_target(path).memory) == 7


def test_allocator_events_without_both_totals_are_the_older_format_not_broken(tmp_path, capsys):
    """Bytes and neither total, the way PyTorch 1.9 wrote them, on every other event: those get a warning of their
    own, and an event missing one total while keeping Bytes is still counted as broken."""
    doc = broken(is_memory, "Total Allocated", [DROP], skip_every_other=True)
    picked = [e for e in doc["traceEvents"] if is_memory(e)]
    for event in picked[::2]:
        del event["args"]["Total Reserved"]
    picked[1]["args"].pop("Total Reserved")
    data = diagnosed(doc, tmp_path, capsys)
    allocator = [w for w in data["warnings"] if "allocator events" in w]
    assert allocator == [
        "8 allocator events record Bytes only, without Total Allocated or Total Reserved (an older kineto's format): "
        "no memory peak can be read from them",
        ALLOCATOR_WARNING.format(1),
    ]


def test_a_missing_total_reserved_is_no_nan_in_kv_fragmentation(tmp_path, capsys):
    """The memory record's peaks come only from events that carry both totals (it once printed NaN)."""
    from diagnose.memory.record import load_memory

    path = tmp_path / "t.json"
    path.write_text(json.dumps(broken(is_memory, "Total Reserved", [DROP])))
    trace = load_target(path)
    assert not len(trace.memory)
    assert load_memory(trace) is None
    data = diagnosed(broken(is_memory, "Total Reserved", ["lots"]), tmp_path, capsys)
    assert not [f for f in data["findings"] if f["rule"] == "kv-fragmentation"]


FAMILIES = {
    "kernel": lambda e: e.get("cat") == "kernel",
    "launch": lambda e: e.get("cat") == "cuda_runtime",
    "op": lambda e: e.get("cat") == "cpu_op",
    "step": lambda e: e.get("cat") == "user_annotation",
}
EVENT_FIELDS = ["ts", "dur", "name", "ph", "cat", "pid", "tid", "args"]
EVENT_VALUES = [DROP, None, "x", "12", [1], {"a": 1}, True, 1e308, -5]


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("field", EVENT_FIELDS)
def test_event_fields_of_any_type(family, field, tmp_path, capsys):
    """Kernels, launches, ops and step ranges with `ts`, `dur`, names, ids or args missing, null, a
    string, a list, an object, a bool, huge or negative (a different one in each event)."""
    data = diagnosed(broken(FAMILIES[family], field, EVENT_VALUES, in_args=False), tmp_path, capsys)
    if field in ("ts", "dur") and family != "step":
        assert any("were ignored" in w or "dropped" in w for w in data["warnings"]), data["warnings"]


ARG_FIELDS = [
    "correlation",
    "External id",
    "device",
    "stream",
    "grid",
    "block",
    "Input Dims",
    "Input type",
    "registers per thread",
    "shared memory",
    "est. achieved occupancy %",
    "bytes",
]


@pytest.mark.parametrize("field", ARG_FIELDS)
def test_kernel_launch_and_op_args_of_any_type(field, tmp_path, capsys):
    values = [DROP, None, "x", {"a": 1}, 2**70, True, [1, "a"], -3]
    diagnosed(broken(lambda e: e.get("cat") in ("kernel", "cpu_op", "cuda_runtime"), field, values), tmp_path, capsys)
