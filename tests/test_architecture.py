"""The layers hold: capture → trace → analysis → model → engine/rules → assemble → diff → renderers → front.

Every import counts, those deferred inside functions too (they are the hidden cycles): a module
may import only modules of its own layer or below, and the module graph has no cycle at all.
"""

from __future__ import annotations

import ast

from conftest import ROOT

# Lowest first. A module belongs to the first layer with a prefix that matches its dotted name.
LAYERS = [
    ("base", ["diagnose.base", "diagnose.vocabulary"]),
    ("capture", ["diagnose.capture"]),
    ("trace", ["diagnose.trace", "diagnose.ranks.discover"]),
    (
        "analysis",
        [
            "diagnose.metrics",
            "diagnose.memory",
            "diagnose.ncu",
            "diagnose.ranks.profile",
            "diagnose.ranks.model",
            "diagnose.ranks.timed",
            "diagnose.ranks.host_lead",
            "diagnose.ranks.late_cause",
        ],
    ),
    ("model", ["diagnose.model"]),
    ("engine", ["diagnose.rulebook.engine"]),
    ("rules", ["diagnose.rules", "diagnose.rulebook.rules_table", "diagnose.rulebook.docs"]),
    ("assemble", ["diagnose.rulebook"]),
    ("ranks", ["diagnose.ranks"]),
    ("diff", ["diagnose.diff"]),
    ("verify", ["diagnose.verify"]),
    ("renderers", ["diagnose.report"]),
    ("front", ["diagnose.front", "diagnose.commands", "diagnose.__main__", "diagnose.fixtures", "diagnose"]),
]


def modules() -> dict[str, object]:
    """Dotted module name -> path, for the installed layout (rules/ is diagnose.rules)."""
    found = {}
    for path in [*sorted((ROOT / "diagnose").rglob("*.py")), *sorted((ROOT / "rules").glob("*.py"))]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[0] == "rules":
            parts = ["diagnose", *parts]
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


def layer_of(name: str) -> int:
    for rank, (_, prefixes) in enumerate(LAYERS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return rank
    raise AssertionError(f"{name} is in no layer: add it to LAYERS in tests/test_architecture.py")


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_every_module_has_a_layer():
    for name in modules():
        layer_of(name)


def test_no_module_imports_a_layer_above_its_own():
    back = [
        f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
        for a, targets in graph().items()
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    assert not back, "back edges:\n" + "\n".join(back)


def test_the_module_graph_has_no_cycle():
    edges = graph()
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
            assert cycle is None, "import cycle: " + " -> ".join(cycle)


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
        for folder in ("diagnose", "rules", "tests", "benchmarks", "fixtures")
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
    """A rule reads as measure → decide → estimate → word: no function in rules/ grows past 40 lines
    (split it, as the rules already are, rather than raising the limit)."""
    found = [
        f"{p.relative_to(ROOT)}: {f}"
        for p in sorted((ROOT / "rules").glob("*.py"))
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
