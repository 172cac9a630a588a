#!/usr/bin/env bash
# `make dist`: what a user installs, in dist/ (or OUT_DIR):
#   spark_statestore-<version>-py3-none-any.whl and .tar.gz  the package (pure Python)
#   spark_statestore_native-<version>-cp3XX-...manylinux...whl the compiled extension, with
#       LevelDB, snappy and OpenSSL inside it (scripts/build-native.sh: maturin + auditwheel)
#   spark_statestore_native-<version>.tar.gz                 the extension's source (Rust)
# Both share one version (spark_statestore/version.py, native/Cargo.toml). The extension's
# wheel is for this interpreter's Python version; build it with another Python for another.
#
#   scripts/dist.sh [OUT_DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/dist}"
PY="$ROOT/.venv/bin/python"
say() { printf '[dist] %s\n' "$*" >&2; }

rm -rf "$OUT"
mkdir -p "$OUT"
say "the package: sdist and wheel"
# No isolation: the build backend (setuptools) comes from the setup's virtualenv, offline.
"$PY" -m build --no-isolation --sdist --wheel --outdir "$OUT" "$ROOT" >&2
say "the compiled extension: its source and its manylinux wheel"
"$(dirname "$PY")/maturin" sdist --manifest-path "$ROOT/native/Cargo.toml" --out "$OUT" >&2
bash "$ROOT/scripts/build-native.sh" "$OUT" "$PY" >/dev/null
rm -rf "$ROOT/build"  # setuptools' scratch directory
ls -1 "$OUT"
