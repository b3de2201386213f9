"""`stream-adapter call`, `approvals` and `dlq list|replay` as a user runs them, against a real
worker: replies, exit codes, what stderr says while waiting, output for terminals and pipes."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from pathlib import Path

from stream_adapter.commands.exits import ExitCode
from stream_adapter.core.ids import derive_ids
from stream_adapter.settings import Settings
from tests.cli_support import Ran, clean_env, run, run_in_terminal
from tests.harness import Client, WorkerProcess, dead_letters, read_all, topic_id, unique

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def env_of(settings: Settings) -> dict[str, str]:
    return clean_env(**settings.to_env())


async def cli(settings: Settings, *args: str, stdin: str | None = None) -> Ran:
    """`stream-adapter ARGS` with settings in its environment, off the event loop."""
    return await asyncio.to_thread(run, *args, env=env_of(settings), stdin=stdin)


def terminal(settings: Settings, *args: str, columns: int) -> str:
    """What `stream-adapter ARGS` shows on a terminal this wide, without colours."""
    return ANSI.sub("", run_in_terminal(*args, env=env_of(settings), columns=columns))


async def test_call_prints_the_reply(worker: WorkerProcess, settings: Settings) -> None:
    ran = await cli(settings, "call", "add", '{"a": 2, "b": 3}', "--wait", "30")
    assert ran.code == 0, ran
    [reply] = ran.json_lines()
    assert reply["status"] == "ok" and reply["result"] == 5
    assert reply["run_id"].startswith("run_") and reply["call_id"].startswith("call_")
    sent = re.search(r"^sent (\S+:\d+:\d+) \(run_id (\S+), call_id (\S+)\)", ran.err, re.M)
    assert sent is not None, ran.err
    assert (sent[2], sent[3]) == (reply["run_id"], reply["call_id"])
    scope = topic_id(settings, settings.calls_topic)
    assert (sent[2], sent[3]) == derive_ids(sent[1], settings.source, scope)

    piped = await cli(settings, "call", "add", "-", stdin='{"a": 20, "b": 22}')
    assert piped.code == 0, piped
    assert [r["result"] for r in piped.json_lines()] == [42]

    failed = await cli(settings, "call", "boom", "--wait", "30")
    assert failed.code == ExitCode.FAILED, failed
    assert failed.json_lines()[0]["error"]["kind"] == "ToolFailed"

    bad = await cli(settings, "call", "echo", "[1, 2]")
    assert bad.code == ExitCode.USAGE and "JSON object" in bad.err


async def test_a_missing_topic_stops_call_at_once(settings: Settings) -> None:
    missing = unique("missing")
    ran = await cli(settings, "call", "add", '{"a": 1, "b": 1}', "--calls-topic", missing)
    assert ran.code == ExitCode.TOPICS, ran
    assert ran.err == (
        f"Error (TopicMissing): topic '{missing}' does not exist "
        "(run `stream-adapter topics create`)\n"
    )
    no_replies = await cli(settings, "call", "add", '{"a": 1, "b": 1}', "--replies-topic", missing)
    assert no_replies.code == ExitCode.TOPICS and missing in no_replies.err, no_replies
    assert await read_all(settings.bootstrap_servers, settings.calls_topic) == []  # nothing sent
    for command in (("dlq", "list"), ("dlq", "replay")):
        dlq = await cli(settings, *command, "--dlq-topic", missing)
        assert dlq.code == ExitCode.TOPICS and missing in dlq.err, dlq


async def test_worker_with_web_port_0_serves_without_metrics(
    settings: Settings, client: Client, tmp_path: Path
) -> None:
    worker = WorkerProcess(settings, tmp_path / "work", args=("--web-port", "0")).start()
    try:
        await worker.ready()
        sent = await client.call("add", {"a": 1, "b": 41})
        reply = await client.reply_for(run_id=sent.run_id)
        assert reply["result"] == 42
        log = worker.log_text()
        assert "metrics server listening" not in log and "ImproperlyConfigured" not in log
    finally:
        worker.kill()


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT handled and unblocked, as a terminal's foreground
    process has it, whatever disposition or mask this test process came to have."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signals_and_stacks(proc: subprocess.Popen[str]) -> str:
    """A child that did not stop: its signal masks, then every thread's stack (SIGABRT with
    the fault handler on), for the failure message."""
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
    except OSError:
        status = ""
    masks = " ".join(line for line in status.splitlines() if line.startswith("Sig"))
    proc.send_signal(signal.SIGABRT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        err = ""
    return f"{masks}\n{err}"


def test_ctrl_c_while_waiting_is_one_line_and_exit_130(settings: Settings) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "stream_adapter", "call", "echo", "--wait", "60"],
        env={**env_of(settings), "PYTHONFAULTHANDLER": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline().startswith("sent ")  # no worker: it waits
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running 30 s after SIGINT\n{_signals_and_stacks(proc)}"
            ) from None
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED
    assert (out, err) == ("", "Error: interrupted\n")


async def test_call_follows_pending_approval_to_the_final_reply(
    worker: WorkerProcess, settings: Settings, client: Client
) -> None:
    args = '{"customer": "acme", "amount_cents": 100}'
    run_id = unique("run")
    running = asyncio.create_task(
        cli(settings, "call", "send_invoice", args, "--run-id", run_id, "--wait", "40")
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    approval_id = pending["approval_id"]
    # The ids are never cut on a terminal, however narrow: they can be pasted.
    listed = await asyncio.to_thread(terminal, settings, "approvals", "list", columns=60)
    assert approval_id in listed and run_id in listed, listed
    assert "…" not in listed
    await client.decide(approval_id, True)
    ran = await running
    assert ran.code == 0, ran
    statuses = [r["status"] for r in ran.json_lines()]
    assert statuses == ["pending_approval", "ok"]
    # While it waited, stderr named the approval and where to decide it.
    url = f"http://127.0.0.1:{settings.review_port}/approvals/{approval_id}"  # its own page
    assert f"pending approval {approval_id}: decide at {url}" in ran.err, ran.err
    assert f"stream-adapter approvals decide {approval_id} --approve" in ran.err

    # Not decided within --wait: the pending reply is printed, exit code 3.
    short = await cli(
        settings, "call", "send_invoice", args, "--run-id", unique("run"), "--wait", "5"
    )
    assert short.code == ExitCode.PENDING, short
    assert [r["status"] for r in short.json_lines()] == ["pending_approval"]
    rows = (await cli(settings, "approvals", "list", "--state", "pending")).tsv()
    [row] = [r for r in rows if r["approval_id"] == short.json_lines()[0]["approval_id"]]
    assert row["state"] == "pending" and row["tool"] == "send_invoice"

    # Deciding one that is no longer pending: exit 5, nothing written.
    again = await cli(settings, "approvals", "decide", approval_id, "--deny", "--reviewer", "bo")
    assert again.code == ExitCode.NOT_PENDING, again
    assert again.err.startswith(f"Error (ApprovalConflict): {approval_id}: approval is ")


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
    typed = rows[boom.message_id]  # numbers as numbers, flags as booleans
    assert typed["attempts"] == 1 and typed["error_status"] == 500
    assert typed["retryable"] is False and isinstance(typed["partition"], int)
    only = await cli(settings, "dlq", "list", "--json", "--filter", "ToolNotFound")
    assert [row["message_id"] for row in only.json_lines()] == [missing.message_id]
    piped = await cli(settings, "dlq", "list")  # not a terminal: tab-separated, header first
    assert {row["message_id"]: row["error_kind"] for row in piped.tsv()} == {
        boom.message_id: "ToolFailed",
        missing.message_id: "ToolNotFound",
    }
    assert piped.err == f"2 dead letter(s) in {settings.dlq_topic}\n"
    shown = await asyncio.to_thread(terminal, settings, "dlq", "list", columns=50)
    assert boom.message_id in shown and missing.message_id in shown, shown


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
    assert ran.out.splitlines()[0] == (
        f"replayed 1 of 1 dead letter(s) to {settings.calls_topic}; skipped 0"
    )
    ok = await client.reply_for(status="ok", run_id=flaky.run_id)
    assert (ok["run_id"], ok["call_id"]) == (flaky.run_id, flaky.call_id)
    assert (flaky.run_id, flaky.call_id) == derive_ids(
        flaky.message_id, settings.source, client.scope
    )
    assert ok["result"] == {"attempts": 5}
    assert len(client.replies_for(run_id=missing.run_id)) == 1  # --filter left it alone

    everything = await cli(settings, "dlq", "replay", "--limit", "5")
    assert everything.code == 0, everything
    assert "skipped 1: not from the calls topic" in everything.out
    # flaky (ok again) and the unknown tool; the decision is skipped
    assert "replayed 2 of 3 dead letter(s)" in everything.out
    await client.wait_replies(
        lambda rs: len([r for r in rs if r["run_id"] == missing.run_id]) == 2,
        what="the replayed unknown-tool call's error reply",
    )
    again = client.replies_for(run_id=missing.run_id)
    assert {(r["call_id"], r["error"]["kind"]) for r in again} == {
        (missing.call_id, "ToolNotFound")
    }
