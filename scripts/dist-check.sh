#!/usr/bin/env bash
# `make dist-check`: install dist/'s wheels as a user would, on a machine that has no Rust, no
# C compiler, none of the -dev packages and no LevelDB or snappy library, and run the tests
# against that install.
#
#   scripts/dist-check.sh [PYTEST ARGS...]   (default: the whole suite, as `make test` runs it)
#
# Such a machine is made of this one with a private mount namespace (root: `unshare -m`):
# the compilers and Rust's tools are covered by /dev/null, LevelDB's, OpenSSL's and snappy's
# headers by empty directories, and the system's libleveldb and libsnappy by /dev/null; the
# checkout's own packages (spark_statestore/, connectors/, pyspark_statestore/, native/) are
# covered by empty directories too, so nothing can be imported from the checkout. Then, in
# a fresh virtualenv (outside the checkout), pip installs the package's and the extension's
# wheels from dist/ with their dependencies (constraints.txt's pins), the check asserts the
# fast path runs and LevelDB is the wheel's own copy, and the tests run with that
# interpreter (scripts/run-tests.sh with SPARK_STATESTORE_TEST_PYTHON).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '[dist-check] %s\n' "$*" >&2; }
die() { printf '[dist-check] ERROR: %s\n' "$*" >&2; exit 1; }

if [ "${SPARK_STATESTORE_DIST_CHECK_INSIDE:-}" != "1" ]; then
    [ "$(id -u)" = "0" ] || die "needs root (a private mount namespace hides the build tools and libraries)"
    command -v unshare >/dev/null || die "needs unshare (util-linux)"
    ls "$ROOT"/dist/spark_statestore-*-py3-none-any.whl "$ROOT"/dist/spark_statestore_native-*manylinux*.whl \
        >/dev/null 2>&1 || die "no wheels in $ROOT/dist: run \`make dist\` first"
    exec env SPARK_STATESTORE_DIST_CHECK_INSIDE=1 unshare --mount --propagation private \
        bash "${BASH_SOURCE[0]}" "$@"
fi

# --- inside the namespace: take the tools and libraries away --------------------------
hidden=()
hide_file() {
    local file="$1"
    [ -e "$file" ] || return 0
    mount --bind /dev/null "$file"
    hidden+=("$file")
}
hide_dir() {
    local dir="$1"
    [ -d "$dir" ] || return 0
    mount -t tmpfs -o ro,size=1m none "$dir"
    hidden+=("$dir/")
}
for tool in cargo rustc rustup rustdoc cc c++ gcc g++ clang clang++ ld ld.bfd ld.gold cpp \
    x86_64-linux-gnu-gcc x86_64-linux-gnu-g++ x86_64-linux-gnu-ld maturin; do
    while path="$(command -v "$tool" 2>/dev/null)" && [ -n "$path" ] && [ -e "$path" ]; do
        real="$(readlink -f "$path")"
        hide_file "$real"
        [ "$real" = "$path" ] || hide_file "$path"
        # A name covered by /dev/null is still "found": stop when it is ours.
        break
    done
done
for file in /usr/bin/x86_64-linux-gnu-gcc-* /usr/bin/gcc-* /usr/bin/g++-* /usr/lib/gcc/x86_64-linux-gnu/*/cc1 \
    /usr/lib/x86_64-linux-gnu/libleveldb.so* /usr/lib/x86_64-linux-gnu/libsnappy.so* \
    /usr/lib/x86_64-linux-gnu/librdkafka*.so*; do
    [ -f "$file" ] && hide_file "$(readlink -f "$file")"
done
for dir in /usr/include/leveldb /usr/include/openssl /usr/include/x86_64-linux-gnu/openssl \
    /usr/include/librdkafka "$HOME/.cargo" "$HOME/.rustup" \
    "$ROOT/spark_statestore" "$ROOT/connectors" "$ROOT/pyspark_statestore" "$ROOT/native"; do
    hide_dir "$dir"
done
for header in /usr/include/snappy*.h; do [ -f "$header" ] && hide_file "$header"; done
say "hidden here: ${#hidden[@]} paths (compilers, Rust, LevelDB/snappy libraries, -dev headers, the checkout's packages)"
if echo 'int main(void){return 0;}' | cc -x c - -o /dev/null 2>/dev/null; then die "a C compiler still works"; fi
if cargo --version >/dev/null 2>&1; then die "cargo still runs"; fi
ldconfig -p | grep -q "libleveldb" && [ -s "$(ldconfig -p | awk '/libleveldb/ {print $NF; exit}')" ] \
    && die "the system's libleveldb is still readable"

# --- a user's install ------------------------------------------------------------------
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
work="$(mktemp -d -t spark-statestore-dist-check-XXXXXX)"
trap 'rm -rf "$work"' EXIT
say "a fresh virtualenv in $work/venv ($("$PYTHON" -V 2>&1))"
"$PYTHON" -m venv "$work/venv"
VPY="$work/venv/bin/python"
"$VPY" -m pip install --quiet --disable-pip-version-check --upgrade pip
package=("$ROOT"/dist/spark_statestore-*-py3-none-any.whl)
extension=("$ROOT"/dist/spark_statestore_native-*manylinux*.whl)
say "installing ${package[0]##*/} [dev,connect] and ${extension[0]##*/}"
"$VPY" -m pip install --quiet --disable-pip-version-check --only-binary=plyvel,pyarrow,confluent-kafka \
    -c "$ROOT/constraints.txt" "${package[0]}[dev,connect]" "${extension[0]}"

(cd "$work" && "$VPY" - <<'PY'
import os, tempfile
from spark_statestore import native
status = native.status()
print("[dist-check]", status)
assert status.startswith("compiled fast paths:"), status
import spark_statestore, spark_statestore_native
assert "site-packages" in spark_statestore.__file__, spark_statestore.__file__
from spark_statestore.store import Role, Store, StoreSpec
with tempfile.TemporaryDirectory() as tmp, Store.open(tmp + "/s", StoreSpec(Role.FOLLOWER, "t", 1)) as store:
    with store.begin() as txn:
        txn.put(b"k", b"v", partition=0, offset=0)
        txn.set_changelog_offset(0, 1)
    maps = open("/proc/self/maps").read()
libs = sorted({line.split()[-1] for line in maps.splitlines() if "leveldb" in line or "snappy" in line})
print("[dist-check] LevelDB and snappy mapped from:", *libs, sep="\n  ")
assert libs and all("spark_statestore_native.libs/" in lib or "plyvel" in lib for lib in libs), libs
assert any("spark_statestore_native.libs/libleveldb-" in lib for lib in libs), libs
PY
)

# The repository's test peers stay the checkout's (built by the setup): the Kafka Streams
# app and the schema registry.
export SPARK_STATESTORE_INTEROP_APP="$ROOT/interop/kafka-streams/target"
export SPARK_STATESTORE_SCHEMA_REGISTRY_APP="$ROOT/interop/schema-registry/target/quarkus-app"
# Tests that build or ship the wheels take these instead (the checkout's sources are hidden).
export SPARK_STATESTORE_TEST_PACKAGE_WHEEL="${package[0]}"
export SPARK_STATESTORE_TEST_NATIVE_WHEEL="${extension[0]}"
say "the tests, with the installed wheels' interpreter ($VPY)"
SPARK_STATESTORE_TEST_PYTHON="$VPY" bash "$ROOT/scripts/run-tests.sh" "$@"
