"""The README's Python tour runs as written (docs kept true to the code)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_readme_python_tour_runs(tmp_path: Path) -> None:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 3, "the README tour has lost its Python examples"
    code = "\n".join(blocks).replace("/tmp/inventory", str(tmp_path / "inventory"))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme_tour"})
    assert (tmp_path / "inventory" / "db").is_dir()
