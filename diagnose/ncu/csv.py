"""Read Nsight Compute results: `ncu --csv --page raw` text, its `--page details` form, or a `.ncu-rep`.

What the tool writes is not a clean CSV: `==PROF==` / `==WARNING==` / `==ERROR==` lines and the
profiled program's own output come first (and sometimes in between), the raw page's second row
holds the units, numbers carry thousands separators ("1,383,296"), and missing values read
`n/a`. The result is an `NcuTable`: one row per profiled kernel launch with a fixed set of columns
(`COLUMNS`), plus the problems the tool reported (no permission for the counters, kernels that
could not be replayed, nothing profiled) as plain sentences.

A file given to diagnose (`--ncu-csv`, a capture folder's ncu.csv) is read like every file beside
a trace (trace/schemas.read_side_bytes: a regular file, at most NCU_MAX_BYTES, gzip inflated under
the same ceiling; a `.ncu-rep` at most NCU_REPORT_MAX_BYTES) and its table is
checked against NUMERIC_COLUMNS: every measured value is missing (NaN, from `n/a`) or a finite
number >= 0; anything else, or CSV the parser rejects (a field past the csv module's size
limit), is an InputError naming the file, the kernel row and the column.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from diagnose.base.errors import InputError
from diagnose.trace import schemas

NCU_MAX_BYTES = 256 << 20  # a raw-page CSV is ~10 kB per kernel: tens of thousands of kernels
NCU_REPORT_MAX_BYTES = 4 << 30  # a .ncu-rep, read by NVIDIA's module: the cap on a trace

# Raw metric names, in order of preference, for each column of an NcuTable.
METRICS = {
    "sm_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "mem_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_pct": ("dram__throughput.avg.pct_of_peak_sustained_elapsed",),
    "tensor_pct": (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
    ),
    "occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "dram_bytes": ("dram__bytes.sum",),
    "duration_us": ("gpu__time_duration.sum",),
    "blocks": ("launch__grid_size",),
    "threads": ("launch__block_size",),
    "waves": ("launch__waves_per_multiprocessor",),
    "sm_count": ("launch__sm_count", "device__attribute_multiprocessor_count"),
}
# The same quantities as the `--page details` CSV names them (section metrics, unit "%" where shown).
DETAILS_NAMES = {
    "Compute (SM) Throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "Memory Throughput": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "DRAM Throughput": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "Achieved Occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "Duration": "gpu__time_duration.sum",
    "Waves Per SM": "launch__waves_per_multiprocessor",
    "Grid Size": "launch__grid_size",
    "Block Size": "launch__block_size",
    "# SMs": "launch__sm_count",
}
# The metrics `--ncu` asks for (the launch__* ones come with every raw page).
REQUESTED_METRICS = (
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__bytes.sum",
    "gpu__time_duration.sum",
    "launch__grid_size",
    "launch__block_size",
)
COLUMNS = ["id", "kernel", "range", "stream", *METRICS]
UNIT_SCALE = {  # to bytes, µs and %
    "byte": 1.0,
    "kbyte": 1e3,
    "mbyte": 1e6,
    "gbyte": 1e9,
    "tbyte": 1e12,
    "kibyte": 1024.0,
    "mibyte": 1024.0**2,
    "gibyte": 1024.0**3,
    "nsecond": 1e-3,
    "ns": 1e-3,
    "usecond": 1.0,
    "us": 1.0,
    "msecond": 1e3,
    "ms": 1e3,
    "second": 1e6,
    "s": 1e6,
}
PERMISSION = "ERR_NVGPUCTRPERM"
PERMISSION_TEXT = (
    "Nsight Compute may not read the GPU performance counters on this machine (ERR_NVGPUCTRPERM): "
    "run it as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0"
)
NO_TABLE = "no Nsight Compute CSV table in it (empty, or only the tool's own messages)"
NO_HEADER = 'no CSV header line ("ID",...) found'
NO_ROWS = "the CSV has a header but no kernel rows (no kernel was profiled)"
_TOOL_LINE = re.compile(r"^==(PROF|WARNING|ERROR)==\s*(.*)$")
_FAILED = re.compile(
    r"failed to profile|could not be (?:profiled|replayed)|replay.*(?:failed|not supported)|"
    r"unsupported.*replay",
    re.IGNORECASE,
)


@dataclasses.dataclass
class NcuTable:
    """Profiled kernel launches (`COLUMNS`, in launch order), where they came from, and what went wrong."""

    kernels: pd.DataFrame
    source: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)
    device: str | None = None
    csv_text: str = ""

    @property
    def permission_denied(self) -> bool:
        """True when ncu was refused the performance counters."""
        return any(PERMISSION in p for p in self.problems)


def read_ncu(path: str | Path) -> NcuTable:
    """Read a CSV (plain or .gz) or a `.ncu-rep` file; raises InputError when it cannot be read at all."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such Nsight Compute file")
    if path.suffix == ".ncu-rep":
        size = path.stat().st_size if path.is_file() else 0
        if size > NCU_REPORT_MAX_BYTES:
            raise InputError(
                f"{path}: {size:,} bytes is more than the {NCU_REPORT_MAX_BYTES:,}-byte limit on an "
                "Nsight Compute report"
            )
        return read_report(path)
    raw = schemas.read_side_bytes(path, "an Nsight Compute CSV", NCU_MAX_BYTES)
    text = raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8", errors="replace")
    try:
        table = parse_text(text, source=str(path))
    except csv.Error as exc:
        raise InputError(f"{path}: not a readable Nsight Compute CSV ({exc})") from None
    check_values(table, path)
    return table


NUMERIC_COLUMNS = [c for c in COLUMNS if c not in ("kernel", "range")]


def check_values(table: NcuTable, path) -> None:
    """InputError naming the file, row and column of the first value that is neither missing nor a
    finite number >= 0 (negative ids and streams included: ncu numbers both from 0)."""
    values = table.kernels[NUMERIC_COLUMNS].to_numpy(dtype=float) if len(table.kernels) else np.empty((0, 0))
    bad = ~(np.isnan(values) | (np.isfinite(values) & (values >= 0)))
    if bad.any():
        row, col = (int(i) for i in np.argwhere(bad)[0])
        kernel = str(table.kernels["kernel"].iloc[row])[:80]
        raise InputError(
            f"{path}: row {row + 1} ({kernel!r}): {NUMERIC_COLUMNS[col]} = {values[row, col]!r} "
            "is not a finite number >= 0"
        )


def parse_text(text: str, source: str = "") -> NcuTable:
    """Parse what `ncu --csv` printed (raw or details page), preamble and all."""
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    problems = tool_problems(lines if header_at is None else lines[:header_at] + _stray(lines[header_at:]))
    if header_at is None:
        if not problems:
            problems.append(NO_TABLE if not _has_table_hint(lines) else NO_HEADER)
        return NcuTable(_empty(), source, problems)
    rows = [r for r in csv.reader(lines[header_at:]) if r]
    header, body = rows[0], rows[1:]
    body = [r for r in body if len(r) == len(header)]
    if "Metric Name" in header and "Metric Value" in header:
        records, units, device = _details_records(header, body)
    else:
        records, units, device = _raw_records(header, body)
    kernels = _frame(records, units)
    if not len(kernels) and not problems:
        problems.append(NO_ROWS)
    clean = "\n".join(lines[header_at:][:1] + [line for line in lines[header_at + 1 :] if line.startswith('"')])
    return NcuTable(kernels, source, problems, device, clean + "\n")


def tool_problems(lines: list[str]) -> list[str]:
    """Sentences for what ncu reported going wrong: counter permission, failed replays, nothing profiled."""
    problems: list[str] = []
    failed = 0
    for line in lines:
        match = _TOOL_LINE.match(line.strip())
        if PERMISSION in line and PERMISSION_TEXT not in problems:
            problems.append(PERMISSION_TEXT)
        if not match:
            continue
        kind, message = match.groups()
        if _FAILED.search(message):
            failed += 1
        elif kind == "ERROR" and PERMISSION not in message and len(problems) < 5:
            problems.append(f"ncu error: {message.strip()}")
        elif "No kernels were profiled" in message:
            problems.append("ncu profiled no kernel (its filters matched nothing in the measured step)")
    if failed:
        launches = f"{failed} kernel launches" if failed > 1 else "1 kernel launch"
        problems.append(f"{launches} could not be replayed by ncu: no measurement for {'them' if failed > 1 else 'it'}")
    return problems


def read_report(path: Path) -> NcuTable:
    """A `.ncu-rep` through NVIDIA's `ncu_report` module; one clear problem line when it is missing."""
    module = _ncu_report_module()
    if module is None:
        return NcuTable(
            _empty(),
            str(path),
            [
                f"{path.name}: reading .ncu-rep files needs NVIDIA's ncu_report module (Nsight Compute's "
                "extras/python); export a CSV instead: ncu --import FILE.ncu-rep --csv --page raw > ncu.csv"
            ],
        )
    try:
        report = module.load_report(str(path))
        records: list[dict] = []
        for r in range(report.num_ranges()):
            rng = report.range_by_idx(r)
            for a in range(rng.num_actions()):
                records.append(_action_record(rng.action_by_idx(a), len(records)))
    except Exception as exc:  # a foreign library's file reader: any failure is "unreadable"
        return NcuTable(_empty(), str(path), [f"{path.name}: ncu_report could not read it ({exc})"])
    kernels = _frame(records, {"gpu__time_duration.sum": "nsecond"})
    return NcuTable(kernels, str(path), [] if len(kernels) else [f"{path.name}: no kernel in the report"])


def _ncu_report_module():
    try:
        import ncu_report  # noqa: PLC0415 (optional, NVIDIA's)

        return ncu_report
    except ImportError:
        pass
    from diagnose.ncu.tool import find_ncu

    tool = find_ncu()
    if tool is None:
        return None
    extras = Path(tool).resolve().parent / "extras" / "python"
    if not (extras / "ncu_report.py").is_file():
        return None
    sys.path.append(str(extras))
    try:
        import ncu_report  # noqa: PLC0415

        return ncu_report
    except ImportError:
        return None


def _action_record(action, index: int) -> dict:
    record = {"ID": str(index), "Kernel Name": action.name()}
    for names in METRICS.values():
        for name in names:
            metric = action.metric_by_name(name)
            if metric is not None:
                record[name] = metric.as_double()
                break
    return record


def _is_header(line: str) -> bool:
    return line.startswith('"ID"') or ('"Kernel Name"' in line and line.startswith('"'))


def _has_table_hint(lines: list[str]) -> bool:
    return any(line.startswith('"') for line in lines)


def _stray(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("==")]


def _raw_records(header: list[str], body: list[list[str]]) -> tuple[list[dict], dict, str | None]:
    units: dict = {}
    if body and body[0] and body[0][0] == "":
        units = dict(zip(header, body[0]))
        body = body[1:]
    records = [dict(zip(header, row)) for row in body]
    device = next(
        (r.get("device__attribute_display_name") for r in records if r.get("device__attribute_display_name")), None
    )
    return records, units, device


def _details_records(header: list[str], body: list[list[str]]) -> tuple[list[dict], dict, str | None]:
    """The long `--page details` form pivoted to one record per kernel, raw metric names as keys."""
    by_id: dict[str, dict] = {}
    for row in body:
        cell = dict(zip(header, row))
        record = by_id.setdefault(
            cell.get("ID", ""), {k: cell.get(k, "") for k in ("ID", "Kernel Name", "Stream", "Block Size", "Grid Size")}
        )
        name, unit = cell.get("Metric Name", ""), cell.get("Metric Unit", "")
        raw = DETAILS_NAMES.get(name, name)
        if name in ("Memory Throughput",) and unit != "%":
            continue
        record[raw] = _number(cell.get("Metric Value", "")) * UNIT_SCALE.get(unit.strip().lower(), 1.0)
    return list(by_id.values()), {}, None


def _frame(records: list[dict], units: dict) -> pd.DataFrame:
    if not records:
        return _empty()
    range_key = next((k for k in records[0] if "Push/Pop_Range" in k or "Start/Stop_Range" in k), None)
    rows = []
    for i, rec in enumerate(records):
        row: dict[str, Any] = {
            "id": _number(rec.get("ID")),
            "kernel": str(rec.get("Kernel Name", "")).strip(),
            "range": str(rec.get(range_key, "")).strip() if range_key else "",
            "stream": _number(rec.get("Stream")),
        }
        for column, names in METRICS.items():
            row[column] = _metric(rec, units, names)
        if math.isnan(row["blocks"]):
            row["blocks"] = _dims_product(rec.get("Grid Size"))
        if math.isnan(row["threads"]):
            row["threads"] = _dims_product(rec.get("Block Size"))
        if math.isnan(row["id"]):
            row["id"] = float(i)
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _metric(rec: dict, units: dict, names: tuple[str, ...]) -> float:
    values = []
    for name in names:
        if name in rec:
            value = _number(rec[name])
            scale = UNIT_SCALE.get(str(units.get(name, "")).strip().lower(), 1.0)
            if not math.isnan(value):
                values.append(value * scale)
    if not values:
        return math.nan
    return max(values) if names is METRICS["tensor_pct"] else values[0]


def _number(value) -> float:
    """'1,383,296' -> 1383296.0; 'n/a', '' and text -> NaN."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return math.nan


def _dims_product(value) -> float:
    """'(128, 1, 1)' -> 128.0; NaN when it is not a dimension triple."""
    parts = re.findall(r"\d+", str(value or "").replace(",", " "))
    if not parts:
        return math.nan
    return float(math.prod(int(p) for p in parts))


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=COLUMNS)


__all__ = ["COLUMNS", "NcuTable", "REQUESTED_METRICS", "parse_text", "read_ncu", "tool_problems"]
