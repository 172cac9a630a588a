#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine, idempotently:
#   1. Java 17+ (Spark and Kafka need it) and Maven (resolves the Kafka jars): detected,
#      installed with apt when missing and we are root, else we say what to install.
#   2. A virtualenv in .venv/ with the project (editable), its dev and Spark Connect
#      (grpcio, ...) dependencies and the versions pinned in constraints.txt.
#   3. The jars of Apache Kafka and of Spark's Kafka connector, resolved from Maven Central
#      into ~/.cache/spark-statestore/jars (`spark-statestore jars`; nothing when cached).
# Re-running is cheap: each step is skipped while its inputs are unchanged.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
cd "$ROOT"

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" = "0" ]; }

apt_install() {
    if [ -z "${APT_UPDATED:-}" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

# --- Python ---------------------------------------------------------------------------
PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.11 python3.12 python3.13 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then PYTHON="$(command -v "$candidate")"; break; fi
    done
fi
[ -n "$PYTHON" ] || die "no python3 found; install Python 3.10+ (Debian: apt-get install python3 python3-venv)"
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); spark-statestore needs Python 3.10 or newer"

# --- Java 17+ for Spark -----------------------------------------------------------------
java_major() {
    local java_bin="$1"
    "$java_bin" -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}
JAVA_BIN=""
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then JAVA_BIN="$JAVA_HOME/bin/java";
elif command -v java >/dev/null 2>&1; then JAVA_BIN="$(command -v java)"; fi
major="$( [ -n "$JAVA_BIN" ] && java_major "$JAVA_BIN" || echo 0 )"
if [ "${major:-0}" -lt 17 ] 2>/dev/null; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        say "Java 17+ not found (found: ${major:-none}); installing openjdk-17-jdk-headless with apt"
        apt_install openjdk-17-jdk-headless
        JAVA_BIN="$(command -v java)"
        major="$(java_major "$JAVA_BIN")"
        [ "${major:-0}" -ge 17 ] || die "installed openjdk-17-jdk-headless but 'java -version' still reports ${major}; set JAVA_HOME to a Java 17 install"
    else
        die "Spark and Kafka need Java 17 or newer (found: ${major:-none}). Install it, e.g. as root on Debian/Ubuntu: apt-get install -y openjdk-17-jdk-headless ; or set JAVA_HOME to a Java 17+ installation."
    fi
fi
say "java: $JAVA_BIN (major version $major)"

# --- Maven, to resolve the Kafka jars from Maven Central ---------------------------------
if ! command -v mvn >/dev/null 2>&1; then
    if is_root && command -v apt-get >/dev/null 2>&1; then
        say "Maven not found; installing maven with apt"
        apt_install maven
    else
        die "Maven (mvn) is needed once to resolve the Kafka jars. Install it, e.g. as root on Debian/Ubuntu: apt-get install -y maven ; or put a resolved jar cache in \$SPARK_STATESTORE_JARS."
    fi
fi
say "maven: $(command -v mvn)"

# --- virtualenv -------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv in $VENV"
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        if is_root && command -v apt-get >/dev/null 2>&1; then
            pyver="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
            say "the venv module is missing; installing python${pyver}-venv with apt"
            apt_install "python${pyver}-venv" || apt_install python3-venv
            "$PYTHON" -m venv "$VENV"
        else
            die "'$PYTHON -m venv' failed; install the venv module (Debian: apt-get install python3-venv)"
        fi
    fi
fi

stamp="$VENV/.spark-statestore-install"
want="$(cat pyproject.toml setup.cfg constraints.txt | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing spark-statestore and its dependencies into $VENV (first run takes a few minutes)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip "setuptools>=77" wheel
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev,connect]"
    echo "$want" > "$stamp"
else
    say "virtualenv up to date"
fi
"$VENV/bin/python" -c 'import spark_statestore.connectors.kafka, pyspark, pyarrow, plyvel, confluent_kafka, pyspark.sql.connect.session' \
    || die "the virtualenv in $VENV is broken; delete it and run again"

# --- jars: Apache Kafka and Spark's Kafka connector ---------------------------------------
"$VENV/bin/spark-statestore" jars >&2 || die "could not resolve the Kafka jars (see above)"

# --- the Kafka Streams application the interop tests and the demo run against -------------
# Maven's incremental build makes a re-run cheap (a few seconds when nothing changed).
mvn -B -q -f "$ROOT/interop/kafka-streams/pom.xml" package >&2 \
    || die "could not build the Kafka Streams interop app (interop/kafka-streams, see above)"
say "Kafka Streams interop app built: interop/kafka-streams/target/"
