"""The package's import structure, read from the source (ast, nothing is imported): no module imports
itself back through others, the top-level parts (a module, or a subpackage taken whole) import each
other without a circle, nothing outside `server/` knows the server, the web framework stays inside
`server/`, and no module takes another's private (`_name`) names. Imports inside functions count: an
import moved into a function to dodge a circle is still a circle; so does a module named in a string
(`import_module("transformer_explainer.x")`, as `cli.py` loads the feature packages' command lines)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "transformer_explainer"
ROOT = Path(__file__).resolve().parents[2] / "src" / PACKAGE
WEB_FRAMEWORKS = ("fastapi", "starlette", "uvicorn")


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py")) if "web_dist" not in p.parts}


MODULES = _modules()


def _imports(name: str, path: Path) -> tuple[set[str], set[str]]:
    """(modules of this package that `name` imports, top-level names of other packages it imports).
    A string that is the full name of one of the package's modules counts as importing it: that is how
    `import_module` is told what to load."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    own: set[str] = set()
    other: set[str] = set()

    def add(target: str) -> None:
        if target == PACKAGE or target.startswith(PACKAGE + "."):
            while target not in MODULES and "." in target:  # a name inside a module: the module
                target = target.rsplit(".", 1)[0]
            if target != name:
                own.add(target)
        else:
            other.add(target.split(".")[0])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for a in node.names:  # `from . import x` may name a submodule
                sub = f"{module}.{a.name}"
                add(sub if sub in MODULES else module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES \
                and not name.startswith(node.value + "."):  # its own packages (a logger's or resources' name)
            add(node.value)
    return own, other


def _private_imports(name: str, path: Path) -> list[str]:
    """`module._name` for each private name that `name` imports from another module of the package."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(PACKAGE)):
            out += [f"{'.' * node.level}{node.module or ''}.{a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _part(module: str) -> str:
    """The top-level part a module belongs to: `transformer_explainer.analysis.lens` -> `analysis`. The
    command lines (`cli.py` anywhere) are one part, the front that stands on all the others."""
    parts = module.split(".")
    if parts[-1] == "cli":
        return "cli"
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_reader_sees_the_package():
    assert {"transformer_explainer.engine", "transformer_explainer.server.app",
            "transformer_explainer.analysis.lens"} <= set(MODULES)
    own, other = GRAPH["transformer_explainer.server.app"]
    assert "transformer_explainer.server.context" in own and "fastapi" in other


def test_no_module_imports_itself_back():
    assert _cycles({m: own for m, (own, _) in GRAPH.items()}) == []


def test_a_module_named_in_a_string_is_an_import():
    """`cli.py` loads the feature packages' command lines by name; the graph sees those edges."""
    own, _ = GRAPH[f"{PACKAGE}.cli"]
    assert {f"{PACKAGE}.analysis.cli", f"{PACKAGE}.seq2seq.cli", f"{PACKAGE}.server.cli"} <= own


def test_no_module_takes_another_modules_private_names():
    """What two modules share is public in a module of its own (e.g. `cli_model.py` for the command
    lines), not a `_name` borrowed from one of them."""
    bad = {m: found for m, path in MODULES.items() if (found := _private_imports(m, path))}
    assert bad == {}


def test_the_top_level_parts_import_each_other_without_a_circle():
    edges: dict[str, set[str]] = {}
    for m, (own, _) in GRAPH.items():
        if m == PACKAGE:  # the package's face hands on names from every part
            continue
        edges.setdefault(_part(m), set()).update(_part(t) for t in own if t != PACKAGE and _part(t) != _part(m))
    assert _cycles(edges) == []


def _in_server(module: str) -> bool:
    return module.startswith(f"{PACKAGE}.server.") or module == f"{PACKAGE}.server"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not _in_server(m) and m != PACKAGE))
def test_only_the_server_knows_the_server_and_the_web_framework(module: str):
    """The command line, the front that stands on every part, may load the server's own command line
    (`serve`), and only that."""
    own, other = GRAPH[module]
    allowed = {f"{PACKAGE}.server.cli"} if _part(module) == "cli" else set()
    assert not [t for t in own - allowed if _in_server(t)], f"{module} imports the server"
    assert not other & set(WEB_FRAMEWORKS), f"{module} imports a web framework"


@pytest.mark.parametrize("part", ["trace", "trace_base", "engine", "overview", "slicing", "inputs", "schemas",
                                  "analysis", "seq2seq"])
def test_the_domain_does_not_import_its_presentations(part: str):
    """Traces, the engine, the answers and the analyses know nothing of notebooks or the command line."""
    for m, (own, _) in GRAPH.items():
        if _part(m) == part:
            bad = [t for t in own if _part(t) in ("notebook", "cli")]
            assert not bad, f"{m} imports {bad}"


def part_edges() -> dict[str, set[str]]:
    """Each top-level part and the other parts it imports (the package's face aside)."""
    edges: dict[str, set[str]] = {}
    for m, (own, _) in GRAPH.items():
        if m == PACKAGE:
            continue
        edges.setdefault(_part(m), set()).update(_part(t) for t in own if t != PACKAGE and _part(t) != _part(m))
    return edges


def picture() -> str:
    """The parts in floors: a part stands one floor above the highest part it imports (floor 0 imports none).
    `python tests/unit/test_import_graph.py` prints it: the plan a newcomer reads before the code."""
    edges = part_edges()
    floor: dict[str, int] = {}

    def height(p: str) -> int:
        if p not in floor:
            floor[p] = 0  # a circle (which the tests refuse) would otherwise recurse for ever
            floor[p] = 1 + max((height(q) for q in edges.get(p, ())), default=-1)
        return floor[p]

    for p in edges:
        height(p)
    lines = []
    for f in range(max(floor.values()), -1, -1):
        for p in sorted(q for q in floor if floor[q] == f):
            n = sum(1 for m in MODULES if m != PACKAGE and _part(m) == p)
            lines.append(f"{f:2d}  {p} ({n} module{'s' * (n != 1)}) -> {', '.join(sorted(edges[p])) or '-'}")
    return "\n".join(lines)


def test_the_picture_has_every_part_on_a_floor_above_what_it_imports():
    floors = {line.split()[1]: int(line.split()[0]) for line in picture().splitlines()}
    for p, targets in part_edges().items():
        assert all(floors[t] < floors[p] for t in targets), p


if __name__ == "__main__":
    print(picture())
