#!/usr/bin/env bash
# Temporal's CLI (its dev server) for the Temporal recipe's test, built from its Go module.
#   temporal.sh install   build .temporal/bin/temporal once (needs Go; instant when present)
# The test finds it there (or via STREAM_ADAPTER_TEMPORAL_CLI, or `temporal` on PATH) and is
# skipped with the reason when there is none. The version is pinned: later releases' go.mod
# replaces a nested module that their module zip does not contain, so `go install` refuses them.
# A first build compiles the Temporal server: about half an hour of CPU on two cores, so it is
# cut at 15 min by default (TEMPORAL_BUILD_TIMEOUT_S) to keep CI in its budget; the test is then
# skipped with the reason, and a warm Go cache rebuilds in about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=${TEMPORAL_CLI_VERSION:-v1.5.1}
BIN=.temporal/bin
BUILD_TIMEOUT_S=${TEMPORAL_BUILD_TIMEOUT_S:-900}

install() {
  [ -x "$BIN/temporal" ] && return 0
  if ! command -v go >/dev/null 2>&1; then
    echo "warning: go not found; the Temporal dev-server test will be skipped" >&2
    return 0
  fi
  mkdir -p "$BIN"
  echo "== building Temporal CLI $VERSION (cached by Go after the first build)"
  local out
  out="$(pwd)/$BIN"
  if ! (cd "${TMPDIR:-/tmp}" && GOBIN="$out" GOFLAGS=-buildvcs=false \
        timeout "$BUILD_TIMEOUT_S" nice go install "github.com/temporalio/cli/cmd/temporal@$VERSION"); then
    echo "warning: building the Temporal CLI failed or timed out; its test will be skipped" >&2
  fi
}

case "${1:-}" in
  install) install ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
