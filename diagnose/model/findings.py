"""The Diagnosis: findings with evidence, rules skipped with reasons; versioned JSON in and out.

Every class here is a msgspec Struct: findings.json is their encoding (`Diagnosis.to_dict`), a
findings.json is read back typed and checked (`Diagnosis.from_dict`), and `diagnose schema` prints
the JSON Schema of `diagnose.model.findings/1` made from them (`findings_schema`). Changes stay additive:
a field added later has a default, so an older findings.json still reads. The report's sections,
the capture and the device are Structs too (diagnose/model/details.py). All are frozen. A Finding (its evidence and
offenders with it) is normalised when it is made: plain Python numbers, NaN as None, no estimate
outside [1, MAX_SPEEDUP]×.

An evidence share (its unit starts with "%") is a fraction in memory and the percent findings.json
has always held in the file (0.712 <-> 71.2): `evidence_json` writes it, `native_evidence` reads it,
and nothing else converts (`Evidence`).

An offender row is written flat, as before the rows were typed: the key its `label` names holds
what the row names ("op": "aten::mm"), beside `label` itself, its common measures and its extra
columns. A row from an older findings.json has no `label`; it is read by the first naming key it
holds (`Offender.from_row`).
"""

from __future__ import annotations

import math
from typing import Annotated, Callable, Iterable, Literal

import msgspec

from diagnose.vocabulary.units import fmt, fraction_of, is_number, percent, percent_number, shown_share
from diagnose.base.typed import plain
from diagnose.model.details import ByName, Capture, Details, Device
from diagnose.model.invariants import holds, screen

SCHEMA = "diagnose.model.findings/1"
MAX_SPEEDUP = 1e5  # beyond this an estimate says more about the input than the fix
SEVERITIES = ("high", "medium", "low")  # the one order of severities, most serious first
Severity = Literal["high", "medium", "low"]


_made = msgspec.structs.force_setattr  # a frozen Struct's own field, set while it is being made (__post_init__)


def severity_rank(severity: str) -> int:
    """How serious `severity` is, for sorting: 2 for high, 1 for medium, 0 for low."""
    return len(SEVERITIES) - 1 - SEVERITIES.index(severity)


SHARE_UNIT = "%"  # a unit that starts with it ("%", "% of step") makes the evidence a share


class Evidence(msgspec.Struct, frozen=True):
    """One measured value compared with its threshold: "host wait 71.2 % > 20 %".

    A share (its unit starts with "%": "%", "% of step") holds fractions, the value kept to what its
    percent shows (0.712, `units.shown_share`) against a fraction threshold (0.2); every renderer writes
    them with `units.percent`. findings.json writes a share's value and threshold as percents (71.2 and
    20.0), as it always has: `Diagnosis.to_dict` and `Diagnosis.from_dict` are the one place that
    converts (`evidence_json`, `native_evidence`). Any other number is held and written as it is.

    A comparison that does not hold (a rule that fires on either of two conditions shows both)
    carries `holds = False`, set here from the numbers as findings.json writes them, so the file, the
    report and the invariants (model/invariants.py) agree on it; it is shown as not met."""

    metric: str
    # a measurement, or what was found where a name says more (a file:line, a command)
    value: Annotated[
        float | str,
        msgspec.Meta(
            description=(
                'The measurement, in `unit`; a share (unit "%" or "% of step") is written as its percent, '
                "to one decimal (71.2 for 0.712). A string where a name says more (a file:line, a command)."
            )
        ),
    ]
    op: str = ""
    threshold: Annotated[
        float | None,
        msgspec.Meta(
            description="What `value` is compared with by `op`, in the same unit (a share's as a percent: 20.0)."
        ),
    ] = None
    unit: Annotated[
        str, msgspec.Meta(description='The unit of value and threshold; one that starts with "%" marks a share.')
    ] = ""
    holds: bool | None = None  # False: the comparison is not met; None: met, or not a comparison

    def __post_init__(self):
        # normalised once, as it is made (the Struct is frozen after): numpy numbers from pandas arithmetic become
        # Python floats, so JSON and YAML stay plain
        value = self.value if isinstance(self.value, (str, bool)) else float(self.value)
        if self.is_share and is_number(value):
            value = shown_share(value)
        _made(self, "value", value)
        if self.threshold is not None:
            _made(self, "threshold", float(self.threshold))
        if self.holds is None and holds(self.written(self.value), self.op, self.written(self.threshold)) is False:
            _made(self, "holds", False)

    @classmethod
    def share(
        cls, metric: str, fraction: float, op: str = "", threshold: float | None = None, unit: str = SHARE_UNIT
    ) -> "Evidence":
        """A share (a fraction: 0.712) against a fraction threshold (0.2), in `unit` ("%", or "% of step"):
        held as fractions, written "71.2 % > 20 %" by `text()` and 71.2 against 20.0 in findings.json."""
        if not unit.startswith(SHARE_UNIT):
            raise ValueError(f"a share's unit starts with {SHARE_UNIT!r}, not {unit!r}")
        return cls(metric, fraction, op, threshold, unit)

    @property
    def is_share(self) -> bool:
        """True when the value and threshold are shares (fractions, shown and written as percents)."""
        return self.unit.startswith(SHARE_UNIT)

    @property
    def is_test(self) -> bool:
        """True when the line compares its value with a threshold."""
        return self.threshold is not None and bool(self.op)

    def written(self, number):
        """`number` (this line's value or threshold) as findings.json holds it: a share's fraction as its
        percent (`units.percent_number`: 0.712 -> 71.2), anything else as it is."""
        return percent_number(number) if self.is_share and is_number(number) else number

    def text(self) -> str:
        """The evidence as one readable condition ("(not met)" after one that does not hold)."""
        if not self.is_test:
            return f"{self.metric} {self._shown(self.value)}"
        unmet = " (not met)" if self.holds is False else ""
        return f"{self.metric} {self._shown(self.value)} {self.op} {self._shown(self.threshold)}{unmet}"

    def _shown(self, number) -> str:
        """A value or threshold with its unit: a share through `units.percent` ("71.2 %", "12.3 % of step"),
        any other number through `fmt`."""
        if self.is_share and is_number(number):
            return percent(number) + self.unit.removeprefix(SHARE_UNIT)
        unit = f" {self.unit}" if self.unit else ""
        return f"{fmt(number)}{unit}"


def evidence_json(native: dict) -> dict:
    """findings.json's evidence line from an Evidence's builtins: a share's value and threshold as percents
    (0.712 against 0.2 -> 71.2 against 20.0), `holds` only on a comparison that is not met."""
    line = {k: v for k, v in native.items() if k != "holds" or v is not None}
    if str(line.get("unit") or "").startswith(SHARE_UNIT):
        for key in ("value", "threshold"):
            if is_number(line.get(key)):
                line[key] = percent_number(line[key])
    return line


def native_evidence(line):
    """An evidence line of findings.json in the Evidence's own form: a share's percents as fractions
    (71.2 against 20.0 -> 0.712 against 0.2). A line that is not an object, or a number that is not one,
    is left as it is for msgspec to name."""
    if not isinstance(line, dict) or not str(line.get("unit") or "").startswith(SHARE_UNIT):
        return line
    return {**line, **{k: fraction_of(line[k]) for k in ("value", "threshold") if is_number(line.get(k))}}


class Fix(msgspec.Struct, frozen=True):
    """A recommended fix, by stable id (diagnose/model/fixes.py lists them), with a code example for the case.
    Frozen: a step that changes a fix (model/frameworks.py, rulebook/in_place.py) makes a new one."""

    id: str
    title: str
    how: str
    code: str = ""
    prerequisite: bool = False  # a change the next fix needs first; the finding's estimate is for both
    api: str = ""  # the framework whose API the code is written in ("transformers.Trainer"); "" for plain PyTorch
    passed_over: str = ""  # why it is not named first: the trace shows the code has it (rulebook/in_place.py)


class CheatSheet(msgspec.Struct, frozen=True):
    """The cheat-sheet row a rule encodes, as the finding carries it (an old findings.json renders
    the same after the rules change)."""

    bottleneck: str = ""
    signal: str = ""
    fix: str = ""
    impact: str = ""


OffenderLabel = Literal[
    "op",
    "kernel",
    "code",
    "host work",
    "chain",
    "collective",
    "allocation",
    "live blocks",
    "part",
    "rank",
    "graph break",
    "host range",
    "score matrix",
    "name",
]
# label -> the key that holds the row's name in findings.json; in this order an older row without
# `label` is read by the first key it holds
LABEL_KEYS: dict[str, str] = {
    "op": "op",
    "kernel": "kernel",
    "code": "code",
    "host work": "host work",
    "chain": "chain",
    "collective": "collective",
    "allocation": "allocated_by",
    "live blocks": "live_block_by",
    "part": "part",
    "rank": "offender",
    "graph break": "where",
    "host range": "host_range",
    "score matrix": "score_matrix",
    "name": "name",
}
ExtraValue = str | int | float | bool | list[int | float] | dict[str, float] | None
OFFENDER_MEASURES = ("us_per_step", "calls_per_step", "kernels_per_step", "share_of_step", "rank")


class Offender(msgspec.Struct, kw_only=True, frozen=True):
    """One row of what a finding blames: the thing it names (`label` says what that is: an op, a kernel,
    a file:line of the user's code, a chain of ops, an allocation site...), the measures rows share, and
    the rule's own columns in `extra` (in the order the rule gave them).

    `Offender.of` builds one from keyword columns; `row()` is its flat form, the key of the name first
    (what findings.json holds, less `label`, and what the report's table shows)."""

    label: OffenderLabel
    name: str | list[int] | None = None  # a score matrix is named by its dims
    us_per_step: float | None = None
    calls_per_step: float | None = None
    kernels_per_step: float | None = None
    share_of_step: float | None = None  # of the step, 0..1
    rank: int | None = None  # with several ranks: the rank the row is measured on
    extra: dict[str, ExtraValue] = msgspec.field(default_factory=dict)

    def __post_init__(self):
        # numpy numbers as Python ones, NaN as None: a row is plain data however the rule computed it
        _made(self, "name", plain_number(self.name))
        for measure in OFFENDER_MEASURES:
            _made(self, measure, plain_number(getattr(self, measure)))
        _made(self, "extra", {k: plain_number(v) for k, v in self.extra.items()})

    @classmethod
    def of(cls, label: OffenderLabel, name, **columns) -> "Offender":
        """An offender named `name` (a `label`), its columns split into the shared measures and `extra`."""
        common = {k: columns.pop(k) for k in OFFENDER_MEASURES if k in columns}
        return cls(label=label, name=name, **common, extra=columns)

    @classmethod
    def from_row(cls, row: dict) -> "Offender":
        """An offender from its flat form (findings.json's row): `label` says which key names it; a row
        without one (an older findings.json) is named by the first key of LABEL_KEYS it holds.
        msgspec.ValidationError names what does not fit (an unknown label, a value of the wrong type)."""
        return msgspec.convert(_native_row(row), cls)

    @property
    def key(self) -> str:
        """The column that holds the row's name ("op", "allocated_by", ...)."""
        return LABEL_KEYS[self.label]

    def get(self, column: str, default=None):
        """The value of one column of `row()` (the name under `key`), `default` where the row has none."""
        if column == self.key:
            return self.name
        if column in OFFENDER_MEASURES:
            value = getattr(self, column)
            return default if value is None else value
        return self.extra.get(column, default)

    def row(self) -> dict:
        """The flat row: the name under `key`, then the measures the row has, then `extra`."""
        measures = {k: getattr(self, k) for k in OFFENDER_MEASURES if getattr(self, k) is not None}
        return {self.key: self.name, **measures, **self.extra}


def plain_number(value):
    """A numpy number as a Python one, NaN as None; anything else as it is."""
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value


def _native_row(row: dict) -> dict:
    """An offender's flat row (findings.json) in the Struct's own form: label, name, measures, extra."""
    row = dict(row)
    label = row.pop("label", None)
    if label is None:
        label = next((lab for lab, key in LABEL_KEYS.items() if key in row), "name")
    name = row.pop(LABEL_KEYS[label], None) if isinstance(label, str) and label in LABEL_KEYS else None
    measures = {k: row.pop(k) for k in OFFENDER_MEASURES if k in row}
    return {"label": label, "name": name, **measures, "extra": row}


def _offender_json(native: dict) -> dict:
    """findings.json's flat row from an Offender's builtins (`label` first, then `row()`'s columns)."""
    label = native["label"]
    measures = {k: native[k] for k in OFFENDER_MEASURES if native.get(k) is not None}
    return {"label": label, LABEL_KEYS[label]: native.get("name"), **measures, **native.get("extra", {})}


class RunToRun(msgspec.Struct, frozen=True):
    """How much two runs of the baseline differ from each other (diagnose/child/compare.py)."""

    tensors_that_vary: int = 0
    max_rel_difference: float = 0.0
    within_it: int = 0  # fixed tensors judged within that variation


class Numerics(msgspec.Struct, frozen=True):
    """`--verify`'s check of a fixed step's outputs against the original's (diagnose/child/compare.py)."""

    verdict: str | None = (
        None  # match | within precision | within run-to-run variation | changes results | not compared
    )
    tensors: int | None = None
    detail: str | None = None
    max_abs_diff: float | None = None
    max_rel_error: float | None = None
    failures: list[str] | None = None
    failed: int | None = None
    tolerances: dict[str, list[float]] | None = None
    precision: str | None = None
    precision_tolerance: list[float] | None = None
    precision_relative: float | None = None
    beyond_dtype: int | None = None
    run_to_run: RunToRun | None = None


class TrialBudget(msgspec.Struct, frozen=True):
    """The fixed step's budget, from the trace its verify child profiled (diagnose/verify/budget.py)."""

    step_time_us: float | None = None
    gpu_busy_fraction: float | None = None
    gpu_ops_per_step: float | None = None
    host_wait_share: float | None = None
    time_basis: str | None = None
    buckets_us: dict[str, float] = msgspec.field(default_factory=dict)


class Trial(msgspec.Struct, frozen=True):
    """One variant of a fix, as `--verify` measured it (diagnose/verify/model.py FixTrial)."""

    variant: str
    how: str
    status: str  # ok | failed | oom | timeout | crashed | not applicable | already applied
    verdict: str = ""
    error: str = ""
    speedup: float | None = None  # baseline ÷ fixed median step
    interval: list[float] | None = None  # [low, high] of the speedup, 95 %
    baseline_us: float | None = None
    fixed_us: float | None = None
    n_baseline: int = 0
    n_fixed: int = 0
    baseline_basis: str = ""
    numerics: Numerics | None = None
    budget: TrialBudget | None = None
    folder: str = ""


class Verify(msgspec.Struct, frozen=True):
    """One fix of one finding under `--verify`: the variants tried (or why none could be), the best one."""

    fix: str
    applicable: bool
    why: str = ""
    verdict: str = ""
    best: str | None = None  # the variant the verdict is of
    snippet: str = ""
    trials: list[Trial] = msgspec.field(default_factory=list)


class StepRange(msgspec.Struct, frozen=True):
    """How a finding or a quiet rule fares across its uncertain estimated step (ruleset/step_range.py): the rule run
    again with the step taken as the fastest and as the slowest replayed step, and its severity there ("quiet" where
    it would not fire). Only on a trace analysed alone whose replayed steps lie far apart
    (Summary.estimated_step_range_us)."""

    fastest_us: float  # the step judged at each end: the replayed step, held within what the trace allows
    slowest_us: float
    at_fastest: str  # a severity, or "quiet"
    at_slowest: str
    # the fastest and slowest replayed step where the trace does not allow it (shorter than the step's GPU-side time,
    # longer than all its recorded host idle allows) and the end judged is held to its bound; 0 where it is the same
    replayed_fastest_us: float = 0.0
    replayed_slowest_us: float = 0.0
    # the finding's estimated speedup at each end where the rule fires there and gives one (None otherwise)
    est_at_fastest: float | None = None
    est_at_slowest: float | None = None

    @property
    def holds(self) -> bool:
        """Whether the rule fires at both ends of the range."""
        return QUIET not in (self.at_fastest, self.at_slowest)

    def text(self, severity: str) -> str:
        """ "quiet if the step is 14,532 µs (the fastest replayed)" where an end of the range changes the finding
        from `severity` (its severity on the estimated step), the ends that do joined by "; "; "" where neither
        does."""
        return self.ends_text(lambda at: at != severity)

    def quiet_text(self) -> str:
        """The same words for the ends where the rule would not fire only ("" where it fires at both)."""
        return self.ends_text(lambda at: at == QUIET)

    def ends_text(self, said: Callable[[str], bool]) -> str:
        """The ends whose verdict (a severity or "quiet") `said` keeps, in words: "quiet if the step is 14,532 µs
        (the fastest replayed)", "medium, est. 1.49×, if the step is 33,013 µs (the slowest replayed)", joined by
        "; "; "" for none."""
        ends = (
            ("fastest", self.fastest_us, self.replayed_fastest_us, self.at_fastest, self.est_at_fastest),
            ("slowest", self.slowest_us, self.replayed_slowest_us, self.at_slowest, self.est_at_slowest),
        )
        return "; ".join(
            f"{at}{f', est. {est:.2f}×,' if est and at != QUIET else ''} if the step is {fmt(us)} µs "
            f"({_end_words(end, replayed)})"
            for end, us, replayed, at, est in ends
            if said(at)
        )


def _end_words(end: str, replayed_us: float) -> str:
    """What an end of a step range is: "the fastest replayed", or where the replayed step lies beyond what the
    trace allows and the end is held to that bound, "the shortest the trace allows; the fastest replayed step is
    shorter"."""
    if not replayed_us:  # 0: the replayed step is the one judged
        return f"the {end} replayed"
    bound, beyond = ("shortest", "shorter") if end == "fastest" else ("longest", "longer")
    return f"the {bound} the trace allows; the {end} replayed step is {beyond}"


QUIET = "quiet"


class Finding(msgspec.Struct, frozen=True):
    """A bottleneck a rule found, with everything needed to believe and act on it. Frozen: normalised when
    made (`__post_init__`); a later step (the engine's `finished`, `--verify`) makes a new Finding of it."""

    rule: str
    severity: Severity
    title: str
    evidence: list[Evidence]
    fixes: list[Fix]
    offenders: list[Offender] = msgspec.field(default_factory=list)
    est_speedup: float | None = None
    basis: str = ""
    recoverable_us: float | None = None
    why: str = ""
    verify: list[Verify] | None = None  # --verify: one entry per fix, measured
    ranks: list | None = None  # with several ranks: the ranks it holds on (None: a single trace)
    sheet: CheatSheet | None = None  # the rule's cheat-sheet row, filled in when the Diagnosis is assembled
    # on an uncertain estimated step: the rule's verdict at the fastest and the slowest replayed step
    step_range: StepRange | None = None

    def __post_init__(self):
        """Plain numbers, and no estimate that is not a finite speedup of at least 1× (a broken input must not
        print "est. 3,072,000,000,000× faster"): the reason goes into the basis instead."""
        for name in ("est_speedup", "recoverable_us"):
            value = getattr(self, name)
            if value is not None:
                _made(self, name, float(value))
        speedup = self.est_speedup
        if speedup is not None and not (math.isfinite(speedup) and 1.0 <= speedup <= MAX_SPEEDUP):
            _made(
                self,
                "basis",
                f"no estimate: the computation gave {speedup:g}×, outside [1, {MAX_SPEEDUP:g}]; {self.basis}",
            )
            _made(self, "est_speedup", None)

    def fix_phrase(self) -> str:
        """The fix the estimate is for: "cuda-graphs", or "fused-optimizer, then cuda-graphs" when
        the first fixes are prerequisites of the next ("remove-sync and fused-optimizer, then
        cuda-graphs"); "" without fixes."""
        if not self.fixes:
            return ""
        first = [x.id for x in self.fixes[:-1] if x.prerequisite]
        lead = len(first) if all(x.prerequisite for x in self.fixes[: len(first)]) else 0
        if not lead:
            return self.fixes[0].id
        before = first[0] if lead == 1 else ", ".join(first[: lead - 1]) + f" and {first[lead - 1]}"
        return f"{before}, then {self.fixes[lead].id}"

    def range_text(self) -> str:
        """ "uncertain: quiet if the step is 14,532 µs (the fastest replayed)" where the finding changes within its
        uncertain estimated step (`step_range`), else "": every renderer says it beside the finding."""
        said = self.step_range.text(self.severity) if self.step_range else ""
        return f"uncertain: {said}" if said else ""


class Skipped(msgspec.Struct, frozen=True):
    """A rule that could not run on this input, and why."""

    rule: str
    reason: str


class Checked(msgspec.Struct, frozen=True):
    """A rule that ran and did not fire, with the deciding numbers."""

    rule: str
    detail: str
    # on an uncertain estimated step: the rule's verdict at the fastest and the slowest replayed step
    step_range: StepRange | None = None

    def range_text(self) -> str:
        """ "uncertain: low if the step is 33,013 µs (the slowest replayed)" where the rule would fire at an end of
        its uncertain estimated step (`step_range`), else ""."""
        said = self.step_range.text(QUIET) if self.step_range else ""
        return f"uncertain: {said}" if said else ""


class Bucket(msgspec.Struct, frozen=True):
    """One bucket of the step accounting (diagnose/metrics/accounting.py): µs per step and its share."""

    id: str
    label: str
    us_per_step: float
    share: float
    detail: str = ""
    names: list[str] = msgspec.field(default_factory=list)
    in_sum: bool = True  # False: overlapped with compute, shown beside the step, not in its sum
    by_name: list[ByName] = msgspec.field(default_factory=list)


class Accounting(msgspec.Struct, frozen=True):
    """The step split into buckets that sum to it (`summary.accounting`)."""

    step_us: float
    buckets: list[Bucket] = msgspec.field(default_factory=list)
    largest_non_compute: str | None = None
    basis: str = ""

    def bucket(self, id: str) -> Bucket | None:
        """The summed bucket `id`, None where the step has none."""
        return next((b for b in self.buckets if b.id == id and b.in_sum), None)


class IdleSplit(msgspec.Struct, frozen=True):
    """The GPU's idle time per step by cause (µs; diagnose/metrics/timeline.py)."""

    host_launch: float = 0.0
    host_other: float = 0.0
    host_after_sync: float = 0.0
    kernel_wait: float = 0.0
    other_wait: float = 0.0


class RankRow(msgspec.Struct, frozen=True):
    """One rank of `summary.ranks` (per step, µs; diagnose/rankset/model.py RankSet.summary)."""

    rank: int
    source: str = ""
    rank_from: str = ""
    step_us: float | None = None
    step_basis: str = ""
    unprofiled_step_us: float | None = None
    profiled_step_us: float | None = None
    wait_share: float | None = None
    compute_us: float | None = None
    work_us: float | None = None
    kernels_per_step: float | None = None
    forwards_per_step: float | None = None
    comm_rounds_per_step: float | None = None
    comm_us: float | None = None
    exposed_comm_us: float | None = None
    wait_us: float | None = None
    transfer_us: float | None = None
    timed_wait_us: float | None = None  # wait per timed step, without the profiler (timed_step_us its step)
    timed_step_us: float | None = None
    findings: list[str] = msgspec.field(default_factory=list)


class ArrivalRow(msgspec.Struct, frozen=True):
    """One rank's arrivals at the collectives (`summary.ranks.arrivals.per_rank`)."""

    rank: int
    last_share: float | None = None
    lateness_us: float | None = None
    late_steps: float | None = None
    host_last_share: float | None = None
    host_lateness_us: float | None = None
    wait_us: float | None = None
    transfer_us: float | None = None
    behind_us: float | None = None
    behind_host_us: float | None = None
    lead_in_us: float | None = None
    silent_lead_in_us: float | None = None


class ArrivalsSummary(msgspec.Struct, frozen=True):
    """Collectives matched across ranks by key, on aligned clocks (`summary.ranks.arrivals`)."""

    basis: str = ""
    matched: int = 0
    steps: int = 0
    dropped: int = 0
    clock_offset_us: dict[str, float] = msgspec.field(default_factory=dict)
    end_spread_us: float | None = None
    per_rank: list[ArrivalRow] = msgspec.field(default_factory=list)


class TimedArrivalRow(msgspec.Struct, frozen=True):
    """One rank's arrivals in the unprofiled timed steps (`summary.ranks.timed_arrivals.per_rank`)."""

    rank: int
    step_us: float | None = None
    wait_us: float | None = None
    lateness_us: float | None = None
    host_lateness_us: float | None = None
    late_steps: float | None = None
    behind_us: float | None = None


class TimedArrivalsSummary(msgspec.Struct, frozen=True):
    """The ranks' own arrivals in the steps timed without the profiler (diagnose/rankset/timed.py)."""

    basis: str = ""
    on: str = ""
    matched: int = 0
    steps: int = 0
    dropped: int = 0
    clock_offset_us: dict[str, float] = msgspec.field(default_factory=dict)
    tie_us: float | None = None
    drift_us: float | None = None
    per_rank: list[TimedArrivalRow] = msgspec.field(default_factory=list)


class RankSummary(msgspec.Struct, frozen=True):
    """With several ranks: the ranks side by side (`summary.ranks`, diagnose/rankset/model.py)."""

    count: int
    reference: int
    step_basis: str = ""
    comm_split: str = ""
    arrivals: ArrivalsSummary | None = None
    timed_arrivals: TimedArrivalsSummary | None = None
    work: str = ""
    per_rank: list[RankRow] = msgspec.field(default_factory=list)


class Summary(msgspec.Struct, frozen=True):
    """The headline numbers of the report (diagnose/metrics Metrics.summary); every field None for a
    trace with no operation (written as `{}`)."""

    steps_analysed: int | None = None
    steps_found_by: str | None = None
    cold_start_us: float | None = None
    unrecorded_launches: int | None = None
    graph_capture: str | None = None  # the CUDA-graph replay that dominates the step, in words
    step_time_us: float | None = None  # the step estimates start from (unprofiled where timed)
    profiled_step_time_us: float | None = None
    unprofiled_step_time_us: float | None = None
    # without unprofiled timing: the unprofiled step replayed from the trace (metrics/overhead.py)
    # and the share of the host-side idle that is the profiler's own by that estimate
    estimated_unprofiled_step_time_us: float | None = None
    profiler_share_of_host_time: float | None = None
    python_tracing_us_per_step: float | None = None  # of the profiler's own time, what with_stack's Python events add
    # the fastest and slowest replayed step where they lie SPREAD_SAID or more apart (metrics/overhead.py): the
    # estimate is uncertain within that range
    estimated_step_range_us: list[float] | None = None
    gpu_busy_fraction: float | None = None
    gpu_busy_fraction_profiled: float | None = None
    gpu_busy_us_per_step: float | None = None
    gpu_ops_per_step: float | None = None
    idle_us_per_step: IdleSplit | None = None
    host_wait_share: float | None = None
    time_basis: str | None = None
    accounting: Accounting | None = None
    ranks: RankSummary | None = None  # with several ranks only
    # how the steps were found, one word (metrics/steps.py Steps.method), and whether the iteration is known;
    # None in a findings.json written before they were recorded (diff then reads steps_found_by's words)
    steps_method: str | None = None
    step_unit_known: bool | None = None

    @property
    def step_basis(self) -> str:
        """Which step time `step_time_us` is: "unprofiled" (measured), "estimated unprofiled"
        (replayed from the trace without the profiler's own time) or "profiled"."""
        if self.unprofiled_step_time_us:
            return "unprofiled"
        return "estimated unprofiled" if self.estimated_unprofiled_step_time_us else "profiled"

    def uncertain_text(self) -> str:
        """ "uncertain: its steps replay to 14,532-33,013 µs" where the estimated step rests on steps far apart
        (`estimated_step_range_us`), else "": every renderer says it beside the step."""
        if not self.estimated_step_range_us:
            return ""
        low, high = self.estimated_step_range_us
        return f"uncertain: its steps replay to {fmt(low)}-{fmt(high)} µs"

    @property
    def empty(self) -> bool:
        """True for the summary of a trace with no operation."""
        return all(getattr(self, f) is None for f in self.__struct_fields__)


class Diagnosis(msgspec.Struct, frozen=True):
    """Everything a report shows; `to_dict` is the findings.json schema. Frozen: built by one constructor
    (`assemble`); a later step makes a new Diagnosis (`verified`, `noted`, msgspec.structs.replace)."""

    target: str
    device: Device
    summary: Summary
    findings: list[Finding]
    skipped: list[Skipped]
    checked: list[Checked] = msgspec.field(default_factory=list)
    capture: Capture = msgspec.field(default_factory=Capture)
    warnings: list[str] = msgspec.field(default_factory=list)
    verdict: str = ""
    details: Details = msgspec.field(default_factory=Details)
    schema: str = SCHEMA

    def __repr__(self) -> str:
        top = (
            f"{self.findings[0].rule} est. {fmt(self.findings[0].est_speedup or 1)}×" if self.findings else "no finding"
        )
        return (
            f"<Diagnosis {self.target!r}: {top}; {len(self.findings)} findings, {len(self.checked)} quiet, "
            f"{len(self.skipped)} skipped>"
        )

    @classmethod
    def assemble(
        cls,
        *,
        target: str,
        device: Device,
        summary: Summary,
        findings: list[Finding],
        skipped: list[Skipped],
        checked: list[Checked],
        capture: Capture,
        details: Details,
        warnings: Iterable[str] = (),
        verdict: Callable[["Diagnosis"], str] | None = None,
    ) -> "Diagnosis":
        """The one way a Diagnosis is made from an analysis: its parts as given (warnings once each), every
        finding that breaks an invariant left out with the reason in the warnings (model/invariants.py),
        then the verdict sentence `verdict` writes of the result. Nothing is set on it afterwards: a later
        step (`--verify`, `noted`) makes a new Diagnosis of it."""
        warnings = list(warnings)
        draft = cls(
            target=target,
            device=device,
            summary=summary,
            findings=findings,
            skipped=skipped,
            checked=checked,
            capture=capture,
            warnings=warnings,
            details=details,
        )
        bad, notes = screen(draft)
        kept = [f for i, f in enumerate(findings) if i not in bad]
        d = msgspec.structs.replace(draft, findings=kept, warnings=list(dict.fromkeys([*warnings, *notes])))
        return msgspec.structs.replace(d, verdict=verdict(d)) if verdict is not None else d

    def verified(self, records: list[list[Verify]]) -> "Diagnosis":
        """A new Diagnosis: this one with `--verify`'s entries joined to its findings (`records[i]` those of
        `findings[i]`, diagnose/verify/run.py); the findings are made anew with them, this one is left as it is."""
        if len(records) != len(self.findings):
            raise ValueError(f"{len(records)} lists of verify entries for {len(self.findings)} findings")
        findings = [msgspec.structs.replace(f, verify=r) for f, r in zip(self.findings, records)]
        return msgspec.structs.replace(self, findings=findings)

    def noted(self, *lines: str) -> "Diagnosis":
        """A new Diagnosis: this one with `lines` first among its warnings (what a later step, such as
        `--verify`, has to say of the run), each line once."""
        return msgspec.structs.replace(self, warnings=list(dict.fromkeys([*lines, *self.warnings])))

    def to_dict(self) -> dict:
        """Plain data for JSON (the stable, versioned schema)."""
        data = msgspec.to_builtins(self, enc_hook=plain)
        summary = data["summary"]
        if self.summary.empty:
            data["summary"] = {}
        elif summary.get("ranks") is None:
            summary.pop("ranks", None)
        for finding in data["findings"]:  # additive fields appear only when they hold something
            for key in ("ranks", "sheet"):
                if finding.get(key) is None:
                    finding.pop(key, None)
            finding["offenders"] = [_offender_json(o) for o in finding["offenders"]]
            finding["evidence"] = [evidence_json(e) for e in finding["evidence"]]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Diagnosis":
        """Rebuild a Diagnosis from its JSON form, checked against the model (msgspec.ValidationError
        names the field that does not fit). Offender rows are read from their flat form, with or
        without `label` (Offender.from_row)."""
        findings = data.get("findings") if isinstance(data, dict) else None
        if isinstance(findings, list):
            data = {**data, "findings": [_native_finding(f) for f in findings]}
        return msgspec.convert(data, cls)

    def worst_severity(self) -> str | None:
        """The most serious severity among the findings."""
        for level in SEVERITIES:
            if any(f.severity == level for f in self.findings):
                return level
        return None

    def findings_frame(self):
        """The findings as a pandas DataFrame: one row per finding, evidence as text."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "rule": f.rule,
                    "severity": f.severity,
                    "title": f.title,
                    "est_speedup": f.est_speedup,
                    "recoverable_us": f.recoverable_us,
                    "fixes": ", ".join(x.id for x in f.fixes),
                    "evidence": "; ".join(e.text() for e in f.evidence),
                }
                for f in self.findings
            ]
        )

    def kernels_frame(self):
        """The top GPU kernels per step as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([k.columns() for k in self.details.top_kernels or []])

    def steps_frame(self):
        """The per-step table (profiled time) as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([s.columns() for s in self.details.steps or []])

    @property
    def workload_failed(self) -> bool:
        """True when the captured workload raised, ran out of memory, timed out or crashed."""
        return self.capture.failed


def _native_finding(finding):
    """A finding's JSON in the Finding's own form: its offender rows as Offenders (`_native_row`), its
    evidence shares as fractions (`native_evidence`); what is not the expected shape is left for msgspec
    to name."""
    if not isinstance(finding, dict):
        return finding
    rows, lines = finding.get("offenders"), finding.get("evidence")
    native = dict(finding)
    if isinstance(rows, list) and all(isinstance(r, dict) for r in rows):
        native["offenders"] = [_native_row(r) for r in rows]
    if isinstance(lines, list):
        native["evidence"] = [native_evidence(e) for e in lines]
    return native


def check_findings_file(path) -> Diagnosis:
    """A findings.json read and checked against the model; InputError naming the file and the
    field that does not fit (or the schema it claims, when that is not this one)."""
    from pathlib import Path

    from diagnose.base.errors import InputError
    from diagnose.trace.schemas import read_json_object

    path = Path(path)
    data = read_json_object(path, "findings")
    if data.get("schema") != SCHEMA:
        raise InputError(f"{path}: schema {data.get('schema')!r}, not {SCHEMA!r} (is it a findings.json?)")
    try:
        return Diagnosis.from_dict(data)
    except msgspec.ValidationError as exc:
        raise InputError(f"{path}: does not fit {SCHEMA}: {exc}") from None


def findings_schema() -> dict:
    """The JSON Schema of findings.json (`diagnose.model.findings/1`), from the model itself; an offender is
    described in its flat form (module docstring): `label`, the measures, and any other column."""
    schema = msgspec.json.schema(Diagnosis)
    offender = schema["$defs"]["Offender"]
    props = offender["properties"]
    extra = props.pop("extra")["additionalProperties"]
    name = props.pop("name")
    offender["properties"] = {**props, **{key: name for key in LABEL_KEYS.values() if key not in props}}
    offender["additionalProperties"] = extra
    offender["required"] = []  # `label` is new: an older findings.json's rows have none
    offender["description"] = (
        offender.get("description", "") + "\n\nWritten flat: the key LABEL_KEYS[label] holds the name."
    ).strip()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": SCHEMA, **schema}
