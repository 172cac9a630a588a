#!/usr/bin/env bash
# Lint, type-check and run the whole test suite inside .venv (after scripts/bootstrap.sh).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"

echo "== ruff"
"$PY" -m ruff check spark_statestore connectors pyspark_statestore tests || exit 1
"$PY" -m ruff format --check spark_statestore connectors pyspark_statestore tests || exit 1
echo "== mypy"
bash "$ROOT/scripts/typecheck.sh" || exit 1
echo "== pytest"
"$PY" -m pytest -p no:cacheprovider "$@"
status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure, not a pass" >&2
    exit 1
fi
exit "$status"
