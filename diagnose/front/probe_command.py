"""`diagnose probe`: measure this machine's GPU (bandwidth and matmul rates) and print it beside the
datasheet, the figures the roofline and the memory/compute rules then use for captures made here."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from diagnose.base import devices

from diagnose.base import measured_peaks
from diagnose.base.errors import EXIT_OK, InputError
from diagnose.vocabulary.units import percent


def probe_rows(record: dict) -> list[tuple[str, str, str, str]]:
    """(ceiling, measured, datasheet, measured ÷ datasheet) for the bandwidth and each measured precision."""
    device = record.get("device") or {}
    sheet = devices.by_name(
        {
            "name": device.get("name"),
            "memory_bytes": device.get("total_memory_bytes"),
            "sm_count": device.get("sm_count"),
        }
    )
    rows = []
    hbm = float(record["hbm_tbps"])
    rows.append(
        (
            "HBM bandwidth",
            f"{hbm:.2f} TB/s",
            f"{sheet.hbm_tbps:g} TB/s" if sheet else "—",
            f"{percent(hbm / sheet.hbm_tbps)}" if sheet else "—",
        )
    )
    for rung in measured_peaks.RUNGS:
        rate = (record.get("tflops") or {}).get(rung)
        if rate is None:
            continue
        peak = sheet.peak(rung) if sheet else None
        rows.append(
            (
                f"{rung} matmul",
                f"{rate:,.0f} TFLOP/s",
                f"{peak:,.0f} TFLOP/s" if peak else "—",
                f"{percent(rate / peak)}" if peak else "—",
            )
        )
    return rows


def run(refresh: bool = False, as_json: bool = False, python: str | None = None, console: Console | None = None) -> int:
    """Probe the GPU in a child process, print the table (or the JSON record) and return the exit code.

    No GPU, no torch or a failed probe is an InputError (exit 2) with one line saying why."""
    record, why = measured_peaks.run_probe(python, refresh=refresh)
    if record is None:
        raise InputError(f"the GPU probe did not run: {why}")
    console = console or Console(highlight=False)
    if as_json:
        console.print_json(json.dumps(record))
        return EXIT_OK
    device = record.get("device") or {}
    table = Table(
        title=f"{device.get('name', 'GPU')} · torch {device.get('torch')} · "
        f"{'cached ' if record.get('cached') else ''}{str(record.get('measured_at', ''))[:19]}"
    )
    for column in ("ceiling", "measured", "datasheet", "of datasheet"):
        table.add_column(column, justify="left" if column == "ceiling" else "right")
    for row in probe_rows(record):
        table.add_row(*row)
    console.print(table)
    bandwidth = record.get("bandwidth") or {}
    console.print(
        f"bandwidth: {bandwidth.get('method', '')}; matmuls: {record.get('matmul', '')}; {record.get('timing', '')}."
    )
    for rung, reason in (record.get("skipped") or {}).items():
        console.print(f"{rung}: not measured ({reason})")
    if record.get("cache_file"):
        console.print(
            f"cached in {record['cache_file']}; captures made here carry these figures "
            "(`diagnose probe --refresh` measures again)"
        )
    return EXIT_OK
