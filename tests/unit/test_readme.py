"""The README's Python tour runs as written (docs kept true to the code)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT, requires_checkout


def test_readme_python_tour_runs(tmp_path: Path) -> None:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 3, "the README tour has lost its Python examples"
    code = "\n".join(blocks).replace("/tmp/inventory", str(tmp_path / "inventory"))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_tour"})
    assert (tmp_path / "inventory" / "db").is_dir()


@requires_checkout
def test_docs_name_only_modules_and_files_that_exist() -> None:
    """README.md and docs/ name modules (``spark_statestore.x.y``) and repository files
    (``connectors/kafka/clients.py``): each must exist, so the docs follow the tree when
    code moves."""
    import importlib
    import re

    root = Path(__file__).resolve().parents[2]
    texts = {path: path.read_text() for path in [root / "README.md", *root.glob("docs/*.md")]}
    missing = []
    for path, text in texts.items():
        for ref in sorted(set(re.findall(r"spark_statestore(?:\.[A-Za-z_]+)+", text))):
            parts = ref.split(".")
            for n in range(len(parts), 0, -1):
                try:
                    found: object = importlib.import_module(".".join(parts[:n]))
                except ImportError:
                    continue
                for attr in parts[n:]:
                    found = getattr(found, attr, None)
                if found is None:
                    missing.append(f"{path.name}: {ref}")
                break
        for ref in sorted(
            set(
                re.findall(r"`((?:spark_statestore|connectors|tests|scripts|conf)/[\w./-]*)`", text)
            )
        ):
            if not (root / ref).exists():
                missing.append(f"{path.name}: {ref}")
    assert missing == []


def test_readme_documents_every_command() -> None:
    """Each ``spark-statestore`` subcommand has its entry under "Command-line options"."""
    from spark_statestore.cli import build_parser

    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Command-line options", 1)[1].split("\n## ", 1)[0]
    parser = build_parser()
    commands = next(
        action.choices
        for action in parser._subparsers._group_actions  # type: ignore[union-attr]
        if action.choices
    )
    undocumented = [
        name for name in commands if not re.search(rf"`spark-statestore {name}[` ]", section)
    ]
    assert undocumented == []
