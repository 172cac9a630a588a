"""Architecture rules that are easy to break silently."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import requires_checkout


def test_importing_the_engine_loads_no_spark_kafka_or_storage_library() -> None:
    code = (
        "import sys, threading, json\n"
        "import spark_statestore, spark_statestore.query, spark_statestore.changelog\n"
        "import spark_statestore.cli, spark_statestore.demo\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('pyspark', 'confluent_kafka', 'plyvel', 'pyarrow', 'py4j')]\n"
        "print(json.dumps({'heavy': heavy, 'threads': threading.active_count()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    facts = json.loads(out)
    assert facts == {"heavy": [], "threads": 1}


@requires_checkout
def test_setup_cfg_lists_every_package() -> None:
    """setup.cfg names packages one by one: a package missing there is missing from a wheel
    (an editable install still finds it, so nothing else would notice)."""
    import configparser
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    config = configparser.ConfigParser()
    config.read(root / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    found = set()
    for top, name in (
        ("spark_statestore", "spark_statestore"),
        ("connectors", "spark_statestore.connectors"),
        ("pyspark_statestore", "pyspark_statestore"),
    ):
        for init in (root / top).rglob("__init__.py"):
            relative = init.parent.relative_to(root / top)
            found.add(".".join([name, *relative.parts]))
    assert listed == found


@requires_checkout
def test_errors_are_defined_in_errors_modules() -> None:
    """Each subsystem's public errors live in its errors.py (a newcomer looks there)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    misplaced = []
    for top in ("spark_statestore", "connectors"):
        for path in (root / top).rglob("*.py"):
            if path.name in ("errors.py", "_errors.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.ClassDef)
                    and not node.name.startswith("_")
                    and node.name.endswith("Error")
                ):
                    misplaced.append(f"{path.relative_to(root)}: {node.name}")
    assert misplaced == []


@requires_checkout
def test_a_module_over_500_lines_says_why() -> None:
    """A module that passes ~500 lines is asking to be split along a seam (STYLE.md); one
    that stays whole says why at its top."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    silent = []
    for top in ("spark_statestore", "connectors"):
        for path in (root / top).rglob("*.py"):
            text = path.read_text()
            if text.count("\n") > 500:
                docstring = ast.get_docstring(ast.parse(text)) or ""
                if "Why one module" not in docstring:
                    silent.append(str(path.relative_to(root)))
    assert silent == []


# -- the import graph (DESIGN §2, STYLE 17) ---------------------------------------------------
_TREES = {
    "spark_statestore": "spark_statestore",
    "connectors": "spark_statestore.connectors",
    "pyspark_statestore": "pyspark_statestore",
}
_PROGRAMS_AND_BINDINGS = (
    "spark_statestore.connectors",
    "spark_statestore.cli",
    "spark_statestore.demo",
    "spark_statestore.bench",
)
_FRONT_DOOR = "spark_statestore"
"""The package root: the public API over every layer, so not a layer of the engine. Its
``register`` and ``enrich`` import the Spark binding when they are called; the engine never
imports the root (the circle test covers the rest)."""

_ENGINE_LAYERS = (
    (
        "spark_statestore.errors",
        "spark_statestore.health",
        "spark_statestore.integer_spec",
        "spark_statestore.logs",
        "spark_statestore.native",
        "spark_statestore.partition_spec",
        "spark_statestore.position",
        "spark_statestore.query",
        "spark_statestore.schemas",
        "spark_statestore.version",
    ),
    ("spark_statestore.changelog",),
    ("spark_statestore.store",),
    (
        "spark_statestore.follower",
        "spark_statestore.sink",
        "spark_statestore.serve",
        "spark_statestore.metrics",
    ),
    ("spark_statestore.discovery",),
)
"""The engine's layers, lowest first (DESIGN §2): value types < changelog < store < follower,
sink, serve < discovery. A module imports from its own layer or the ones below."""


def _import_graph() -> dict[str, dict[str, int]]:
    """Each module of the installed layout -> the modules it imports (with a line of each).

    Every import statement counts, wherever it is: at module level, inside a function (a lazy
    import that breaks a circle at run time is still a circle in the design) and under ``if
    TYPE_CHECKING:`` (a type-only import still makes the importer know the imported; the
    circles issue 27 lists include such imports). ``from package import name`` is an edge to
    ``package.name`` when that is a module, else to the package. Importing a module also runs
    its parents' ``__init__``; that is Python's mechanics, not an edge.
    """
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files: dict[str, tuple[Path, bool]] = {}
    for top, name in _TREES.items():
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root / top).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            files[".".join([name, *parts])] = (path, is_package)

    def known(target: str) -> str | None:
        while target and target not in files:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in files.items():
        package = module if is_package else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.append(submodule if submodule in files else source)
            for target in targets:
                found = known(target)
                if found is not None and found != module:
                    edges.setdefault(found, node.lineno)
        graph[module] = edges
    return graph


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _describe(circle: list[str], graph: dict[str, dict[str, int]]) -> str:
    edges = [
        f"{module}:{line} -> {target}"
        for module in circle
        for target, line in sorted(graph[module].items())
        if target in circle
    ]
    return "; ".join(edges)


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@requires_checkout
def test_no_import_circle_between_modules() -> None:
    """No two modules import each other, directly or through others (DESIGN §2): a type two
    modules need lives below both, a handle's children receive what they need."""
    graph = _import_graph()
    assert [_describe(circle, graph) for circle in _circles(graph)] == []


@requires_checkout
def test_the_engine_imports_no_binding_and_no_program() -> None:
    """The engine (``spark_statestore`` but its front door) never imports the connectors,
    the CLI, the demo, the bench or the front door, and each of its modules imports only from
    its own layer or lower ones (DESIGN §2)."""
    graph = _import_graph()

    def layer(module: str) -> int | None:
        for rank, members in enumerate(_ENGINE_LAYERS):
            if any(_within(module, member) for member in members):
                return rank
        return None

    engine = [
        module
        for module in sorted(graph)
        if module != _FRONT_DOOR
        and _within(module, "spark_statestore")
        and not any(_within(module, high) for high in _PROGRAMS_AND_BINDINGS)
    ]
    unplaced = [module for module in engine if layer(module) is None]
    assert unplaced == [], "give these modules their layer in _ENGINE_LAYERS"
    upward = [
        f"{module}:{line} -> {target}"
        for module in engine
        for target, line in sorted(graph[module].items())
        if target == _FRONT_DOOR
        or any(_within(target, high) for high in _PROGRAMS_AND_BINDINGS)
        or (layer(target) or 0) > (layer(module) or 0)
    ]
    assert upward == []


@requires_checkout
def test_the_connectors_import_no_program() -> None:
    """The bindings sit below the programs (DESIGN §2): nothing in ``connectors/`` imports
    the CLI, the demo or the bench."""
    graph = _import_graph()
    programs = [high for high in _PROGRAMS_AND_BINDINGS if high != "spark_statestore.connectors"]
    upward = [
        f"{module}:{line} -> {target}"
        for module, edges in sorted(graph.items())
        if _within(module, "spark_statestore.connectors")
        for target, line in sorted(edges.items())
        if any(_within(target, program) for program in programs)
    ]
    assert upward == []


@requires_checkout
def test_no_private_name_is_imported_from_another_module() -> None:
    """A name with a leading underscore stays in its module (STYLE 17): no module imports
    one from another module of the package. (Reaching a private attribute of another
    module's object cannot be told apart statically; review watches that.)"""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    crossing = []
    for top in _TREES:
        for path in (root / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                ours = node.level > 0 or (node.module or "").split(".")[0] in _TREES.values()
                private = [
                    alias.name
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
                if ours and private:
                    where = f"{path.relative_to(root)}:{node.lineno}"
                    crossing.append(f"{where}: from {node.module} import {', '.join(private)}")
    assert crossing == []


@requires_checkout
def test_the_package_and_its_extension_share_one_version() -> None:
    import re
    from pathlib import Path

    import tomllib

    from spark_statestore.version import __version__

    root = Path(__file__).resolve().parents[2]
    cargo = tomllib.loads((root / "native" / "Cargo.toml").read_text())
    lock = tomllib.loads((root / "native" / "Cargo.lock").read_text())
    locked = [p["version"] for p in lock["package"] if p["name"] == cargo["package"]["name"]]
    assert cargo["package"]["version"] == __version__
    assert locked == [__version__]
    # Neither Python project states a version of its own: setuptools reads version.py, maturin
    # reads Cargo.toml.
    for project in (root / "pyproject.toml", root / "native" / "pyproject.toml"):
        meta = tomllib.loads(project.read_text())["project"]
        assert "version" not in meta and meta["dynamic"] == ["version"], project
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)
    changelog = (root / "CHANGELOG.md").read_text()
    assert f"## {__version__} " in changelog or f"## {__version__}\n" in changelog
