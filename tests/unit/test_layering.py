"""The dependency rules of docs/ARCHITECTURE (and README's layout) as code: a module imports only from its own layer or
the layers below, and no two modules import each other, directly or around a cycle.

Every import counts: module level, inside functions (lazy), and under `TYPE_CHECKING`. A new module must be given a
layer here; a layer is the first entry of `LAYERS` whose prefix names the module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "groundstate"

# lowest first: the rules of docs/ARCHITECTURE.md, read from this one table (a module's layer is the longest prefix that
# names it): cli → (pipeline, train, integrations) → (audits, stats) → worlds → grading → (agents, tools) → (types,
# records) → (state, tasks)
LAYERS: list[tuple[str, list[str]]] = [
    ("state and data", ["groundstate", "groundstate.tasks", "groundstate.state", "groundstate.deadlines", "groundstate.jsontext"]),
    ("types and records", ["groundstate.types", "groundstate.records", "groundstate.specs"]),
    ("tools and agents", ["groundstate.tools", "groundstate.agents"]),
    ("grading", ["groundstate.grading"]),
    ("worlds and the attempt", ["groundstate.worlds", "groundstate.domains"]),
    ("audits and statistics", ["groundstate.audits", "groundstate.stats"]),
    ("pipeline, training, integrations", ["groundstate.pipeline", "groundstate.train", "groundstate.integrations"]),
    ("command line", ["groundstate.cli"]),
]


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None  # (prefix length, layer): the longest prefix wins
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[0]):
                best = (len(p), i)
    if best is None:
        raise AssertionError(f"module {module} has no layer in tests/unit/test_layering.py: give it one")
    return best[1]


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if "domains" in parts[:2] and len(parts) > 2 and parts[2] != "_kit":
            continue  # a domain's own files are loaded from their folder, not imported as part of the package
        out[".".join(parts)] = path
    return out


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The groundstate modules `module` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from pkg import sub` depends on the module pkg.sub where there is one (Python runs pkg's __init__ first
            # whatever is imported, so that edge says nothing), else on pkg itself
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module and name.startswith("groundstate"):
                found.add(name)
    return found


GRAPH = {m: imports(m, p, set(modules())) for m, p in modules().items()}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_a_module_imports_only_from_its_layer_or_below(module):
    mine = layer_of(module)
    upward = sorted(f"{dep} ({LAYERS[layer_of(dep)][0]})" for dep in GRAPH[module] if layer_of(dep) > mine)
    assert not upward, f"{module} ({LAYERS[mine][0]}) imports from a layer above it: {', '.join(upward)}"


def test_no_import_cycles():
    """Tarjan's strongly connected components over the whole import graph: every component is one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_rules_see_every_kind_of_import(tmp_path):
    """The checker itself: lazy, TYPE_CHECKING and relative imports are all found. The probe is read as the module
    `groundstate.__layering_probe__` from a temporary folder: nothing is written into the package, which may be read-only."""
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from groundstate.pipeline.runner import RunConfig\n"
        "def f():\n    import groundstate.cli\n    from . import types\n"
    )
    path = tmp_path / "__layering_probe__.py"
    path.write_text(source)
    found = imports("groundstate.__layering_probe__", path, set(modules()) | {"groundstate.__layering_probe__"})
    assert {"groundstate.pipeline.runner", "groundstate.cli", "groundstate.types"} <= found
