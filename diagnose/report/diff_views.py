"""Display-ready pieces of a DiffReport, shared by the diff views of every renderer."""

from __future__ import annotations

from typing import Any

from diagnose.diff import DiffReport
from diagnose.diff.build import basis_words
from diagnose.base.format import short_name
from diagnose.vocabulary.units import percent

MAX_BUCKET_ROWS = 6
VERDICT_CLASS = {"faster": "good", "slower": "bad", "no significant change": "same"}


def signed_us(value: float | None) -> str:
    """ "+1,234.5 µs" / "−12.0 µs"; "—" for None."""
    if value is None:
        return "—"
    return f"{value:+,.1f} µs".replace("-", "−")


def us(value: float | None) -> str:
    """ "1,234.5 µs"; "—" for None."""
    return "—" if value is None else f"{value:,.1f} µs"


def bucket_rows(r: DiffReport, limit: int = MAX_BUCKET_ROWS) -> list[dict]:
    """The buckets that moved, largest change first whatever its sign: label, before, after, change and
    share of the change; past `limit`, one row sums the rest, so the shares add up to the whole."""
    total = r.step_delta_us
    moved = sorted((b for b in r.buckets if abs(b.delta_us) >= 0.05), key=lambda b: -abs(b.delta_us))
    if not moved and r.buckets:
        moved = [max(r.buckets, key=lambda b: abs(b.delta_us))]
    shown, rest = (moved[: limit - 1], moved[limit - 1 :]) if len(moved) > limit else (moved, [])
    rows: list[dict[str, Any]] = [
        {
            "id": b.id,
            "label": b.label,
            "before": us(b.before_us),
            "after": us(b.after_us),
            "change": signed_us(b.delta_us),
            "delta_us": b.delta_us,
        }
        for b in shown
    ]
    if rest:
        rows.append(
            {
                "id": "rest",
                "label": f"the other {len(rest)} buckets",
                "before": us(sum(b.before_us for b in rest)),
                "after": us(sum(b.after_us for b in rest)),
                "change": signed_us(sum(b.delta_us for b in rest)),
                "delta_us": sum(b.delta_us for b in rest),
            }
        )
    for row, share in zip(rows, _percents([row.pop("delta_us") for row in rows], total)):
        row["share"] = share
    return rows


def _percents(deltas: list[float], total: float) -> list[str]:
    """Each delta as a whole percentage of `total`, rounded so that they add up to the rounded sum."""
    if not total:
        return ["—" for _ in deltas]
    exact = [d / total * 100 for d in deltas]
    whole = [round(x) for x in exact]
    off = round(sum(exact)) - sum(whole)
    for i in sorted(range(len(exact)), key=lambda i: -abs(exact[i] - whole[i]))[: abs(off)]:
        whole[i] += 1 if off > 0 else -1
    return [f"{w} %".replace("-", "−") for w in whole]


def top_change_lines(r: DiffReport, n: int = 3) -> list[str]:
    """The `n` largest attributed changes, one sentence each: bucket, then its largest matched item."""
    out = []
    for bucket, item in r.top_changes(n):
        text = f"{bucket.label}: {signed_us(bucket.delta_us)} per step"
        if item is not None:
            where = f"{item.kind} {short_name(item.name, 80)}"
            status = "" if item.status == "matched" else f", {item.status}"
            text += f", most of it {where} ({signed_us(item.delta_us)}{status})"
            if item.detail:
                text += f"; {item.detail}"
        out.append(text)
    return out


def step_line(r: DiffReport) -> str:
    """ "2,716.8 µs → 232.4 µs (−91.4 %, 95 % interval −91.6 % to −91.1 %; unprofiled, 30 + 30 steps)"."""
    s = r.step
    low, high = s.interval_pct
    basis = basis_words(s.basis)
    return (
        f"{s.before_us:,.1f} µs → {s.after_us:,.1f} µs ({s.change_pct:+.1f} %, {percent(s.confidence)} interval "
        f"{low:+.1f} % to {high:+.1f} %; {basis}, {s.n_before} + {s.n_after} steps)"
    ).replace("-", "−")


def finding_lines(r: DiffReport) -> list[str]:
    """One line per finding that appeared, disappeared or changed severity."""
    out = []
    for c in r.findings:
        if c.status == "unchanged":
            continue
        b = c.before.severity if c.before else "—"
        a = c.after.severity if c.after else "—"
        unsure = " and ".join(side for side, f in (("BEFORE", c.before), ("AFTER", c.after)) if f and f.range_text())
        said = f", uncertain on {unsure}'s estimated step" if unsure else ""
        out.append(f"{c.rule} {c.status} ({b} → {a}{said})")
    return out


def gate_line(r: DiffReport) -> str:
    """What the regression gate decided, or "" when none was asked for."""
    if r.gate_pct is None:
        return ""
    if r.gate_tripped:
        return f"regression gate TRIPPED: slower by more than {r.gate_pct:g} % and the interval excludes 0"
    return f"regression gate passed (--fail-on-regression {r.gate_pct:g})"
