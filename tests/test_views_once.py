"""Every derived view of a trace is built once per analysis and shared by the rules and renderers.

Each view function is wrapped, wherever a module of diagnose (rules included) holds it, by a
counter; one full analysis of a real capture (diagnose.analyze, then the JSON and HTML reports)
must build each view at most once. silent_split is one view per distinct union of silent
stretches: the host-bound rule's (all of them) and the accounting's (those outside syncs) are the
same view unless a gap opened in a sync.
"""

from __future__ import annotations

import collections
import sys

import numpy as np
import pytest

from conftest import ROOT

import diagnose
from diagnose.memory import breakdown, patterns, record, timeline as memory_timeline
from diagnose.metrics import (
    accounting,
    budget,
    comm,
    compiled,
    host,
    launches,
    optimizer,
    pyframes,
    slow_ops,
    steps,
    timeline,
    work,
)
from diagnose.metrics.host import merge_intervals
from diagnose.report.html import render_html
from diagnose.report.json_report import render_json

VIEWS = [
    (steps, "find_steps"),
    (timeline, "build_timeline"),
    (budget, "step_budget"),
    (comm, "communication"),
    (comm, "rounds_per_step"),
    (launches, "join_launches"),
    (work, "step_kernels"),
    (work, "op_instances"),
    (accounting, "step_accounting"),
    (pyframes, "python_samples"),
    (slow_ops, "held_ops"),
    (record, "load_memory"),
    (breakdown, "peak_breakdown"),
    (patterns, "attention_calls"),
    (memory_timeline, "levels_in_steps"),
    (memory_timeline, "memory_timeline"),
    (compiled, "compiled_steps"),
    (host, "sync_calls"),
    (optimizer, "optimizer_steps"),
]

# real captures (fixtures/captures) that between them reach every view above: decode attention
# with allocator events, a KV cache grown by cat with memory.json and Python samples, training
# with an optimizer, hand-written attention's score matrices, syncs, and data-parallel collectives
CAPTURES = ["decode_eager", "kv_concat", "train_fits", "attention_naive_8k", "sync_item", "ddp_exposed"]


def _silent_key(args, kwargs) -> bytes:
    silent = args[1] if len(args) > 1 else kwargs["silent"]
    return merge_intervals(silent["start"].to_numpy(float), silent["end"].to_numpy(float)).tobytes()


@pytest.fixture
def builds(monkeypatch):
    """(view name, key) -> times built, counted wherever diagnose's modules hold the functions."""
    counts: collections.Counter = collections.Counter()

    def counted(label, fn, key=lambda args, kwargs: None):
        def wrapper(*args, **kwargs):
            counts[label, key(args, kwargs)] += 1
            return fn(*args, **kwargs)

        wrapper.counts_view = fn
        return wrapper

    wrappers = {getattr(m, name): counted(name, getattr(m, name)) for m, name in VIEWS}
    wrappers[host.silent_split] = counted("silent_split", host.silent_split, _silent_key)
    for module in [m for n, m in sys.modules.items() if n.startswith("diagnose") and m is not None]:
        for attr, value in list(vars(module).items()):
            # a module imported while an earlier test's wrappers were in place holds one of them: unwrap it
            value = getattr(value, "counts_view", value)
            if callable(value) and value in wrappers:
                monkeypatch.setattr(module, attr, wrappers[value])
    return counts


def test_each_view_is_built_once_and_the_captures_reach_every_view(builds):
    """One analysis per capture serves both checks: no view built twice in it, and every view reached by
    one of them (an analysis is seconds for the rank folder: the captures are not analysed twice)."""
    reached = set()
    for name in CAPTURES:
        builds.clear()
        d = diagnose.analyze(ROOT / "fixtures" / "captures" / name)
        reached |= {label for label, _ in builds}  # by the analysis itself, as before the reports
        render_json(d)
        render_html(d)
        twice = {
            f"{label}{'' if key is None else ' (same stretches)'}": n for (label, key), n in builds.items() if n > 1
        }
        assert not twice, f"views built more than once in one analysis of {name}: {twice}"
        assert builds, f"no view was counted in {name}: the wrappers are not where the analysis calls them"
    assert reached >= {name for _, name in VIEWS} | {"silent_split"}


def test_shapes_are_parsed_once_per_distinct_list():
    dims, types = [[2, 8, 128, 64], [], [64]], ["c10::BFloat16", "Scalar", "float"]
    first = patterns.shapes(dims, types)
    assert patterns.shapes(dims, types) is first
    again = patterns.shapes([list(d) for d in dims], list(types))  # equal values, other lists
    assert again == first and again is not first
    assert first[0].dims == (2, 8, 128, 64) and first[0].dtype == "c10::BFloat16" and first[1] is None
    assert np.isclose(first[0].nbytes, 2 * 8 * 128 * 64 * 2)
