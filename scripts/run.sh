#!/usr/bin/env bash
# The main job on a fresh machine: install, a local Kafka broker unless one is configured,
# the topics, the review service in the background, then the demo worker in the foreground
# (Ctrl-C stops both; the broker keeps running: `.venv/bin/stream-adapter kafka stop`).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e . -e ./dev  # dev: the local broker
SA="$VENV/bin/stream-adapter"

if [ -z "${STREAM_ADAPTER_BROKER:-}${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  "$SA" kafka start
fi
# Exit code 2 means an existing topic has drifted: shown in the table, not fatal for a demo.
"$SA" topics create || [ $? -eq 2 ]
echo "worker: topology ${STREAM_ADAPTER_TOPOLOGY:-topologies.demo}; try:"
echo "  $SA call echo '{\"x\": 1}'   (or produce an envelope to tool-calls)"
mkdir -p .data
# Decision keys, made once and kept in .data/decision-keys (mode 0600): the review service signs
# with them and the worker refuses any decision that is not signed with them.
if [ -z "${STREAM_ADAPTER_DECISION_KEYS:-}" ]; then
  export STREAM_ADAPTER_DECISION_KEYS_FILE="${STREAM_ADAPTER_DECISION_KEYS_FILE:-$PWD/.data/decision-keys}"
  "$VENV/bin/python" -c 'import sys; from stream_adapter.core.signing import ensure_keys_file; ensure_keys_file(sys.argv[1])' \
    "$STREAM_ADAPTER_DECISION_KEYS_FILE"
fi
# The review service in the background (log: .data/review.log). The demo reviewer gets a fresh
# token each run: tokens are kept only as hashes, so an old one cannot be shown again.
TOKEN=$("$SA" reviewers add demo --replace --token-only)
"$SA" review >.data/review.log 2>&1 &
REVIEW_PID=$!
trap 'kill "$REVIEW_PID" 2>/dev/null || true' EXIT
echo "review: http://${STREAM_ADAPTER_REVIEW_HOST:-127.0.0.1}:${STREAM_ADAPTER_REVIEW_PORT:-8080}/"
echo "  sign in as reviewer demo with the token $TOKEN"
"$SA" worker
