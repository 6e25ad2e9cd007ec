"""The layer contract of the package (README, "How rllog is built"), checked on the source.

Every import of every module counts: module level, inside functions, under
``TYPE_CHECKING``. A module may import modules of its own layer or below; the write side
and the read side never import each other; the tools that look at runs read only
through the read side; and no two modules import each other, directly or in a loop.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rllog"

# (layer number, side) by module-name prefix; the longest matching prefix wins.
# side: "write" (runs inside training), "read" (opens runs afterwards), None (either).
LAYERS: dict[str, tuple[int, str | None]] = {
    "rllog.errors": (0, None),
    "rllog._format": (0, None),
    "rllog._templates": (0, None),
    "rllog._storage": (1, None),
    "rllog.storage": (1, None),
    "rllog.testing": (1, None),
    "rllog._write": (2, "write"),
    "rllog.logtree": (2, "write"),
    "rllog.sinks": (2, "write"),
    "rllog._read": (2, "read"),
    "rllog.doctor": (3, "read"),
    "rllog.index": (3, "read"),
    "rllog.plot": (3, "read"),
    "rllog._svgchart": (3, "read"),
    "rllog._run": (4, None),
    "rllog.integrations": (5, None),
    "rllog.stats": (0, None),
    "rllog.importers": (5, None),
    "rllog._demo": (5, None),
    "rllog.cli": (5, None),
    "rllog.serve": (5, "read"),
    "rllog._indexjob": (5, None),  # index.html in its own process (RunLogger.close)
    "rllog.__main__": (5, None),
    "rllog": (5, None),  # the package's __init__: the public surface
}


def layer_of(module: str) -> tuple[int, str | None]:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    if best is None:
        raise AssertionError(f"module {module} has no layer in LAYERS; add it")
    return LAYERS[best]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: calls that import a module by name at run time
DYNAMIC = {"import_module", "__import__"}
#: modules allowed to import by a computed name, and why
DYNAMIC_OK = {
    "rllog": "the public surface's lazy table; the top layer may import anything",
    "rllog._read.config": "load_config rebuilds the user's own chz classes named in config.json",
    "rllog._format.redact": "detect-secrets' detector plugins, by their module names (none of rllog)",
}


def imports_of(path: Path, modules: set[str], name: str | None = None) -> Iterable[tuple[str, int]]:
    """``(imported module, line)`` for every import in the file (any depth): import
    statements, and ``importlib.import_module("rllog...")``/``__import__("rllog...")`` calls
    with a literal name. A dynamic import by a computed name yields ``("?dynamic", line)``."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    aliases = _aliases(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in DYNAMIC or (isinstance(func, ast.Name) and func.id in aliases):
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    if arg.value == "rllog" or arg.value.startswith("rllog."):
                        yield arg.value, node.lineno
                elif name not in DYNAMIC_OK:
                    yield "?dynamic", node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "rllog" or alias.name.startswith("rllog."):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not (base == "rllog" or base.startswith("rllog.")):
                continue
            for alias in node.names:  # `from rllog import logtree` imports the submodule
                sub = f"{base}.{alias.name}"
                yield (sub if sub in modules else base), node.lineno


def _aliases(path: Path) -> set[str]:
    """Local names bound to importlib.import_module (``from importlib import import_module as im``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "importlib":
            out |= {a.asname or a.name for a in node.names if a.name == "import_module"}
    return out


def import_graph() -> dict[str, list[tuple[str, int]]]:
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): list(imports_of(f, modules)) for f in files}


def violations(graph: dict[str, list[tuple[str, int]]]) -> list[str]:
    """Every broken rule, one message each (empty when the layers hold)."""
    out = []
    for module, targets in graph.items():
        layer, side = layer_of(module)
        for target, line in targets:
            if target == "?dynamic":
                out.append(
                    f"{module} (line {line}): imports a module by a computed name, which this test cannot check; import it by name"
                )
                continue
            if target == module:
                continue
            t_layer, t_side = layer_of(target)
            where = f"{module} (line {line}) imports {target}"
            if t_layer > layer:
                out.append(f"{where}: up a layer ({layer} -> {t_layer})")
            elif side and t_side and side != t_side:
                out.append(f"{where}: across sides ({side} -> {t_side})")
    out += [f"import cycle: {' -> '.join(c)}" for c in cycles(graph)]
    return out


def cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules that import each other (Tarjan)."""
    edges = {m: sorted({t for t, _ in ts if t != m and t in graph}) for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(_path_in(set(group), edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _path_in(group: set[str], edges: dict[str, list[str]]) -> list[str]:
    """An actual import loop through the group (each module imports the next), for the message."""
    start = min(group)
    prev: dict[str, str] = {}
    queue = [start]
    while queue:  # breadth first, back to start
        v = queue.pop(0)
        for w in edges[v]:
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
            if w in group and w not in prev:
                prev[w] = v
                queue.append(w)
    return sorted(group)


def test_every_module_has_a_layer():
    for module in import_graph():
        layer_of(module)


def test_the_layers_hold():
    problems = violations(import_graph())
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "planted, expected",
    [
        (("rllog._read.run", "rllog._write.metrics"), "across sides (read -> write)"),
        (("rllog._write.resume", "rllog._read.run"), "across sides (write -> read)"),
        (("rllog._format.codec", "rllog.storage"), "up a layer (0 -> 1)"),
        (("rllog.storage", "rllog._run"), "up a layer (1 -> 4)"),
        (("rllog.doctor", "rllog._write.config"), "across sides (read -> write)"),
        (("rllog._format.rows", "rllog._format.layout"), None),  # same layer, no loop: allowed
    ],
)
def test_a_planted_import_is_caught(planted, expected):
    """The checker is not vacuous: adding one bad edge to the real graph is reported."""
    graph = import_graph()
    src, dst = planted
    graph[src] = graph[src] + [(dst, 999)]
    found = [p for p in violations(graph) if p.startswith(f"{src} (line 999)")]
    if expected is None:
        assert found == []
    else:
        assert len(found) == 1 and expected in found[0], found


def test_dynamic_imports_count(tmp_path):
    """``importlib.import_module`` and ``__import__`` with a literal name are edges; a computed
    name outside the public surface's lazy table is a violation of its own."""
    f = tmp_path / "m.py"
    f.write_text(
        "import importlib\nfrom importlib import import_module as im\n"
        "def f(x):\n    importlib.import_module('rllog._read.run')\n    __import__('rllog._run')\n"
        "    im('rllog._write.resume')\n    importlib.import_module('rllog.' + x)\n"
    )
    found = list(imports_of(f, set(), name="rllog._format.m"))
    assert found == [("rllog._read.run", 4), ("rllog._run", 5), ("rllog._write.resume", 6), ("?dynamic", 7)]
    graph = {"rllog._format.m": found}
    assert sum("computed name" in p for p in violations(graph)) == 1
    assert sum("up a layer" in p for p in violations(graph)) == 3


def test_a_planted_cycle_is_caught():
    graph = import_graph()
    graph["rllog._format.layout"] = graph["rllog._format.layout"] + [("rllog._format.codec", 1)]
    graph["rllog._format.codec"] = graph["rllog._format.codec"] + [("rllog._format.layout", 1)]
    assert any(
        "cycle" in p and "rllog._format.codec" in p and "rllog._format.layout" in p for p in violations(graph)
    )


def test_function_level_imports_count(tmp_path):
    """An import inside a function is an edge like any other."""
    f = PACKAGE / "_format" / "layout.py"
    edges = dict(import_graph())["rllog._format.layout"]
    tree_imports = [
        n for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
    ]
    assert len(edges) <= len(tree_imports)
    nested = tmp_path / "m.py"
    nested.write_text("def f():\n    from rllog._read import run\n")
    found = list(imports_of(nested, {"rllog._read.run"}, name="rllog._format.m"))
    assert found == [("rllog._read.run", 2)]


#: what a pure layer-0 module may not use: file, process and network access
IMPURE = {"pathlib", "shutil", "subprocess", "socket", "tempfile", "fsspec", "urllib.request", "http", "glob"}


def test_layer_0_format_modules_do_no_io():
    """``rllog/_format`` is pure: no file, process or network access (``os`` only for
    ``os.PathLike``/``os.fspath``); I/O comes in through a parameter (a Storage, bytes)."""
    problems = []
    for path in sorted((PACKAGE / "_format").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in IMPURE or n in IMPURE:
                    problems.append(f"{path.name}:{node.lineno} imports {n}")
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "open":
                problems.append(f"{path.name}:{node.lineno} calls open()")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
                if node.attr not in ("PathLike", "fspath"):
                    problems.append(f"{path.name}:{node.lineno} uses os.{node.attr}")
    assert problems == []
