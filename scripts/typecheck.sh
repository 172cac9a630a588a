#!/usr/bin/env bash
# mypy cannot follow setuptools' package_dir mapping (connectors/ is installed as
# spark_statestore.connectors), so check a link tree that has the installed layout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TREE="$ROOT/.typecheck"
rm -rf "$TREE" && mkdir -p "$TREE/spark_statestore"
for entry in "$ROOT"/spark_statestore/*; do
    case "$(basename "$entry")" in __pycache__|connectors) continue ;; esac
    ln -s "$entry" "$TREE/spark_statestore/$(basename "$entry")"
done
ln -s "$ROOT/connectors" "$TREE/spark_statestore/connectors"
cd "$TREE"
exec "$ROOT/.venv/bin/python" -m mypy --config-file "$ROOT/pyproject.toml" --cache-dir "$ROOT/.mypy_cache" -p spark_statestore "$@"
