"""`stream-adapter call` and `dlq list|replay` as a user runs them, against a real worker."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Any

import orjson

from stream_adapter.ids import derive_ids
from stream_adapter.settings import Settings
from tests.harness import ROOT, Client, WorkerProcess, dead_letters, unique


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.out.splitlines() if line.startswith("{")]


async def cli(settings: Settings, *args: str, timeout_s: float = 60.0) -> Ran:
    """Run `python -m stream_adapter ARGS` with settings in its environment."""
    env = {**os.environ, **settings.to_env(), "COLUMNS": "200"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "stream_adapter",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


async def test_call_prints_the_reply(worker: WorkerProcess, settings: Settings) -> None:
    ran = await cli(settings, "call", "add", '{"a": 2, "b": 3}', "--wait", "30")
    assert ran.code == 0, ran
    [reply] = ran.json_lines()
    assert reply["status"] == "ok" and reply["result"] == 5
    assert reply["run_id"].startswith("run_") and reply["call_id"].startswith("call_")

    failed = await cli(settings, "call", "boom", "--wait", "30")
    assert failed.code == 1, failed
    assert failed.json_lines()[0]["error"]["kind"] == "ToolFailed"

    bad = await cli(settings, "call", "echo", "[1, 2]")
    assert bad.code == 2 and "JSON object" in bad.err


async def test_call_follows_pending_approval_to_the_final_reply(
    worker: WorkerProcess, settings: Settings, client: Client
) -> None:
    args = '{"customer": "acme", "amount_cents": 100}'
    run_id = unique("run")
    running = asyncio.create_task(
        cli(settings, "call", "send_invoice", args, "--run-id", run_id, "--wait", "40")
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    await client.decide(pending["approval_id"], True)
    ran = await running
    assert ran.code == 0, ran
    statuses = [r["status"] for r in ran.json_lines()]
    assert statuses == ["pending_approval", "ok"]

    # Not decided within --wait: the pending reply is printed, exit code 3.
    short = await cli(
        settings, "call", "send_invoice", args, "--run-id", unique("run"), "--wait", "5"
    )
    assert short.code == 3, short
    assert [r["status"] for r in short.json_lines()] == ["pending_approval"]


async def test_dlq_list_shows_origin_and_kind(
    worker: WorkerProcess, settings: Settings, client: Client
) -> None:
    boom = await client.call("boom")
    missing = await client.call("no_such_tool")
    await client.reply_for(run_id=missing.run_id)
    await dead_letters(settings, at_least=2)
    ran = await cli(settings, "dlq", "list", "--json")
    assert ran.code == 0, ran
    rows = {row["message_id"]: row for row in ran.json_lines()}
    assert rows[boom.message_id]["error_kind"] == "ToolFailed"
    assert rows[missing.message_id]["error_kind"] == "ToolNotFound"
    assert rows[boom.message_id]["source_topic"] == settings.calls_topic
    only = await cli(settings, "dlq", "list", "--json", "--filter", "ToolNotFound")
    assert [row["message_id"] for row in only.json_lines()] == [missing.message_id]
    table = await cli(settings, "dlq", "list")
    assert "ToolFailed" in table.out and "2 dead letter(s)" in table.out


async def test_replayed_call_is_answered_with_its_original_ids(
    worker: WorkerProcess, settings: Settings, client: Client
) -> None:
    # flaky fails 4 times; 3 attempts per delivery: dead-lettered, then ok on replay.
    flaky = await client.call("flaky", {"key": unique("k"), "fail_times": 4})
    missing = await client.call("no_such_tool")
    await client.decide("appr_unknown", True)  # a decision dead letter: never replayed
    await client.reply_for(status="error", run_id=flaky.run_id)
    await client.reply_for(status="error", run_id=missing.run_id)
    await dead_letters(settings, at_least=3)

    ran = await cli(settings, "dlq", "replay", "--filter", "ToolFailed")
    assert ran.code == 0, ran
    assert "replayed 1" in ran.out
    ok = await client.reply_for(status="ok", run_id=flaky.run_id)
    assert (ok["run_id"], ok["call_id"]) == (flaky.run_id, flaky.call_id)
    assert (flaky.run_id, flaky.call_id) == derive_ids(flaky.message_id, settings.source)
    assert ok["result"] == {"attempts": 5}
    assert len(client.replies_for(run_id=missing.run_id)) == 1  # --filter left it alone

    everything = await cli(settings, "dlq", "replay", "--limit", "5")
    assert everything.code == 0, everything
    assert "skipped 1: not from the calls topic" in everything.out
    assert "replayed 2" in everything.out  # flaky (ok again) and the unknown tool
    await client.wait_replies(
        lambda rs: len([r for r in rs if r["run_id"] == missing.run_id]) == 2,
        what="the replayed unknown-tool call's error reply",
    )
    again = client.replies_for(run_id=missing.run_id)
    assert {(r["call_id"], r["error"]["kind"]) for r in again} == {
        (missing.call_id, "ToolNotFound")
    }
