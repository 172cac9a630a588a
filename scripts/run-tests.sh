#!/usr/bin/env bash
# Lint, type-check and run the whole test suite inside .venv (after scripts/bootstrap.sh).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# SPARK_STATESTORE_TEST_PYTHON: run the tests with another interpreter, e.g. a virtualenv
# holding the installed wheels (scripts/dist-check.sh); lint and type checks, which read the
# checkout's sources, are then skipped.
PY="${SPARK_STATESTORE_TEST_PYTHON:-$ROOT/.venv/bin/python}"
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"

if [ -z "${SPARK_STATESTORE_TEST_PYTHON:-}" ]; then
    echo "== ruff"
    "$PY" -m ruff check spark_statestore connectors pyspark_statestore tests || exit 1
    "$PY" -m ruff format --check spark_statestore connectors pyspark_statestore tests || exit 1
    echo "== mypy"
    bash "$ROOT/scripts/typecheck.sh" || exit 1
fi
# A pytest run that collects nothing is a failure, not a pass (exit code 5).
run_pytest() {
    "$PY" -m pytest -p no:cacheprovider "$@"
    local status=$?
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no tests ($*): that is a failure, not a pass" >&2
        return 1
    fi
    return "$status"
}

# With arguments: one pytest run of exactly those (tests/cluster only when named).
if [ "$#" -gt 0 ]; then
    echo "== pytest $*"
    run_pytest "$@"
    exit $?
fi

# The whole suite, in four pytest processes:
# - everything but tests/unit, tests/cluster and the `beside` tests (a local SparkSession and
#   real brokers), and, beside it, the `beside` tests (the demo, the sink's kill-at-each-step
#   test: each starts its own broker and Spark applications and mostly waits on them, while
#   the main run mostly waits on its own; and the schema-registry tests, with a broker, a
#   Spark session and a registry of that process's own); their output follows the main run's;
# - then tests/cluster, in a process of its own (its driver is a Spark standalone cluster's,
#   and a process has one SparkContext), and, beside it, tests/unit (no JVM, no broker:
#   pure CPU, while the cluster's tests mostly wait on its JVMs). The unit run's output is
#   shown after the cluster's. Any run failing fails the whole.
beside_log="$(mktemp -t spark-statestore-beside-XXXXXX.log)"
run_pytest --ignore=tests/unit -m beside >"$beside_log" 2>&1 &
beside_pid=$!
echo "== pytest (all but tests/unit, tests/cluster and the beside tests)"
echo "   (the beside tests run beside it; their output follows)"
run_pytest --ignore=tests/unit -m "not beside"
main=$?
wait "$beside_pid"
beside=$?
echo "== pytest -m beside (ran beside the main run)"
cat "$beside_log"
rm -f "$beside_log"
unit_log="$(mktemp -t spark-statestore-unit-XXXXXX.log)"
run_pytest tests/unit >"$unit_log" 2>&1 &
unit_pid=$!
echo "== pytest tests/cluster (a Spark standalone cluster, its Workers on hosts of their own)"
echo "   (tests/unit runs beside it; its output follows)"
run_pytest tests/cluster
cluster=$?
wait "$unit_pid"
unit=$?
echo "== pytest tests/unit (ran beside tests/cluster)"
cat "$unit_log"
rm -f "$unit_log"
if [ "$main" -ne 0 ] || [ "$beside" -ne 0 ] || [ "$cluster" -ne 0 ] || [ "$unit" -ne 0 ]; then
    echo "failed: main run exit $main, beside run exit $beside, cluster run exit $cluster," \
        "unit run exit $unit" >&2
    exit 1
fi
