"""One vocabulary (diagnose/vocabulary): it alone says what kernel, collective, op and dtype names
mean, and its answers on every real name of the bundled traces are pinned.

- No module outside diagnose/vocabulary holds that vocabulary in a pattern or a table: the source
  of every module of diagnose/ and rules/ is parsed, and a regular expression (re.compile,
  re.search, …, pandas' .str.contains / .str.match), a set literal, a dict literal's keys, a tuple
  or list tested with `in`, or a prefix given to startswith that names kernel, collective, dtype,
  step-marker, kernel-launch or torch.compile vocabulary fails the test, with its file and line.
- A pattern (not a table) that names a precision (`bf16`, `tf32`, `fp8`…) or a kernel kind
  (`elementwise`, `conv`…) fails too: the precisions and kinds are answers other modules compare
  with, never text they search names for.
- No module outside diagnose/vocabulary defines a constant by the name of one of the vocabulary's
  (a `MATRIX_KINDS` of its own with another value).
- The runtime names (kernel-launch, sync, graph-capture and copy calls, torch.compile's marks), the
  precision tables and the severity order are pinned case by case.
- Every percentage is written by `units.percent` (one style, "88.3 %"): no f-string of diagnose/
  or rules/ formats a share with a `%` format spec of its own.
- tests/data/kernel_names.tsv holds every distinct kernel name of fixtures/captures and
  fixtures/peer with its kind, family, tensor-core use and collective kind; tests/data/dtypes.tsv
  every recorded dtype (and torch's spellings) with its precision, bytes and bits. Both were
  written by fixtures/collect_kernel_names.py (which reads the traces; this test reads only the
  tables), one test per row.
"""

from __future__ import annotations

import ast
import re
import sys

import pytest

from diagnose.model.findings import SEVERITIES, Evidence, severity_rank
from diagnose.rulebook.engine import milder, severity_from, severity_ladder
from diagnose.vocabulary import units
from diagnose.vocabulary.compiled import (
    COMPILED_REGION,
    COMPILING,
    DYNAMO_OWN,
    GRAPH_CALL,
    INDUCTOR_KERNEL,
    REGION_PREFIX,
    TRITON_PREFIX,
)
from diagnose.vocabulary.collectives import collective_kind, is_collective_kernel
from diagnose.vocabulary.dtypes import (
    FP32_PRECISIONS,
    HALF_PRECISIONS,
    NARROW_PRECISIONS,
    PRECISIONS,
    RUNG_NAMES,
    dtype_bytes,
    float_bits,
    precision,
    precision_bytes,
    precision_label,
    rung_name,
)
from diagnose.vocabulary.kernels import (
    KINDS,
    MATMUL_KINDS,
    MATRIX_KINDS,
    MEMORY_KINDS,
    kernel_family,
    kernel_kind,
    tensor_core,
)
from diagnose.vocabulary.ops import BATCH_NORM_OP, CONV_OP
from diagnose.vocabulary.runtime import (
    CAPTURE_BEGIN,
    CAPTURE_END,
    COPY_DIRECTION,
    GRAPH_INSTANTIATE,
    GRAPH_LAUNCH,
    HOST_COPY,
    HOST_TO_DEVICE,
    KERNEL_LAUNCH,
    PAGEABLE,
    PINNED,
    SYNC_CALL,
)

from conftest import ROOT

sys.path.insert(0, str(ROOT / "fixtures"))
from collect_kernel_names import DTYPES, KERNELS, cell, read  # noqa: E402

# Names that only the vocabulary may hold: libraries and instructions in kernel names, dtype
# spellings, collectives, layout conversions, attention kernels, torch.profiler's step range, the
# runtime's kernel-launch calls and torch.compile's marks.
VOCABULARY = re.compile(
    r"nccl|rccl|msccl|gemm|gemv|nvjet|xmma|wgmma|cutlass|cudnn|cublas|sm[5-9]\d_|"
    r"nchw2?to_?nhwc|nhwc2?to_?nchw|flash|fmha|"
    r"bfloat16|float16|float8|\bhalf\b|e4m3|e5m2|"
    r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv|"
    r"profilerstep|"
    r"launchkernel|cooperativekernel|graphlaunch|synchroni[sz]e|(?:cuda|cu|hip)mem(?:cpy|set)|"
    r"begincapture|endcapture|graphinstantiate|htod|dtoh|pageable|"
    r"torch-compiled region|compiledfxgraph|compiledfunction|torchdynamo|cpp_fused_|entire_frame_compile|dynamo_timed",
    re.IGNORECASE,
)
# Names a pattern may not search for, though a table may hold them: the vocabulary's own answers
# (precisions, kernel kinds), which a module compares with (`kind in ("gemm", "conv")`).
ANSWER_IN_PATTERN = re.compile(
    r"\b(?:fp|bf)(?:4|8|16|32|64)\b|\btf32\b|\bint[48]\b|elementwise|reduction|attention|\bconv",
    re.IGNORECASE,
)
# A catalogue id (a fix, a --verify variant: `flash-attention`, `sdpa-flash`) is a name of this
# project, not a name a trace holds: lower-case words joined by hyphens, which no kernel, op or
# dtype name is. The vocabulary's own answers (the kinds `gemm`, `attention`; the precisions) are
# what other modules are meant to hold.
CATALOGUE_ID = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)+")
ANSWERS = {*KINDS, *PRECISIONS}
RE_FUNCTIONS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
STR_METHODS = {"contains", "match", "fullmatch", "extract", "extractall", "count", "findall", "replace", "split"}
PREFIX_METHODS = {"startswith", "endswith", "removeprefix", "removesuffix"}


def _strings(node: ast.AST) -> list[str]:
    """The string a node is, when it is a literal string (implicit concatenation included)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _strings(node.left) + _strings(node.right)
    return []


def _elements(node: ast.AST) -> list[str]:
    """The literal strings among a collection display's elements."""
    if isinstance(node, (ast.Set, ast.Tuple, ast.List)):
        return [s for e in node.elts for s in _strings(e)]
    return _strings(node)


def vocabulary_literals(source: str) -> list[tuple[int, str, str]]:
    """(line, where, text) of every pattern or table literal in `source` that names vocabulary."""
    found: list[tuple[int, str, str]] = []

    def check(node: ast.AST, where: str, texts: list[str], pattern: bool = False) -> None:
        for text in texts:
            answer = not pattern and text in ANSWERS  # a pattern "gemm" is a pattern, not a kind
            named = VOCABULARY.search(text) or (pattern and ANSWER_IN_PATTERN.search(text))
            if named and not CATALOGUE_ID.fullmatch(text) and not answer:
                found.append((node.lineno, where, text))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            func, first = node.func, node.args[0]
            owner = func.value
            if isinstance(owner, ast.Name) and owner.id == "re" and func.attr in RE_FUNCTIONS:
                check(node, f"re.{func.attr}", _strings(first), pattern=True)
            elif isinstance(owner, ast.Attribute) and owner.attr == "str" and func.attr in STR_METHODS:
                check(node, f".str.{func.attr}", _strings(first), pattern=True)
            elif func.attr in PREFIX_METHODS or func.attr == "isin":
                check(node, f".{func.attr}", _elements(first))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset"):
            if node.args:
                check(node, f"{node.func.id}()", _elements(node.args[0]))
        elif isinstance(node, ast.Set):
            check(node, "set literal", _elements(node))
        elif isinstance(node, ast.Dict):
            check(node, "dict literal key", [s for k in node.keys if k is not None for s in _strings(k)])
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            for right in node.comparators:
                if isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                    check(node, "`in` literal", _elements(right))
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, (ast.Tuple, ast.List)):
            check(node.iter, "loop over a literal", _elements(node.iter))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, (ast.Tuple, ast.List)):
            check(node, "tuple constant", _elements(node.value))
    return found


def sources():
    """Every module of diagnose/ (diagnose/rules/ included) outside diagnose/vocabulary."""
    vocabulary = ROOT / "diagnose" / "vocabulary"
    for path in sorted((ROOT / "diagnose").rglob("*.py")):
        if vocabulary not in path.parents:
            yield path


def test_no_other_module_holds_kernel_collective_or_dtype_vocabulary():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {where} {text[:80]!r}"
        for path in sources()
        for line, where, text in vocabulary_literals(path.read_text())
    ]
    assert not offenders, "ask diagnose/vocabulary instead:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "snippet",
    [
        'import re\nNCCL = re.compile(r"nccl|rccl")\n',
        'x = names.str.contains("gemm", case=False)\n',
        'BYTES = {"c10::BFloat16": 2, "float": 4}\n',
        'HALF = {"c10::Half", "float"}\n',
        'ok = name.startswith(("ProfilerStep#", "diagnose/"))\n',
        'flash = kind in ("flash", "math")\n',
        'import re\nFP8 = re.search(r"e4m3|" "e5m2", text)\n',
        'kinds = frozenset(["all_reduce", "broadcast"])\n',
        'MARKERS = ("diagnose/", "ProfilerStep#")\n',
        'for key in ("math", "flash", "efficient"):\n    pass\n',
        'import re\nLAUNCH = re.compile(r"cudaLaunchKernel|GraphLaunch")\n',
        'import re\nLAUNCH = re.compile(r"Launch(?:Kernel|CooperativeKernel)|cuLaunchKernel")\n',
        'import re\nREGION = re.compile(r"^Torch-Compiled Region: (\\d+)/(\\d+)$")\n',
        'calls = names.str.match(r"^(## Call CompiledFxGraph \\S+ ##|CompiledFunction)$")\n',
        'import re\nSYNC = re.compile(r"Synchronize|^(?:cuda|hip)Memcpy(?:2D)?$")\n',
        'import re\nBEGIN = re.compile(r"^(?:cuda|hip)StreamBeginCapture")\n',
        'import re\nMADE = re.compile(r"^(?:cuda|hip)GraphInstantiate")\n',
        'graphs = names.str.contains("GraphLaunch", regex=False)\n',
        'import re\nCOPY = re.compile(r"\\b(?:HtoD|DtoH)\\b")\n',
        'import re\nUP = re.compile(r"\\bHtoD\\b")\n',
        'pageable = names.str.contains("Pageable")\n',
        'import re\nCOMPILING = re.compile(r"^(?:dynamo|entire_frame_compile)$|\\(dynamo_timed\\)$")\n',
        'import re\nHALF = re.compile(r"bf16|fp16")\n',
        'import re\nTF32 = re.compile(r"tf32", re.I)\n',
        'narrow = names.str.contains("fp8|int8")\n',
        'import re\nPOINTWISE = re.compile(r"elementwise|reduction")\n',
        'import re\nCONV = re.compile(r"conv", re.IGNORECASE)\n',
    ],
)
def test_the_check_catches_vocabulary_outside_the_module(snippet):
    """The check is able to fail: each snippet holds vocabulary the way a module used to."""
    assert vocabulary_literals(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        'FIXES = {"flash-attention": 1, "bf16-tensor-cores": 2}\n',
        'VARIANTS = {"tf32", "autocast-bf16", "sdpa-flash"}\n',
        'msg = f"the gemm took {x} us"\n',  # prose, not a pattern
        'rungs = {"bf16": 1, "fp16": 2, "fp8": 3}\n',  # the vocabulary's own answers (peak keys)
        'MATRIX = ("gemm", "conv")\n',  # kernel kinds: answers too
        'half = precision(d) in ("bf16", "fp16")\n',  # a comparison with answers, not a pattern
        'peaks = {"fp4": 1.0, "fp8": 2.0}\n',  # a device's peak table keyed by rung (base/devices.py)
        'ok = kind == "memcpy"\n',  # a trace category, not a runtime call
    ],
)
def test_the_check_leaves_other_names_alone(snippet):
    """Catalogue ids, the vocabulary's own answers and prose are not vocabulary."""
    assert not vocabulary_literals(snippet)


def percent_format_specs(source: str) -> list[int]:
    """Lines of `source` that write a percentage with a format spec of their own (`{share:.0%}`)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FormattedValue) and isinstance(node.format_spec, ast.JoinedStr):
            spec = "".join(v.value for v in node.format_spec.values if isinstance(v, ast.Constant))
            if spec.endswith("%"):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "format":
            if len(node.args) > 1 and any(s.endswith("%") for s in _strings(node.args[1])):
                lines.append(node.lineno)
    return lines


def test_every_percentage_is_written_by_one_function():
    """`units.percent` is the one style ("88.3 %"): no module writes a share with `:.0%` of its own."""
    offenders = [f"{p.relative_to(ROOT)}:{line}" for p in sources() for line in percent_format_specs(p.read_text())]
    assert not offenders, "use diagnose.vocabulary.units.percent:\n" + "\n".join(offenders)


def test_the_percent_check_can_fail():
    assert percent_format_specs('x = f"busy {share:.0%} of the step"\n') == [1]
    assert percent_format_specs('x = format(share, ".1%")\n') == [1]
    assert not percent_format_specs('x = f"busy {percent(share)} of the step, {n:,} kernels"\n')


KERNEL_ROWS = read(KERNELS)
DTYPE_ROWS = read(DTYPES)


def test_the_tables_cover_the_bundled_traces():
    """Hundreds of real names from both the H200 captures and the peer traces, every kind among them."""
    sources = {r["source"].split("/")[1] for r in KERNEL_ROWS}
    assert {"captures", "peer"} <= sources
    assert len(KERNEL_ROWS) > 500
    assert {r["kind"] for r in KERNEL_ROWS} == {
        "gemm",
        "conv",
        "attention",
        "elementwise",
        "reduction",
        "memory",
        "comm",
        "other",
    }
    assert {"fp32", "bf16", "fp16", "fp8", "fp64"} <= {r["precision"] for r in DTYPE_ROWS}


@pytest.mark.parametrize("row", KERNEL_ROWS, ids=[f"{i}:{r['name'][:40]}" for i, r in enumerate(KERNEL_ROWS)])
def test_kernel_names(row):
    name = row["name"]
    got = {
        "kind": kernel_kind(name),
        "family": kernel_family(name),
        "tensor_core": cell(tensor_core(name)),
        "collective": cell(is_collective_kernel(name)),
        "collective_kind": cell(collective_kind(name)),
    }
    assert got == {k: row[k] for k in got}, row["source"]


@pytest.mark.parametrize("row", DTYPE_ROWS, ids=[r["dtype"] for r in DTYPE_ROWS])
def test_dtypes(row):
    dtype = row["dtype"]
    assert cell(precision(dtype)) == row["precision"]
    assert cell(dtype_bytes(dtype)) == row["bytes"]
    assert cell(float_bits(dtype)) == row["float_bits"]


@pytest.mark.parametrize(
    "torch_name, recorded",
    [("float32", "float"), ("float64", "double"), ("float16", "c10::Half"), ("bfloat16", "c10::BFloat16")],
)
def test_both_spellings_of_a_dtype_agree(torch_name, recorded):
    for ask in (precision, dtype_bytes, float_bits, precision_label):
        assert ask(torch_name) == ask(recorded) == ask(f"torch.{torch_name}")


def test_precision_labels():
    """How --verify's precisions and the recorded dtypes are written for people."""
    assert [precision_label(p) for p in ("tf32", "bfloat16", "float16", "float", "double")] == [
        "TF32",
        "bf16",
        "fp16",
        "fp32",
        "fp64",
    ]
    assert precision_label("c10::Float8_e4m3fn") == "c10::Float8_e4m3fn"  # an fp8 keeps its format


@pytest.mark.parametrize(
    "fraction, text",
    [
        (0.883, "88.3 %"),
        (0.0786, "7.9 %"),
        (0.08, "8 %"),
        (1, "100 %"),
        (0, "0 %"),
        (0.0004, "< 0.1 %"),
        (12.5, "1,250 %"),
        (-0.05, "-5 %"),
        (None, "—"),
        (float("nan"), "—"),
    ],
)
def test_one_percent_style(fraction, text):
    assert units.percent(fraction) == text


@pytest.mark.parametrize(
    "name, launches",
    [
        ("cudaLaunchKernel", True),
        ("cudaLaunchKernelExC", True),
        ("cudaLaunchCooperativeKernel", True),
        ("cuLaunchKernel", True),
        ("cuLaunchKernelEx", True),
        ("hipLaunchKernel", True),
        ("hipExtLaunchKernel", True),
        ("hipModuleLaunchKernel", True),
        ("cudaGraphLaunch", True),
        ("hipGraphLaunch", True),
        ("cudaMemcpyAsync", False),
        ("cudaStreamSynchronize", False),
        ("cudaDeviceSynchronize", False),
        ("cudaStreamBeginCapture", False),
        ("cudaGraphInstantiate", False),
        ("cudaFuncGetAttributes", False),
    ],
)
def test_kernel_launch_calls(name, launches):
    """The one kernel-launch pattern (trace/model.py, metrics/compiled.py, overhead.py and graph_capture.py
    ask it): CUDA runtime and driver, HIP and graph replays launch; copies, syncs and graph capture do not."""
    assert bool(KERNEL_LAUNCH.search(name)) is launches


@pytest.mark.parametrize(
    "name, region",
    [
        ("Torch-Compiled Region: 0/0", ("0", "0")),
        ("Torch-Compiled Region: 12/3", ("12", "3")),
        ("Torch-Compiled Region: 0/0 (resume)", None),
        ("Torch-Compiled Region", None),
        ("TorchDynamo Cache Lookup", None),
    ],
)
def test_compiled_region(name, region):
    """A compiled region entered, with its (frame, version); its prefix is what overhead.py looks for."""
    found = COMPILED_REGION.match(name)
    assert (found.groups() if found else None) == region
    assert name.startswith(REGION_PREFIX) is name.startswith("Torch-Compiled Region")


@pytest.mark.parametrize(
    "name, graph_call, dynamo_own",
    [
        ("## Call CompiledFxGraph fabc123 ##", True, True),
        ("CompiledFunction", True, True),
        ("CompiledFunctionBackward", True, True),
        ("Torch-Compiled Region: 0/1", False, True),
        ("TorchDynamo Cache Lookup", False, True),
        ("Pregraph bytecode", False, True),
        ("AOTDispatcher Runtime Wrapper Prologue", False, True),
        ("aten::mm", False, False),
        ("## forward ##", False, True),
    ],
)
def test_graph_calls_and_dynamos_own_ranges(name, graph_call, dynamo_own):
    assert bool(GRAPH_CALL.match(name)) is graph_call
    assert bool(DYNAMO_OWN.match(name)) is dynamo_own


@pytest.mark.parametrize(
    "name, inductor",
    [
        ("triton_poi_fused_add_0", True),
        ("cpp_fused_mul_1", True),
        ("ampere_sgemm_128x64_nn", False),
        ("fused_x", False),
    ],
)
def test_inductor_kernels(name, inductor):
    assert bool(INDUCTOR_KERNEL.match(name)) is inductor


def test_one_severity_order():
    """SEVERITIES is the order, most serious first; severity_rank sorts by it and severity_ladder climbs it
    (with no medium cut-off, medium is its floor); severity_from takes conditions, milder steps down."""
    assert SEVERITIES == ("high", "medium", "low")
    assert [severity_rank(s) for s in SEVERITIES] == [2, 1, 0]
    t = {"high_share": 0.3, "medium_share": 0.1, "high_speedup": 2.0}
    assert [severity_ladder(x, t) for x in (0.5, 0.3, 0.2, 0.1, 0.05)] == ["high", "high", "medium", "medium", "low"]
    assert [severity_ladder(x, t, medium=None) for x in (0.5, 0.3, 0.05)] == ["high", "high", "medium"]
    assert [severity_ladder(x, t, "high_speedup", None) for x in (2.5, 1.5)] == ["high", "medium"]
    assert [severity_from(True), severity_from(False), severity_from(True, False), severity_from(False, False)] == [
        "high",
        "medium",
        "high",
        "low",
    ]
    assert [milder(s) for s in SEVERITIES] == ["medium", "low", "low"]


def module_constants(source: str) -> dict[str, int]:
    """{name: line} of the public constants a module defines at its top level (`MATRIX_KINDS = …`)."""
    names: dict[str, int] = {}
    for node in ast.parse(source).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        for target in targets:
            if isinstance(target, ast.Name) and target.id.isupper() and not target.id.startswith("_"):
                names[target.id] = node.lineno
    return names


VOCABULARY_CONSTANTS = {
    name: path.stem
    for path in sorted((ROOT / "diagnose" / "vocabulary").glob("*.py"))
    for name in module_constants(path.read_text())
}


# Constants that share a vocabulary name but not its meaning
NOT_SHADOWS = {
    ("diagnose/child/quantize.py", "KINDS"),  # --verify variant -> the weights' format, not kernel kinds
    ("diagnose/metrics/overhead.py", "KINDS"),  # the kinds of host event the profiler's cost is fitted on
}


def test_no_module_shadows_a_vocabulary_constant():
    """A constant named like one of the vocabulary's (MATRIX_KINDS, SYNC_CALL, RUNG_NAMES) is a second
    copy that drifts: import the vocabulary's instead."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name} (diagnose/vocabulary/{VOCABULARY_CONSTANTS[name]}.py has it)"
        for path in sources()
        for name, line in module_constants(path.read_text()).items()
        if name in VOCABULARY_CONSTANTS and (str(path.relative_to(ROOT)), name) not in NOT_SHADOWS
    ]
    assert not offenders, "import it from diagnose/vocabulary:\n" + "\n".join(offenders)


def test_the_shadow_check_can_fail():
    assert "MATRIX_KINDS" in VOCABULARY_CONSTANTS and "SYNC_CALL" in VOCABULARY_CONSTANTS
    assert module_constants('MATRIX_KINDS = ("gemm", "conv")\nx = 1\n') == {"MATRIX_KINDS": 1}
    assert not module_constants("from diagnose.vocabulary.kernels import MATRIX_KINDS\n")


@pytest.mark.parametrize(
    "name, syncs",
    [
        ("cudaStreamSynchronize", True),
        ("cudaDeviceSynchronize", True),
        ("cudaEventSynchronize", True),
        ("hipDeviceSynchronize", True),
        ("cudaMemcpy", True),
        ("cudaMemcpy2D", True),
        ("hipMemcpy", True),
        ("cuMemcpyDtoH_v2", True),
        ("cuMemcpyHtoD", True),
        ("cudaMemcpyAsync", False),
        ("cudaMemcpy2DAsync", False),
        ("cudaLaunchKernel", False),
        ("cudaStreamWaitEvent", False),
    ],
)
def test_sync_calls(name, syncs):
    """The one sync pattern (metrics/timeline.py, host.py, overhead.py ask it): blocking calls wait, async copies do not."""
    assert bool(SYNC_CALL.search(name)) is syncs


@pytest.mark.parametrize(
    "name, replay, begin, end, instantiate",
    [
        ("cudaGraphLaunch", True, False, False, False),
        ("hipGraphLaunch", True, False, False, False),
        ("cudaStreamBeginCapture", False, True, False, False),
        ("cudaStreamBeginCapture_v2", False, True, False, False),
        ("hipStreamBeginCapture", False, True, False, False),
        ("cudaStreamEndCapture", False, False, True, False),
        ("cudaGraphInstantiate", False, False, False, True),
        ("cudaGraphInstantiateWithFlags", False, False, False, True),
        ("cudaLaunchKernel", False, False, False, False),
    ],
)
def test_graph_calls(name, replay, begin, end, instantiate):
    """Graph replays (any position, `GRAPH_LAUNCH.search`) and the capture calls (a prefix, `.match`)."""
    assert bool(GRAPH_LAUNCH.search(name)) is replay
    assert bool(CAPTURE_BEGIN.match(name)) is begin
    assert bool(CAPTURE_END.match(name)) is end
    assert bool(GRAPH_INSTANTIATE.match(name)) is instantiate


@pytest.mark.parametrize(
    "name, direction, pageable, pinned",
    [
        ("Memcpy HtoD (Pageable -> Device)", "HtoD", True, False),
        ("Memcpy DtoH (Device -> Pinned)", "DtoH", False, True),
        ("Memcpy HtoD (Pinned -> Device)", "HtoD", False, True),
        ("Memcpy DtoD (Device -> Device)", None, False, False),
        ("Memset (Device)", None, False, False),
    ],
)
def test_copies(name, direction, pageable, pinned):
    """A copy's GPU event: its host-device direction, and the host memory it names."""
    found = COPY_DIRECTION.search(name)
    assert (found.group(1) if found else None) == direction
    assert bool(HOST_COPY.search(name)) is (direction is not None)
    assert bool(HOST_TO_DEVICE.search(name)) is (direction == "HtoD")
    assert (PAGEABLE in name, PINNED in name) == (pageable, pinned)


@pytest.mark.parametrize(
    "name, compiling",
    [
        ("dynamo", True),
        ("entire_frame_compile", True),
        ("compile_fx_inner (dynamo_timed)", True),
        ("TorchDynamo Cache Lookup", False),
        ("dynamo_cache", False),
        ("Torch-Compiled Region: 0/0", False),
    ],
)
def test_compiling(name, compiling):
    """torch.compile compiling: its own ranges (metrics/host.py and slow_ops.py count them as setup)."""
    assert bool(COMPILING.search(name)) is compiling


def test_triton_prefix_is_an_inductor_kernel():
    assert INDUCTOR_KERNEL.match(TRITON_PREFIX + "poi_fused_add_0")


@pytest.mark.parametrize(
    "name, norm, conv",
    [
        ("aten::cudnn_batch_norm", True, False),
        ("aten::native_batch_norm_backward", True, False),
        ("aten::convolution", False, True),
        ("aten::cudnn_convolution_backward", False, True),
        ("aten::layer_norm", False, False),
        ("aten::mm", False, False),
    ],
)
def test_norm_and_conv_ops(name, norm, conv):
    assert bool(BATCH_NORM_OP.search(name)) is norm
    assert bool(CONV_OP.search(name)) is conv


def test_precision_tables():
    """One table per fact, every rung of it a precision; the numbers agree with the dtypes' own."""
    assert set(RUNG_NAMES) <= set(PRECISIONS)
    assert {*FP32_PRECISIONS, *HALF_PRECISIONS, *NARROW_PRECISIONS} <= set(PRECISIONS)
    assert [rung_name(r) for r in ("fp32", "tf32", "bf16", "fp8", "fp4")] == [
        "FP32 (CUDA cores)",
        "TF32 tensor cores",
        "bf16 tensor cores",
        "FP8 tensor cores",
        "fp4",
    ]
    bytes_of = {r: precision_bytes(r) for r in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")}
    assert bytes_of == {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp4": None}
    for dtype in ("float", "bfloat16", "c10::Half", "c10::Float8_e4m3fn", "float8_e5m2", "signed char"):
        assert precision_bytes(precision(dtype)) == dtype_bytes(dtype)
    assert all((precision_bytes(r) or 0) < precision_bytes("fp32") for r in NARROW_PRECISIONS)


def test_kind_tables():
    assert set(MATMUL_KINDS) < set(MATRIX_KINDS) <= set(KINDS)
    assert "attention" not in MATMUL_KINDS and not set(MEMORY_KINDS) & set(MATRIX_KINDS)


@pytest.mark.parametrize(
    "fraction, op, threshold, held, written, text",
    [
        (0.7123, ">=", 0.2, 0.712, (71.2, 20.0), "host wait 71.2 % >= 20 %"),
        (0.15, ">=", 0.2, 0.15, (15.0, 20.0), "host wait 15 % >= 20 % (not met)"),
        (0.0004, "", None, 0.0, (0.0, None), "host wait 0 %"),
        (1.0, "<", 0.07, 1.0, (100.0, 7.0), "host wait 100 % < 7 % (not met)"),
    ],
)
def test_share_evidence(fraction, op, threshold, held, written, text):
    """A rule gives a fraction and a fraction threshold; the evidence holds fractions (the value kept to what
    its percent shows), findings.json writes the percents it has always written, units.percent shows them."""
    e = Evidence.share("host wait", fraction, op, threshold)
    assert (e.value, e.threshold, e.unit) == (held, threshold, "%")
    assert (e.written(e.value), e.written(e.threshold)) == written
    assert e.text() == text
    assert Evidence.share("matmuls", 0.123, unit="% of step").text() == "matmuls 12.3 % of step"
