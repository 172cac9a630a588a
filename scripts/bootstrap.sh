#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine, idempotently:
#   1. Java 17+ (Spark and Kafka need it) and Maven (resolves the Kafka jars): detected,
#      installed with apt when missing and we are root, else we say what to install.
#   2. A virtualenv in .venv/ with the project (editable), its dev and Spark Connect
#      (grpcio, ...) dependencies and the versions pinned in constraints.txt; Spark's own
#      front ends (.venv/bin/pyspark, spark-sql, spark-submit, beeline) find the data source
#      and the venv's Python with no activation and no code.
#   3. The compiled extension (native/: Rust, built from source with maturin into the
#      manylinux wheel `make dist` ships, then installed from it) and what it builds
#      against: Rust 1.88+ (Debian's rustc-web/cargo-web when missing and we are
#      root), LevelDB's headers (libleveldb-dev), OpenSSL's (libssl-dev), a C toolchain.
#      SPARK_STATESTORE_NATIVE=0 skips it: everything then runs on the pure-Python paths.
#   4. The jars of Apache Kafka and of Spark's Kafka connector, resolved from Maven Central
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
    for candidate in python3.11 python3.12 python3.10 python3; do
        if command -v "$candidate" >/dev/null 2>&1; then PYTHON="$(command -v "$candidate")"; break; fi
    done
fi
[ -n "$PYTHON" ] || die "no python3 found; install Python 3.10, 3.11 or 3.12 (Debian: apt-get install python3 python3-venv)"
"$PYTHON" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); spark-statestore needs Python 3.10, 3.11 or 3.12 (README, \"Python versions\"); set PYTHON to one"

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

# --- Spark's own front ends see the project with no extra step ---------------------------
# (a) Spark registers the Python data sources it finds by listing top-level pyspark_* modules
#     (pkgutil.iter_modules over sys.path). The editable install above serves the packages
#     through an import hook that listing never sees, so spark-sql, the Thrift JDBC server
#     and a fresh pyspark shell would not know `spark_statestore`. A directory on sys.path
#     (a .pth file) holding a link to the checkout's pyspark_statestore/ makes the module
#     listable; it imports the engine through the editable install, so edits stay live.
# (b) .venv/bin/pyspark, spark-sql and spark-submit find SPARK_HOME and start Python with
#     `python3` from PATH: without an activated virtualenv that is another interpreter, which
#     has no PySpark. They default to this virtualenv's interpreter instead (Spark's
#     conf/spark-env.sh in the virtualenv's SPARK_HOME, and the default of the venv's own
#     find-spark-home); PYSPARK_PYTHON still overrides both.
site_dir="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
lookup_dir="$VENV/spark-statestore-lookup"
mkdir -p "$lookup_dir"
ln -sfn "$ROOT/pyspark_statestore" "$lookup_dir/pyspark_statestore"
echo "$lookup_dir" > "$site_dir/spark_statestore_lookup.pth"
spark_home="$("$VENV/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
mkdir -p "$spark_home/conf"
cat > "$spark_home/conf/spark-env.sh" <<EOF
# Written by spark-statestore's setup (scripts/bootstrap.sh): Spark's scripts and its Python
# workers run this virtualenv's interpreter unless PYSPARK_PYTHON names another.
export PYSPARK_PYTHON="\${PYSPARK_PYTHON:-$VENV/bin/python}"
EOF
sed -i "s|PYSPARK_DRIVER_PYTHON=\"\${PYSPARK_PYTHON:-\"python3\"}\"|PYSPARK_DRIVER_PYTHON=\"\${PYSPARK_PYTHON:-\"$VENV/bin/python\"}\"|" \
    "$VENV/bin/find-spark-home"
grep -q "$VENV/bin/python" "$VENV/bin/find-spark-home" \
    || die "could not point $VENV/bin/find-spark-home at $VENV/bin/python (PySpark changed that script?)"
"$VENV/bin/python" -c 'import pkgutil, sys; sys.exit(0 if any(m.name == "pyspark_statestore" for m in pkgutil.iter_modules()) else 1)' \
    || die "Spark's lookup of Python data sources would not see pyspark_statestore (see $site_dir/spark_statestore_lookup.pth)"

# --- the compiled extension (native/) -----------------------------------------------------
rust_ok() {
    local cargo_bin="$1"
    [ -x "$cargo_bin" ] || return 1
    local version
    version="$("$(dirname "$cargo_bin")/rustc" --version 2>/dev/null || rustc --version 2>/dev/null)" || return 1
    "$PYTHON" - "$version" <<'PY'
import re, sys
m = re.search(r"(\d+)\.(\d+)", sys.argv[1])
sys.exit(0 if m and (int(m[1]), int(m[2])) >= (1, 88) else 1)
PY
}
find_cargo() {
    for candidate in "$(command -v cargo 2>/dev/null)" "$HOME/.cargo/bin/cargo" /usr/bin/cargo; do
        if [ -n "$candidate" ] && rust_ok "$candidate"; then echo "$candidate"; return 0; fi
    done
    return 1
}
if [ "${SPARK_STATESTORE_NATIVE:-auto}" = "0" ] || [ "${SPARK_STATESTORE_NATIVE:-auto}" = "off" ]; then
    say "SPARK_STATESTORE_NATIVE=${SPARK_STATESTORE_NATIVE}: not building the compiled extension (pure-Python paths)"
else
    CARGO="$(find_cargo || true)"
    missing_debs=()
    [ -f /usr/include/leveldb/c.h ] || missing_debs+=(libleveldb-dev)
    [ -f /usr/include/openssl/ssl.h ] || missing_debs+=(libssl-dev)
    command -v cc >/dev/null 2>&1 && command -v make >/dev/null 2>&1 || missing_debs+=(build-essential)
    command -v pkg-config >/dev/null 2>&1 || missing_debs+=(pkg-config)
    [ -n "$CARGO" ] || missing_debs+=(rustc-web cargo-web)
    if [ "${#missing_debs[@]}" -gt 0 ]; then
        if is_root && command -v apt-get >/dev/null 2>&1; then
            say "installing what the compiled extension builds with: ${missing_debs[*]}"
            apt_install "${missing_debs[@]}"
            CARGO="$(find_cargo || true)"
        else
            die "the compiled extension (native/) needs: ${missing_debs[*]} (Debian package names; Rust 1.88 or newer, e.g. from rustup). Install them, or set SPARK_STATESTORE_NATIVE=0 to run on the pure-Python paths."
        fi
    fi
    [ -n "$CARGO" ] || die "Rust 1.88 or newer is needed to build native/ (found: $(rustc --version 2>/dev/null || echo none)); install it (rustup), or set SPARK_STATESTORE_NATIVE=0"
    native_stamp="$VENV/.spark-statestore-native"
    native_want="$( (cd "$ROOT/native" && cat Cargo.toml Cargo.lock pyproject.toml build.rs src/*.rs ../scripts/build-native.sh) | sha256sum | cut -d' ' -f1)"
    if [ ! -f "$native_stamp" ] || [ "$(cat "$native_stamp")" != "$native_want" ] \
        || ! "$VENV/bin/python" -c 'import spark_statestore_native' 2>/dev/null; then
        say "building the compiled extension (native/, Rust; the first build takes a few minutes) with $CARGO"
        # Built as the wheel users install (scripts/build-native.sh: maturin, then auditwheel
        # puts LevelDB, snappy and OpenSSL inside it), and installed from that wheel, so the
        # tests run the very artifact `make dist` ships. One build directory per user, shared
        # by checkouts: a fresh clone reuses what an earlier one compiled (librdkafka's C
        # sources above all).
        wheel="$(PATH="$(dirname "$CARGO"):$PATH" bash "$ROOT/scripts/build-native.sh" "$VENV/native-wheel" "$VENV/bin/python")" \
            || die "building the compiled extension (native/) failed (see above); set SPARK_STATESTORE_NATIVE=0 to run on the pure-Python paths"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel" >&2 \
            || die "installing the compiled extension's wheel $wheel failed (see above)"
        echo "$native_want" > "$native_stamp"
    fi
    paths="$(SPARK_STATESTORE_NATIVE=auto "$VENV/bin/python" -c 'from spark_statestore import native; print(native.status())')" \
        || die "the compiled extension's check failed (see above); delete $VENV and run again"
    case "$paths" in
        "compiled fast paths:"*) say "$paths" ;;
        *) die "$paths" ;;
    esac
fi

# --- jars: Apache Kafka and Spark's Kafka connector ---------------------------------------
"$VENV/bin/spark-statestore" jars >&2 || die "could not resolve the Kafka jars (see above)"

# --- the Kafka Streams application the interop tests and the demo run against -------------
# Maven's incremental build makes a re-run cheap (a few seconds when nothing changed).
mvn -B -q -f "$ROOT/interop/kafka-streams/pom.xml" package >&2 \
    || die "could not build the Kafka Streams interop app (interop/kafka-streams, see above)"
say "Kafka Streams interop app built: interop/kafka-streams/target/"

# --- the schema registry (Apicurio Registry) the schema-registry tests run against --------
# Unpacks the server Apicurio publishes, already built by Quarkus, into target/quarkus-app
# (one 160 MB download on a fresh machine; Maven's marker makes a re-run a no-op). It runs
# on Java 21+, found by the harness: a missing one fails only the tests that start it.
mvn -B -q -f "$ROOT/interop/schema-registry/pom.xml" package >&2 \
    || die "could not build the schema registry (interop/schema-registry, see above)"
if registry_java="$("$VENV/bin/python" -c 'from spark_statestore.connectors.local.schema_registry import find_registry_java; print(find_registry_java())' 2>&1)"; then
    say "schema registry built: interop/schema-registry/target/quarkus-app (Java: $registry_java)"
else
    say "WARNING: schema registry built, but it cannot run here: ${registry_java##*LocalRegistryError: }"
fi

# --- a real Prometheus server for the tests that scrape our metrics endpoints -------------
# Built once from the Go module proxy into ~/.cache (about 5 minutes on 2 idle cores, 1.9 GB
# of Go modules; a no-op when cached). Without a new enough Go it says so and those tests
# skip, naming the reason.
bash "$ROOT/scripts/prometheus.sh" >/dev/null || die "could not build Prometheus (see above)"
