#!/usr/bin/env bash
# Run every check on a fresh machine: install what is needed, then ruff, mypy, the import
# contracts (pyproject.toml [tool.importlinter]) and pytest.
# The tests start their own Kafka broker (from Maven jars) unless KAFKA_BOOTSTRAP_SERVERS is set.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# The runtime with every extra, and the developer tooling (dev/: a local Kafka, bench, chaos).
"$VENV/bin/python" -m pip install -q -e ".[test]" -e ./dev

for tool in java mvn; do
  command -v "$tool" >/dev/null || { echo "error: $tool is needed for the local Kafka broker" >&2; exit 1; }
done
# redis-server and PostgreSQL for the shared approval-store tests (apt, only when missing).
bash scripts/services.sh install
# Temporal's CLI dev server for the Temporal recipe's test (built from its Go module once).
bash scripts/temporal.sh install
# Debian's Chromium for the review service's browser test (Playwright drives it).
bash scripts/browser.sh install
# Fetch the broker's jars once (cached in .kafka/libs), so no test pays for it.
"$VENV/bin/python" -c "from stream_adapter_dev.broker import local; local.ensure_jars(local.BrokerConfig(jars_dir=__import__('pathlib').Path('.kafka/libs')))"

echo "== ruff"
"$VENV/bin/ruff" check stream_adapter dev topologies tests examples
"$VENV/bin/ruff" format --check stream_adapter dev topologies tests examples
echo "== mypy --strict (the core)"
"$VENV/bin/mypy" --strict stream_adapter dev/stream_adapter_dev
echo "== lint-imports (only stream/engine/ imports faust, mode and aiokafka)"
"$VENV/bin/lint-imports" --no-cache
echo "== pytest"
# In parallel processes (pytest-xdist), since the tests mostly wait on brokers and workers:
# each test file runs whole in one process (module fixtures share a worker or a cluster), the
# slowest files first (tests/conftest.py). TEST_WORKERS=0 runs everything in this process.
WORKERS=${TEST_WORKERS:-4}
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "$WORKERS" --dist loadfile \
  --no-loadscope-reorder "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "error: pytest ran no tests" >&2
  exit 1
fi
exit "$status"
