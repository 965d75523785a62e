"""The folders are layers: read every import of `biomem`, `modalities` and `benchmarks` from the source (inside
functions too, only `if TYPE_CHECKING:` blocks left out) and check that imports flow one way and never close a
circle.

    benchmarks (run as `python -m benchmarks.<name>`, imported by nothing of the engine) -> surfaces (server, ui,
    eval, cli, client, the biomem package itself) -> engine -> identity | notes -> stores -> settings -> vocabulary
    -> errors;  modalities below all, importing nothing from biomem
"""

from __future__ import annotations

import ast
from pathlib import Path

import modalities
from biomem import errors as biomem_errors
from modalities import errors as modalities_errors

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("biomem", "modalities", "benchmarks")
ENGINE = ("biomem", "modalities")  # what is shipped; the benchmarks measure it from above
# The layer of a biomem module is its first name under biomem; identity and notes are siblings that do not
# import each other. A module whose layer is not listed fails the test until it is given one.
LAYERS = {"errors": "errors", "vocabulary": "vocabulary", "settings": "settings", "stores": "stores",
          "identity": "identity", "notes": "notes", "engine": "engine", "server": "surfaces", "ui": "surfaces",
          "eval": "surfaces", "cli": "surfaces", "client": "surfaces", "stopping": "surfaces", "": "surfaces"}
RANKS = {"errors": 0, "vocabulary": 1, "settings": 2, "stores": 3, "identity": 4, "notes": 4, "engine": 5,
         "surfaces": 6}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def import_nodes(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth, except those under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if is_type_checking(child):
                for other in child.orelse:
                    visit(other)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            else:
                visit(child)
    visit(tree)
    return found


def imports(path: Path, module: str | None = None) -> dict[str, int]:
    """{imported module of biomem or modalities: line} of the file at `path` (module `module`, whose relative
    imports are resolved); `from p import x` is module p.x when x is a module, else p."""
    package = module if path.name == "__init__.py" else (module or "").rpartition(".")[0]
    found: dict[str, int] = {}
    for node in import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif node.level and module is None:
            continue  # a test's `from .conftest import ...`
        else:
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            if target.split(".")[0] in PACKAGES and target != module:
                found.setdefault(target, node.lineno)
    return found


GRAPH = {module: imports(path, module) for module, path in MODULES.items()}


def layer(module: str) -> str:
    """The layer of a biomem module ("" for the package itself, which re-exports the public API)."""
    return LAYERS.get(module.split(".")[1] if "." in module else "", f"unlisted ({module})")


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle through each strongly connected group of `graph` (Tarjan's algorithm), as module paths."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in graph:
                continue
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(group)

    for node in graph:
        if node not in index:
            connect(node)
    return [cycle_in(graph, set(group)) for group in groups]


def cycle_in(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected `group`, first module repeated."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node]):
            if target == start:
                return [*paths[node], start]
            if target in group and target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no cycle through {start}")


def test_every_module_is_read():
    assert {"biomem", "biomem.cli", "biomem.engine.memory", "biomem.stores.sqlite.store",
            "modalities.ccnet", "benchmarks", "benchmarks.common", "benchmarks.retrieval"} <= set(GRAPH)
    assert "biomem.identity.gate" in GRAPH["biomem.engine.memory"]  # relative imports resolved
    assert "biomem.engine.memory" in GRAPH["biomem.cli.common"]  # imports inside functions count
    assert "benchmarks.pg_server" in GRAPH["benchmarks.retrieval"]  # a benchmark's own imports, inside functions too


def test_every_imported_module_exists():
    """A stale path (a module that moved) is named here, in the packages (the benchmarks among them), the tests and
    app.py, rather than failing at run time or resolving to another checkout's copy of the package."""
    users = {path: imports(path) for path in sorted((ROOT / "tests").glob("*.py"))}
    users[ROOT / "app.py"] = imports(ROOT / "app.py")
    users.update({MODULES[module]: targets for module, targets in GRAPH.items()})
    missing = [f"{path.relative_to(ROOT)}:{line} imports {target}"
               for path, targets in users.items() for target, line in targets.items() if target not in MODULES]
    assert not missing, "\n".join(missing)


def test_no_import_circle():
    circles = [" -> ".join(cycle) for cycle in cycles(GRAPH)]
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_imports_flow_down_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        if not module.startswith("biomem"):
            continue
        for target, line in targets.items():
            if target.startswith("biomem") and layer(target) != layer(module) and \
                    RANKS.get(layer(target), 99) >= RANKS.get(layer(module), -1):
                wrong.append(f"{MODULES[module].relative_to(ROOT)}:{line} ({layer(module)}) imports {target} "
                             f"({layer(target)})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_modalities_imports_nothing_from_biomem():
    from_biomem = [f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}"
                   for module, targets in GRAPH.items() if module.split(".")[0] == "modalities"
                   for target, line in targets.items() if target.split(".")[0] == "biomem"]
    assert not from_biomem, "\n".join(from_biomem)
    assert Path(modalities.__file__).parent == ROOT / "modalities"
    assert biomem_errors.NoFaceError is modalities_errors.NoFaceError  # one class, re-exported


def test_the_engine_never_imports_the_benchmarks():
    found = [f"{MODULES[module].relative_to(ROOT)}:{line} imports {target}"
             for module, targets in GRAPH.items() if module.split(".")[0] in ENGINE
             for target, line in targets.items() if target.split(".")[0] == "benchmarks"]
    assert not found, "\n".join(found)


def test_benchmarks_run_as_modules_of_their_package():
    """`python -m benchmarks.<name>` from the checkout's root finds the engine and the benchmarks' own modules:
    no benchmark touches sys.path, and none imports another by its bare name (`import machine`), which resolves
    only when benchmarks/ itself is on sys.path."""
    siblings = {module.rpartition(".")[2] for module in GRAPH if module.startswith("benchmarks.")}
    wrong = []
    for module, path in MODULES.items():
        if module.split(".")[0] != "benchmarks":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path":
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} touches sys.path")
            elif isinstance(node, ast.Import):
                wrong += [f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} by its bare name"
                          for alias in node.names if alias.name.split(".")[0] in siblings]
            elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in siblings:
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports from {node.module} by its bare name")
    assert not wrong, "\n".join(wrong)
