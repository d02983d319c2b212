"""The package's import graph has no cycles, and its arrows point down the layers.

Every module under src/hindsight is parsed with `ast`; nothing is imported. An edge is any
import statement, wherever it stands (module level, inside a function, under
`if TYPE_CHECKING:`), with relative imports resolved; `from pkg import name` is an edge to
the module `pkg.name` when that is a module and to `pkg` otherwise. Importing a module also
runs its packages' `__init__`, but those implicit edges are not counted: they would make
every package whose `__init__` imports its own submodules look circular.

Layers, bottom to top (`LAYERS`; a module may import its own top-level package and any
lower layer, never its own layer's other packages or a higher one):

    0  the root package (`__version__`), registry (named registries, imports nothing)
    1  types, configs, cluster, net, stats, adapters: facts and utilities of every layer
    2  envs (the environment contract and environments), logs (run directories and the
       trajectory format), algos (pure functions)
    3  llm (model backends; they read logs' checkpoints), diagnostics (pure functions over logs)
    4  roles (who plays which model role), train (updates of a trainable model), report
       (pages over logs and diagnostics)
    5  agent (prompting, the rollout engine, replay, critics, PRMs, pre-action writers)
    6  methods (one loop per training method), bench (benchmark plans), verl (verl's side)
    7  cli (every command), then 8 __main__
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hindsight"

#: The rank of every top-level package or module of hindsight ("hindsight" is the root package).
LAYERS = {
    "hindsight": 0, "registry": 0,
    "types": 1, "configs": 1, "cluster": 1, "net": 1, "stats": 1, "adapters": 1,
    "envs": 2, "logs": 2, "algos": 2,
    "llm": 3, "diagnostics": 3,
    "roles": 4, "train": 4, "report": 4,
    "agent": 5,
    "methods": 6, "bench": 6, "verl": 6,
    "cli": 7,
    "__main__": 8,
}


def module_files(package: Path) -> dict[str, Path]:
    """Every module of the package at `package`, by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(package: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (see the module docstring)."""
    modules = module_files(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                           for alias in node.names]
            else:
                continue
            graph[name].update(target for target in targets if target in modules and target != name)
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, each as a closed path
    (its first module repeated at the end), components in sorted order."""
    edges = {node: sorted(targets) for node, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm, iterative so that a deep import chain cannot hit the recursion limit.
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(edges[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return [_closed_path(edges, component) for component in sorted(components)]


def _closed_path(edges: Mapping[str, list[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, found breadth-first inside the component."""
    start, members = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in edges[node]:
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target in members and target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def layer_of(module: str) -> str:
    """The top-level package or module a dotted name belongs to ("hindsight" for the root package)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(graph: Mapping[str, Iterable[str]], layers: Mapping[str, int]) -> list[str]:
    """Every import of a module in its own layer's other packages or in a higher layer, as a readable line."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = layer_of(module), layer_of(target)
            if mine != theirs and layers[theirs] >= layers[mine]:
                found.append(f"{module} ({mine}, layer {layers[mine]}) imports {target} "
                             f"({theirs}, layer {layers[theirs]})")
    return found


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph(PACKAGE))
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_every_module_has_a_layer() -> None:
    unranked = sorted({layer_of(module) for module in module_files(PACKAGE)} - set(LAYERS))
    assert not unranked, f"give these a rank in LAYERS: {unranked}"


def test_no_module_imports_a_higher_layer() -> None:
    found = upward_imports(import_graph(PACKAGE), LAYERS)
    assert not found, "imports against the layer order:\n" + "\n".join(found)


def _write_package(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_detector_finds_cycles_through_functions_and_relative_imports(tmp_path: Path) -> None:
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def late():\n    from pkg.sub import b\n",
        "pkg/sub/__init__.py": "from pkg.sub.c import NAME\n",
        "pkg/sub/b.py": "from .. import a\n",
        "pkg/sub/c.py": "NAME = 1\n",
        "pkg/d.py": "from pkg import a\nimport pkg.sub.c\n",
    })
    graph = import_graph(package)
    assert graph["pkg.sub.b"] == {"pkg.a"} and graph["pkg.sub"] == {"pkg.sub.c"}
    assert graph["pkg.d"] == {"pkg.a", "pkg.sub.c"}
    assert find_cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def test_the_detector_names_a_longer_cycle_and_passes_a_tree(tmp_path: Path) -> None:
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/x.py": "import pkg.y\n",
        "pkg/y.py": "from pkg import z\n",
        "pkg/z.py": "if False:\n    from pkg.x import THING\n",
        "pkg/w.py": "from pkg import x, y\n",
    })
    assert find_cycles(import_graph(package)) == [["pkg.x", "pkg.y", "pkg.z", "pkg.x"]]
    (package / "z.py").write_text("", encoding="utf-8")
    assert find_cycles(import_graph(package)) == []


def test_the_layer_check_finds_upward_and_sideways_imports() -> None:
    graph = {"hindsight.envs.base": {"hindsight.types", "hindsight.agent.engine"},
             "hindsight.logs": {"hindsight.algos"}, "hindsight.agent.engine": {"hindsight.agent.replay"}}
    found = upward_imports(graph, {"types": 0, "envs": 1, "logs": 1, "algos": 1, "agent": 4})
    assert found == ["hindsight.envs.base (envs, layer 1) imports hindsight.agent.engine (agent, layer 4)",
                     "hindsight.logs (logs, layer 1) imports hindsight.algos (algos, layer 1)"]
