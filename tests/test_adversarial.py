"""Malformed and hostile traces never crash the analysis.

Hypothesis builds kineto-like traces and then breaks them: fields missing or of the wrong type,
negative and overlapping durations, unknown categories, enormous numbers, names that are not
valid UTF-8, deeply nested args, duplicated ids and correlations, kernels without launches and
launches without kernels, NaN and Infinity literals, bytes cut short. Whatever comes in,
`diagnose TRACE --json` exits 2 with one line on stderr, or 0/1 with findings JSON on stdout.
Each `@example` is an input that crashed diagnose once.
"""

from __future__ import annotations

import json

import pytest

from diagnose.commands import main

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

CATS = [
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_runtime",
    "cuda_driver",
    "cpu_op",
    "user_annotation",
    "gpu_user_annotation",
    "cuda_sync",
    "python_function",
    "ac2g",
    "Trace",
    "",
    "KERNEL",
    None,
]
NAMES = [
    "aten::mm",
    "aten::add",
    "cudaLaunchKernel",
    "cudaStreamSynchronize",
    "cudaMemcpyAsync",
    "cudaGraphLaunch",
    "ProfilerStep#1",
    "ProfilerStep#2",
    "diagnose/step 0",
    "diagnose/step 1",
    "DataLoader#_SingleProcessDataLoaderIter.__next__",
    "void gemv2T_kernel<float>",
    "[memory]",
    "nvjet_sm90_tst_128x64",
    "elementwise_kernel",
    "aten::scaled_dot_product_attention",
    "",
    "é∂ƒ",
]
WEIRD = [
    None,
    True,
    False,
    -1,
    0,
    2**63,
    2**70,
    -(2**70),
    1e308,
    -1e308,
    1e-300,
    "",
    "12",
    "x",
    [],
    [1, "a"],
    {},
    {"a": [1, {"b": None}]},
]
# raw JSON spliced in as a value: what no encoder writes but files contain
RAW_VALUES = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"-1e999",
    b"123456789012345678901234567890",
    b'"\xff\xfe"',
    b'"\xc3"',
    b"null",
    b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
]

numbers = st.one_of(
    st.integers(-5, 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0, -0.0, 2**53 + 1, 2**64, -(2**63)]),
)
weird = st.sampled_from(WEIRD)
dims = st.recursive(
    st.one_of(st.integers(-3, 5000), st.none(), st.text(max_size=3), st.sampled_from([2**62, 10**200])),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)
KERNELS = [
    "nvjet_sm90_tst_128x64_64x4_1x2_h_bz_coopA_NNT",
    "void at::native::elementwise_kernel<128, 4>()",
    "void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false, false>()",
    "void at::native::reduce_kernel<512, 1>()",
    "triton_poi_fused_mul_sigmoid_0",
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>()",
    "Memcpy DtoH (Device -> Pageable)",
    "void flash_fwd_kernel<>()",
    "ncclDevKernel_AllReduce_Sum_f32",
]
OPS = [
    "aten::mm",
    "aten::addmm",
    "aten::add",
    "aten::mul",
    "aten::silu",
    "aten::_softmax",
    "aten::item",
    "aten::copy_",
    "aten::scaled_dot_product_attention",
    "aten::conv2d",
    "aten::embedding",
    "aten::cat",
]
TYPES = [["c10::BFloat16", "c10::BFloat16"], ["float", "float", "Scalar"], ["c10::Half"], ["long int", "float"], []]


@st.composite
def plausible(draw):
    """A small but well-formed trace: steps of CPU ops, each launching a kernel on the GPU."""
    events, t, corr = [], 0.0, 0
    marker = draw(st.sampled_from(["ProfilerStep#{}", "diagnose/step {}", "diagnose/warmup {}", None]))
    for step in range(draw(st.integers(0, 3))):
        step_start = t
        body = []
        for _ in range(draw(st.integers(1, 5))):
            corr += 1
            op_dur = draw(st.floats(1, 50))
            op = draw(st.sampled_from(OPS))
            body.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": op,
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": op_dur,
                    "args": {"External id": corr, "Input Dims": draw(dims), "Input type": draw(st.sampled_from(TYPES))},
                }
            )
            launch = draw(
                st.sampled_from(
                    [
                        "cudaLaunchKernel",
                        "cudaMemcpyAsync",
                        "cudaStreamSynchronize",
                        "cudaGraphLaunch",
                        "cuLaunchKernel",
                    ]
                )
            )
            body.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": launch,
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 1,
                    "dur": draw(st.floats(0.5, 20)),
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            gpu_ts = t + draw(st.floats(0, 100))
            cat = draw(st.sampled_from(["kernel", "kernel", "kernel", "gpu_memcpy", "gpu_memset"]))
            body.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": draw(st.sampled_from(KERNELS)),
                    "pid": 0,
                    "tid": draw(st.sampled_from([7, 7, 20])),
                    "ts": gpu_ts,
                    "dur": draw(st.floats(0.5, 500)),
                    "args": {
                        "correlation": corr,
                        "External id": corr,
                        "device": 0,
                        "stream": draw(st.sampled_from([7, 7, 20])),
                        "grid": [draw(st.integers(1, 300)), 1, 1],
                        "block": [128, 1, 1],
                        "registers per thread": 32,
                        "shared memory": 0,
                        "est. achieved occupancy %": 50,
                        "bytes": draw(st.integers(0, 10**9)),
                    },
                }
            )
            if launch == "cudaStreamSynchronize" and draw(st.booleans()):
                body.append(
                    {
                        "ph": "X",
                        "cat": "cuda_sync",
                        "name": "Stream Sync",
                        "pid": 0,
                        "tid": 7,
                        "ts": gpu_ts,
                        "dur": 3,
                        "args": {"correlation": corr, "device": 0, "stream": 7},
                    }
                )
            t += op_dur + draw(st.floats(0, 300))
        if marker:
            events.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": marker.format(step),
                    "pid": 1,
                    "tid": 1,
                    "ts": step_start,
                    "dur": t - step_start,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": marker.format(step),
                    "pid": 0,
                    "tid": 7,
                    "ts": step_start + 2,
                    "dur": t - step_start,
                }
            )
        events += body
    if draw(st.booleans()):
        events.append(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "name": "[memory]",
                "pid": 1,
                "tid": 1,
                "ts": t / 2,
                "s": "t",
                "args": {
                    "Device Type": 1,
                    "Device Id": 0,
                    "Addr": 123,
                    "Bytes": 4096,
                    "Total Allocated": 8192,
                    "Total Reserved": 2**21,
                },
            }
        )
    return events


@st.composite
def mutated(draw, events):
    """Break a trace the ways real files are broken."""
    events = [dict(e, args=dict(e["args"])) if isinstance(e.get("args"), dict) else dict(e) for e in events]
    for _ in range(draw(st.integers(0, 4))):
        if not events:
            events.append(draw(event()))
            continue
        i = draw(st.integers(0, len(events) - 1))
        ev = events[i]
        how = draw(
            st.sampled_from(
                ["drop", "dup", "field", "arg", "cat", "negative", "overlap", "huge", "nest", "new", "sameid"]
            )
        )
        if how == "drop":  # a kernel without its launch, or a launch without its kernel
            del events[i]
        elif how == "dup":
            events.insert(i, dict(ev))
        elif how == "field":
            key = draw(st.sampled_from(["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]))
            if draw(st.booleans()):
                ev.pop(key, None)
            else:
                ev[key] = draw(weird)
        elif how == "arg" and isinstance(ev.get("args"), dict):
            key = draw(
                st.sampled_from(
                    [
                        "correlation",
                        "External id",
                        "device",
                        "stream",
                        "grid",
                        "block",
                        "Input Dims",
                        "Input type",
                        "registers per thread",
                        "bytes",
                    ]
                )
            )
            ev["args"][key] = draw(st.one_of(weird, dims, numbers))
        elif how == "cat":
            ev["cat"] = draw(st.sampled_from(CATS))
        elif how == "negative":
            ev["dur"] = -abs(draw(numbers)) - 1
        elif how == "overlap" and isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = ev["ts"] - draw(st.floats(0, 1000))
        elif how == "huge":
            ev[draw(st.sampled_from(["ts", "dur"]))] = draw(st.sampled_from([1e300, 2**70, 1e18, -1e300]))
        elif how == "nest":
            deep = []
            for _ in range(draw(st.integers(10, 120))):
                deep = [deep]
            ev["args"] = {"Input Dims": deep, "x": {"y": deep}}
        elif how == "new":
            events.insert(i, draw(event()))
        elif how == "sameid" and isinstance(ev.get("args"), dict):
            ev["args"]["correlation"] = ev["args"]["External id"] = 1
    return events


@st.composite
def event(draw):
    """One trace event of any kind, any field possibly broken."""
    ev = {
        "ph": draw(st.sampled_from(["X", "X", "X", "i", "s", "f", "M", "B", None, 1])),
        "cat": draw(st.sampled_from(CATS)),
        "name": draw(st.sampled_from(NAMES)),
        "ts": draw(numbers),
        "dur": draw(numbers),
        "pid": draw(st.sampled_from([0, 1, 3113936, "Spans", None, -1])),
        "tid": draw(st.sampled_from([0, 7, 20, "stream 7", None, 2**40])),
    }
    ev["args"] = draw(
        st.sampled_from(
            [
                {
                    "correlation": draw(st.integers(0, 8)),
                    "External id": draw(st.integers(0, 8)),
                    "Input Dims": draw(dims),
                    "stream": draw(weird),
                },
                None,
                [],
                "args",
                {},
            ]
        )
    )
    return ev


@st.composite
def trace_bytes(draw):
    """A whole file: a plausible trace, mutated, then possibly damaged at the byte level."""
    events = draw(mutated(draw(plausible())))
    doc = {
        "schemaVersion": draw(st.sampled_from([1, 1, "1", None, [1]])),
        "deviceProperties": draw(
            st.sampled_from(
                [[{"id": 0, "name": "NVIDIA H200", "numSms": 132, "totalGlobalMem": 150109880320, "computeMajor": 9}]]
                * 3
                + [
                    [],
                    None,
                    [1, "x"],
                    [{"id": "0", "numSms": -1}],
                    {"a": 1},
                    [{"id": 0, "name": 5, "numSms": "132", "totalGlobalMem": "x"}],
                ]
            )
        ),
        "traceEvents": events,
    }
    if draw(st.booleans()):
        doc["distributedInfo"] = draw(st.sampled_from([{"rank": 0}, [], "x", {"rank": 2**70}]))
    shape = draw(st.sampled_from(["doc"] * 8 + ["list", "events-not-list"]))
    if shape == "list":
        raw = json.dumps(events).encode()
    elif shape == "events-not-list":
        raw = json.dumps({**doc, "traceEvents": draw(weird)}).encode()
    else:
        raw = json.dumps(doc).encode()
    if draw(st.integers(0, 3)) == 0:
        raw = _splice(raw, draw(st.sampled_from(RAW_VALUES)), draw(st.integers(0, max(len(raw), 1))))
    if draw(st.integers(0, 3)) == 0:  # a name that is not valid UTF-8
        raw = raw.replace(b'"name": "aten::', b'"name": "\xff\xfeaten::', 1)
    if draw(st.integers(0, 19)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


def _splice(raw: bytes, value: bytes, at: int) -> bytes:
    """Replace the JSON value after the first `": ` at or after `at` with `value`."""
    key = raw.find(b'": ', at)
    if key < 0:
        return raw
    start = key + 3
    end = start
    depth, in_string = 0, False
    while end < len(raw):
        c = raw[end : end + 1]
        if in_string:
            if c == b"\\":
                end += 1
            elif c == b'"':
                in_string = False
                if depth == 0:
                    end += 1
                    break
        elif c == b'"':
            in_string = True
        elif c in b"[{":
            depth += 1
        elif c in b"]}":
            if depth == 0:
                break
            depth -= 1
            if depth == 0:
                end += 1
                break
        elif c == b"," and depth == 0:
            break
        end += 1
    return raw[:start] + value + raw[end:]


def check(raw: bytes, tmp_path, capsys) -> None:
    """The property: exit 2 with one clean line on stderr, or exit 0/1 with valid findings JSON."""
    path = tmp_path / "trace.json"
    path.write_bytes(raw)
    code = main([str(path), "--json", "-o", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert lines[0].startswith("diagnose: error: ")
        return
    assert code in (0, 1), (code, err)
    data = json.loads(out, parse_constant=_no_constant)  # strict JSON: no NaN or Infinity
    assert data["schema"] == "diagnose.model.findings/1"
    assert (tmp_path / "out" / "findings.json").is_file()


def _no_constant(name: str):
    raise AssertionError(f"findings JSON holds {name}")


def _doc(events: list, **top) -> bytes:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events}).encode()


K = {"ph": "X", "cat": "kernel", "name": "void k()", "pid": 0, "tid": 7}
L = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
OP = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1}


# 150 random traces a run, in three tests of 50 so that the workers share them; the first also runs the
# explicit examples.
ADVERSARIAL = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@ADVERSARIAL
@given(raw=trace_bytes())
@example(raw=_doc([{**K, "ts": 1, "dur": 2, "args": {"correlation": 2**64 + 3}}]))
@example(
    raw=_doc(
        [
            {**K, "ts": 1, "dur": 2, "args": {"External id": 2**70, "correlation": 1}},
            {**L, "ts": 0, "dur": 1, "args": {"correlation": 1, "External id": 2**70}},
        ]
    )
)
@example(raw=_doc([{**K, "ts": 1e308, "dur": 1e308}, {**K, "ts": -1e308, "dur": 0}]))
@example(raw=_doc([{**K, "ts": 1, "dur": 2, "args": {"grid": [2**70, 2**70], "block": [1, "x"]}}]))
@example(
    raw=_doc(
        [
            {**OP, "ts": 0, "dur": 5, "args": {"Input Dims": [[2**70, 3]], "Input type": ["float"], "External id": 1}},
            {**L, "ts": 1, "dur": 1, "args": {"correlation": 1, "External id": 1}},
            {**K, "ts": 3, "dur": 1, "args": {"correlation": 1, "External id": 1}},
        ]
    )
)
@example(raw=b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "ts": 1, "dur": 2}]}')
@example(raw=b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": Infinity}]}')
@example(
    raw=b'[{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "args": ' + b"[" * 200 + b"]" * 200 + b"}]"
)
@example(
    raw=_doc(
        [
            {**K, "ts": 5, "dur": 10, "args": {"correlation": 1}},
            {**K, "ts": 6, "dur": 10, "args": {"correlation": 1}},
            {**L, "ts": 0, "dur": 1, "args": {"correlation": 1}},
            {**L, "ts": 2, "dur": 1, "args": {"correlation": 1}},
        ]
    )
)
@example(
    raw=_doc(
        [
            {**L, "ts": 0, "dur": 1, "args": {"correlation": 9}},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
        ]
    )
)
@example(
    raw=_doc(
        [{**K, "ts": 1, "dur": 2, "pid": "Spans", "tid": "stream 7", "args": {"device": "x", "stream": "7"}}],
        deviceProperties=[{"id": "0", "numSms": -1}],
    )
)
@example(
    raw=_doc(
        [
            {
                **OP,
                "name": "aten::mm",
                "ts": 0,
                "dur": 5,
                "args": {"External id": 1, "Input Dims": [[], [4, 4]], "Input type": ["float", "float"]},
            },
            {**L, "ts": 1, "dur": 1, "args": {"correlation": 1, "External id": 1}},
            {**K, "ts": 3, "dur": 1, "args": {"correlation": 1, "External id": 1}},
        ]
    )
)
@example(
    raw=_doc(
        [
            {
                **OP,
                "name": "aten::add",
                "ts": 0,
                "dur": 5,
                "args": {"External id": 1, "Input type": ["float"], "Input Dims": [[10**200, 10**200]]},
            },
            {**L, "ts": 1, "dur": 1, "args": {"correlation": 1, "External id": 1}},
            {**K, "ts": 3, "dur": 1, "args": {"correlation": 1, "External id": 1}},
        ],
        deviceProperties=[{"id": 0, "name": "NVIDIA H200", "numSms": 132, "computeMajor": 9}],
    )
)
@example(raw=_doc([{**K, "ts": 10, "dur": -5}, {**OP, "ts": 10, "dur": -1}, {**K, "ts": "12", "dur": "3"}]))
@example(
    raw=_doc(
        [
            {"ph": "X", "cat": "user_annotation", "name": "diagnose/step 0", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
            {"ph": "X", "cat": "user_annotation", "name": "diagnose/step 1", "ts": 50, "dur": 10, "pid": 1, "tid": 1},
            {**OP, "ts": 1, "dur": 3, "args": {"External id": 1}},
            {**L, "ts": 2, "dur": 1, "args": {"correlation": 1, "External id": 1}},
            {**K, "ts": 3, "dur": 1, "args": {"correlation": 1, "External id": 1}},
            {**K, "ts": 200, "dur": 1, "args": {"correlation": 5}},
        ]
    )
)
def test_malformed_traces_never_crash(raw, tmp_path_factory, capsys):
    """Any bytes: a clean exit 2, or a diagnosis (exit 0/1) with valid findings JSON."""
    check(raw, tmp_path_factory.mktemp("adv"), capsys)


@ADVERSARIAL
@given(raw=trace_bytes())
def test_more_malformed_traces_never_crash(raw, tmp_path_factory, capsys):
    """The same property on 50 more random traces."""
    check(raw, tmp_path_factory.mktemp("adv"), capsys)


@ADVERSARIAL
@given(raw=trace_bytes())
def test_still_more_malformed_traces_never_crash(raw, tmp_path_factory, capsys):
    """And on 50 more."""
    check(raw, tmp_path_factory.mktemp("adv"), capsys)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"   \n",
        b"{",
        b"[",
        b"null",
        b"{}",
        b'{"traceEvents": {}}',
        b'{"traceEvents": [1, 2, "x"]}',
        b"\x1f\x8b\x08\x00",
        b"\xff" * 64,
    ],
)
def test_degenerate_files(raw, tmp_path, capsys):
    """Files that are barely anything get one clean error line."""
    check(raw, tmp_path, capsys)


def test_an_instant_whose_name_is_not_a_string_is_no_allocator_event(tmp_path):
    """SYNTHETIC: an instant event with an allocator's args and a null name (or 7) is not read as `[memory]`
    (str.__eq__ gave NotImplemented for null, which is truthy, and the event was counted), so it cannot turn a
    plain trace into one with allocator events."""
    from diagnose.trace import load_target

    args = {"Device Type": 1, "Device Id": 0, "Addr": 1, "Bytes": 4096, "Total Allocated": 4096, "Total Reserved": 1}
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 10, "args": {}}
    events = [op] + [
        {"ph": "i", "cat": "cpu_instant_event", "name": name, "pid": 1, "tid": 1, "ts": 5, "s": "t", "args": args}
        for name in (7, None, "[memory]")
    ]
    path = tmp_path / "t.json"
    path.write_bytes(_doc(events))
    assert len(load_target(path).memory) == 1
