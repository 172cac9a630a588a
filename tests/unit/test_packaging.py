"""Architecture rules that are easy to break silently."""

from __future__ import annotations

import json
import subprocess
import sys


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
