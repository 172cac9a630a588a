#!/usr/bin/env bash
# Build a real Prometheus server once, for the tests that scrape our metrics endpoints with it
# (tests/prometheus_server.py): `go install` of its cmd/prometheus from the Go module proxy
# into ${XDG_CACHE_HOME:-$HOME/.cache}/spark-statestore/prometheus-<version>/prometheus.
#
#   bash scripts/prometheus.sh          build it unless it is there; print its path on stdout
#   bash scripts/prometheus.sh --path   print where it is (or goes) and build nothing
#
# The binary has no web UI (its assets are embedded only with the build tag `builtinassets`,
# which needs npm); the HTTP API (/api/v1/query, /api/v1/targets, /-/ready) is all tests use.
# A build takes 5 minutes on 2 idle cores, 10 on busy ones (the download 45 s, 1.9 GB into Go's
# module cache); once built, a run is a version check. Without a Go new enough, this says so
# and exits 0, and the tests that need Prometheus are skipped, unless
# SPARK_STATESTORE_REQUIRE_PROMETHEUS is set: then it fails, as those tests would.
set -euo pipefail

# Prometheus 3.x.y is the Go module version v0.3xx.y (3.16.0 -> v0.316.0).
PROMETHEUS_VERSION="3.16.0"
# The `go` line of that version's go.mod: older Go refuses to build it.
GO_MIN="1.26.7"

IFS=. read -r major minor patch <<<"$PROMETHEUS_VERSION"
MODULE_VERSION="v0.$((major * 100 + minor)).$patch"
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/spark-statestore/prometheus-$PROMETHEUS_VERSION"
BIN="$DIR/prometheus"

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }
# Without Go we can only leave the Prometheus tests to skip themselves, unless they must run.
unavailable() {
    if [ -n "${SPARK_STATESTORE_REQUIRE_PROMETHEUS:-}" ]; then die "$*"; fi
    say "WARNING: $* The tests that scrape with a real Prometheus will be skipped."
    exit 0
}

if [ "${1:-}" = "--path" ]; then
    echo "$BIN"
    exit 0
fi
[ "$#" -eq 0 ] || die "usage: $0 [--path]"

built() { [ -x "$BIN" ] && "$BIN" --version 2>&1 | grep -q "version $PROMETHEUS_VERSION "; }

if built; then
    say "prometheus $PROMETHEUS_VERSION: $BIN"
    echo "$BIN"
    exit 0
fi

command -v go >/dev/null 2>&1 \
    || unavailable "Go $GO_MIN or newer is needed to build Prometheus $PROMETHEUS_VERSION and none is on PATH (Debian 12's golang-go is 1.19, too old; install Go from the project's machine image)."
go_version="$(GOTOOLCHAIN=local go env GOVERSION)"
if ! printf '%s\n%s\n' "go$GO_MIN" "$go_version" | sort -C -V; then
    unavailable "Prometheus $PROMETHEUS_VERSION needs Go $GO_MIN or newer to build; $(command -v go) is $go_version."
fi

mkdir -p "$DIR"
# One build at a time: a second caller waits for the first and then finds the binary.
exec 9>"$DIR/.lock"
flock 9
if built; then
    say "prometheus $PROMETHEUS_VERSION: $BIN"
    echo "$BIN"
    exit 0
fi

say "building Prometheus $PROMETHEUS_VERSION ($MODULE_VERSION) with $go_version from the Go module proxy (5 to 10 minutes on 2 cores; once)"
stage="$(mktemp -d "$DIR/.build-XXXXXX")"
trap 'rm -rf "$stage"' EXIT
# Its own build cache, removed afterwards: 2 GB of objects nothing else reuses. GOTOOLCHAIN=local:
# build with this Go, never fetch another one. The version flags are what Prometheus' own
# release build sets, so that `prometheus --version` (and our check above) names the release;
# -s -w leave out the debug symbols (105 MB instead of 147).
pkg="github.com/prometheus/common/version"
started=$SECONDS
GOBIN="$stage/bin" GOCACHE="$stage/cache" GOTOOLCHAIN=local \
    go install -trimpath \
    -ldflags "-s -w -X $pkg.Version=$PROMETHEUS_VERSION -X $pkg.Revision=$MODULE_VERSION -X $pkg.Branch=HEAD -X $pkg.BuildUser=spark-statestore" \
    "github.com/prometheus/prometheus/cmd/prometheus@$MODULE_VERSION" >&2 \
    || die "could not build Prometheus $PROMETHEUS_VERSION (see above)"
mv -f "$stage/bin/prometheus" "$BIN"
built || die "the Prometheus just built does not run: $("$BIN" --version 2>&1 | head -3)"
say "prometheus $PROMETHEUS_VERSION built in $((SECONDS - started)) s: $BIN"
echo "$BIN"
