"""docs/quickstart.md, run as a user would: its files written out as they are in the page, its
tests run with pytest, its topology served by a real worker process, and its commands run through
the installed `stream-adapter` script against the test broker."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stream_adapter.settings import Settings
from tests.harness import ROOT, WorkerProcess, wait_for

pytestmark = pytest.mark.integration

PAGE = ROOT / "docs" / "quickstart.md"
FILE_BLOCK = re.compile(r"```python\n# file: (?P<name>[\w.]+)\n(?P<code>.*?)```", re.S)
SH_BLOCK = re.compile(r"```sh\n(?P<body>.*?)```", re.S)
SCRIPT = str(Path(sys.executable).parent / "stream-adapter")


def page_files() -> dict[str, str]:
    files = {m["name"]: m["code"] for m in FILE_BLOCK.finditer(PAGE.read_text())}
    assert set(files) == {"shop_tools.py", "shop_topology.py", "test_shop_tools.py"}
    return files


def page_commands() -> list[str]:
    lines = []
    for block in SH_BLOCK.finditer(PAGE.read_text()):
        for line in block["body"].splitlines():
            command = line.split("  #")[0].strip()
            if command:
                lines.append(command)
    return lines


def documented(command: str) -> str:
    """command, after checking the page shows it exactly."""
    assert command in page_commands(), f"docs/quickstart.md no longer shows: {command}"
    return command


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The user's folder with the page's files in it."""
    work = tmp_path / "shop"
    work.mkdir()
    for name, code in page_files().items():
        (work / name).write_text(code)
    return work


@pytest.fixture
def env(settings: Settings, folder: Path) -> dict[str, str]:
    """The page's exports, on the test's broker and unique topics."""
    keys = f"k1:{secrets.token_hex(16)}"
    assert documented(
        "export STREAM_ADAPTER_DECISION_KEYS="
        "\"k1:$(python3 -c 'import secrets; print(secrets.token_hex(16))')\""
    )
    assert documented("export PYTHONPATH=$PWD STREAM_ADAPTER_TOPOLOGY=shop_topology")
    return {
        **os.environ,
        **settings.to_env(),
        "PYTHONPATH": str(folder),
        "STREAM_ADAPTER_TOPOLOGY": "shop_topology",
        "STREAM_ADAPTER_DECISION_KEYS": keys,
        "STREAM_ADAPTER_REVIEWERS_FILE": str(folder / "reviewers.json"),
    }


def run(command: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A `stream-adapter ...` command line through the installed script."""
    args = shlex.split(command)
    assert args[0] == "stream-adapter"
    return subprocess.run(
        [SCRIPT, *args[1:]], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def replies(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_the_page_tests_pass_with_pytest(folder: Path) -> None:
    assert documented("pytest -q test_shop_tools.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shop_tools.py"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_page_topology_answers_calls_and_waits_for_a_reviewer(
    settings: Settings, folder: Path, env: dict[str, str]
) -> None:
    created = run(documented("stream-adapter topics create"), env, folder)
    assert created.returncode == 0, created.stdout + created.stderr
    extra = {k: env[k] for k in ("STREAM_ADAPTER_TOPOLOGY", "STREAM_ADAPTER_DECISION_KEYS")}
    worker = WorkerProcess(settings, folder / "worker", {**extra, "PYTHONPATH": str(folder)})
    assert documented("stream-adapter worker")
    worker.start()
    try:
        asyncio.run(worker.ready())
        lookup = documented('stream-adapter call lookup_order \'{"order_id": "A-1001"}\'')
        looked_up = run(lookup, env, folder)
        assert looked_up.returncode == 0, looked_up.stdout + looked_up.stderr
        [reply] = replies(looked_up.stdout)
        assert reply["status"] == "ok"
        assert reply["result"] == {
            "order_id": "A-1001",
            "customer": "Acme GmbH",
            "total_cents": 4200,
        }

        refund = documented(
            'stream-adapter call refund \'{"order_id": "A-1001", "amount_cents": 1500}\' --wait 300'
        )
        waiting = subprocess.Popen(
            [SCRIPT, *shlex.split(refund)[1:]],
            env=env,
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def pending() -> list[dict[str, Any]]:
                shown = documented("stream-adapter approvals list --state pending")
                listed = run(shown, env, folder)
                assert listed.returncode == 0, listed.stderr
                as_json = subprocess.run(
                    [SCRIPT, "approvals", "list", "--state", "pending", "--json"],
                    env=env,
                    cwd=folder,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                return [json.loads(line) for line in as_json.stdout.splitlines()]

            [record] = asyncio.run(
                wait_for(pending, timeout_s=60, what="the refund to be parked", interval_s=0.5)
            )
            assert record["tool"] == "refund" and record["arguments"]["amount_cents"] == 1500
            decide = (
                "stream-adapter approvals decide APPROVAL_ID --approve --reviewer you "
                '--reason "customer called"'
            )
            documented(decide)
            decided = run(decide.replace("APPROVAL_ID", record["approval_id"]), env, folder)
            assert decided.returncode == 0, decided.stdout + decided.stderr
            out, err = waiting.communicate(timeout=120)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.wait(10)
        assert waiting.returncode == 0, out + err
        statuses = [r["status"] for r in replies(out)]
        assert statuses == ["pending_approval", "ok"], out
        assert replies(out)[-1]["result"] == {"order_id": "A-1001", "refunded_cents": 1500}
    finally:
        worker.kill()
