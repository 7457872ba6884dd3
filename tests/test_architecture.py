"""One floor per folder, lowest first: base → capture → child → trace → metrics → memory → ncu → rankset → model
→ rulebook → rules → ruleset → ranks → diff → verify → report → front → commands → the package itself.

Every import counts, those deferred inside functions too (they are the hidden cycles): a module may import
only modules of its own folder's floor or below, and the module graph has no cycle at all. fixtures/ is
installed as `diagnose.fixtures`, and it is walked under that name.

No arrow points back up: KNOWN_BACK_ARROWS is empty. A folder that spans two floors is split (the engine
in rulebook/, what reads every rule in ruleset/; rank discovery in trace/, the cross-rank model in
rankset/, the rank analysis in ranks/), and a dependency on a higher floor is passed in by the caller
(Metrics gets the ncu join and the attention-call finder from the rules' Context). An arrow listed there
that is gone fails too (take it off the list).
"""

from __future__ import annotations

import ast

from conftest import ROOT

# Lowest first. A module belongs to the first floor with a prefix that matches its dotted name: one
# folder, one floor (base and vocabulary share the ground floor; fixtures/ is data).
FLOORS = [
    ("base", ["diagnose.base", "diagnose.vocabulary", "diagnose.fixtures"]),
    ("capture", ["diagnose.capture"]),
    ("child", ["diagnose.child"]),  # the torch child programs; they read capture/spec.py
    ("trace", ["diagnose.trace"]),
    ("metrics", ["diagnose.metrics"]),
    ("memory", ["diagnose.memory"]),
    ("ncu", ["diagnose.ncu"]),
    ("rankset", ["diagnose.rankset"]),
    ("model", ["diagnose.model"]),
    ("rulebook", ["diagnose.rulebook"]),
    ("rules", ["diagnose.rules"]),
    ("ruleset", ["diagnose.ruleset"]),
    ("ranks", ["diagnose.ranks"]),
    ("diff", ["diagnose.diff"]),
    ("verify", ["diagnose.verify"]),
    ("report", ["diagnose.report"]),
    ("front", ["diagnose.front"]),
    ("commands", ["diagnose.commands"]),
    ("package", ["diagnose"]),  # diagnose/__init__.py (the notebook API) and __main__
]

# importer -> imported, pointing to a higher floor, as the tree stands: none. The set stays for an arrow
# that must be lived with for a while (named here with the move that will take it off), not to be added to.
KNOWN_BACK_ARROWS: set[tuple[str, str]] = set()

INSTALLED_AS = {"fixtures": "diagnose.fixtures"}


def modules() -> dict[str, object]:
    """Dotted module name -> path, for the installed layout (fixtures/ is diagnose.fixtures: its
    package module only, the recording scripts beside it are run by hand)."""
    found = {}
    paths = [
        *sorted((ROOT / "diagnose").rglob("*.py")),
        ROOT / "fixtures" / "__init__.py",
    ]
    for path in paths:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] in INSTALLED_AS:
            parts = [*INSTALLED_AS[parts[0]].split("."), *parts[1:]]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path, known: dict) -> set[str]:
    """The project modules `name` imports anywhere in its body (deferred imports included)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            candidates = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                out.add(candidate)
                break
    return out


def floor_of(name: str) -> int:
    for rank, (_, prefixes) in enumerate(FLOORS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{name} is on no floor: add its folder to FLOORS in tests/test_architecture.py")


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def back_arrows(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a module on a higher floor than the importer's."""
    return {(a, b) for a, targets in edges.items() for b in targets if floor_of(b) > floor_of(a)}


def _described(arrows) -> str:
    return "\n".join(
        f"{a} ({FLOORS[floor_of(a)][0]}) imports {b} ({FLOORS[floor_of(b)][0]})" for a, b in sorted(arrows)
    )


def test_every_module_has_a_floor():
    for name in modules():
        floor_of(name)


def test_no_new_arrow_points_back_up():
    new = back_arrows(graph()) - KNOWN_BACK_ARROWS
    assert not new, "imports of a higher floor:\n" + _described(new)


def test_every_known_arrow_back_up_is_still_there():
    """The known set only shrinks: an arrow that is gone comes off the list."""
    gone = KNOWN_BACK_ARROWS - back_arrows(graph())
    assert not gone, "no longer there, take them off KNOWN_BACK_ARROWS:\n" + "\n".join(map(str, sorted(gone)))


def test_the_walker_sees_the_installed_folders():
    """diagnose/rules/ is walked, fixtures/ under its installed name, and imports of both are seen."""
    edges = graph()
    assert "diagnose.rulebook.engine" in edges["diagnose.rules.sync_stall"]
    assert "diagnose.rules" in edges["diagnose.ruleset.assemble"]
    assert "diagnose.fixtures" in edges["diagnose.front.bundled"]
    assert floor_of("diagnose.rules.sync_stall") > floor_of("diagnose.rulebook.engine")


def test_the_check_sees_an_arrow_back_up():
    edges = {"diagnose.trace.model": {"diagnose.metrics.steps", "diagnose.base.errors"}}
    assert back_arrows(edges) == {("diagnose.trace.model", "diagnose.metrics.steps")}


def first_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """The first import cycle found (a -> b -> … -> a), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if state.get(nxt) is None:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(edges):
        if state.get(node) is None:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_the_module_graph_has_no_cycle():
    cycle = first_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle():
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert first_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_walker_sees_deferred_imports(tmp_path):
    """The check must not be fooled by an import inside a function."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from diagnose.report.html import render_html\n")
    known = {"diagnose.report.html": None, "diagnose.report": None, "m": source}
    assert imports("m", source, known) == {"diagnose.report.html"}


def test_the_readme_layout_matches_the_tree():
    """Every package and top-level module of diagnose/ and every top-level folder is in the README's
    layout, and everything the layout names exists."""
    import re

    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Layout") :]
    block = block[block.index("```") + 3 :]
    block = block[: block.index("```")]
    named = set()
    for line in block.splitlines():
        if len(line) - len(line.lstrip()) > 2:
            continue  # a description's continuation
        first_column = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        named |= {w for w in first_column.split() if re.fullmatch(r"[\w.]+/|\w+\.(?:py|sh)", w)}
    packages = {p.name + "/" for p in (ROOT / "diagnose").iterdir() if (p / "__init__.py").exists()}
    modules = {p.name for p in (ROOT / "diagnose").glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    top = {
        p.name + "/"
        for p in ROOT.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and p.name not in ("build", "dist", "diagnose-out")
        and not p.name.endswith(".egg-info")
    }
    missing = (packages | modules | top) - named
    assert not missing, f"not in the README's layout: {sorted(missing)}"
    for name in named:
        candidates = [ROOT / name, *(ROOT / folder / name for folder in ("diagnose", "fixtures", "tests"))]
        assert any(c.exists() for c in candidates), f"the README's layout names {name}, which does not exist"


def test_no_source_names_an_issue_number():
    """Code says what it does, not which ticket asked for it: no `issue N` in the package, the rules, the
    tests, the benchmarks or the fixtures' scripts."""
    import re

    pattern = re.compile(r"\bissue ?#?\d+", re.IGNORECASE)
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for folder in ("diagnose", "tests", "benchmarks", "fixtures")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.suffix in (".py", ".j2")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, found


MAX_RULE_FUNCTION_LINES = 40


def long_functions(source: str, limit: int = MAX_RULE_FUNCTION_LINES) -> list[str]:
    """'name (N lines)' for every function or method in `source` longer than `limit` lines, counted from
    its `def` to its last line (docstring included)."""
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_no_rule_function_is_longer_than_40_lines():
    """A rule reads as measure → decide → estimate → word: no function in diagnose/rules/ grows past 40 lines
    (split it, as the rules already are, rather than raising the limit)."""
    found = [
        f"{p.relative_to(ROOT)}: {f}"
        for p in sorted((ROOT / "diagnose" / "rules").glob("*.py"))
        for f in long_functions(p.read_text())
    ]
    assert not found, f"functions over {MAX_RULE_FUNCTION_LINES} lines: {found}"


def test_the_length_check_sees_a_long_function():
    """The check fails on a function of 41 lines, a method or a nested function too, and passes 40."""
    body = "".join(f"    x{i} = {i}\n" for i in range(40))
    assert long_functions("def f():\n" + body) == ["f (41 lines)"]
    assert long_functions("def f():\n" + body[: body.index("    x39")]) == []
    method = "class C:\n" + "".join(f"    {line}\n" for line in ("def m(self):\n" + body).splitlines())
    assert long_functions(method) == ["m (41 lines)"]
    nested = "def outer():\n" + "".join(f"    {line}\n" for line in ("def inner():\n" + body).splitlines())
    assert long_functions(nested) == ["outer (42 lines)", "inner (41 lines)"]
