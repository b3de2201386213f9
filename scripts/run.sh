#!/usr/bin/env bash
# The main job on a fresh machine: install, a local Kafka broker unless one is configured,
# the topics, then the demo worker in the foreground (Ctrl-C stops it; the broker keeps running:
# `.venv/bin/stream-adapter kafka stop`).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e .
SA="$VENV/bin/stream-adapter"

if [ -z "${STREAM_ADAPTER_BROKER:-}${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  "$SA" kafka start
fi
# Exit code 2 means an existing topic has drifted: shown in the table, not fatal for a demo.
"$SA" topics create || [ $? -eq 2 ]
echo "worker: topology ${STREAM_ADAPTER_TOPOLOGY:-topologies.demo}; try:"
echo "  $SA call echo '{\"x\": 1}'   (or produce an envelope to tool-calls)"
exec "$SA" worker
