"""contract §5, §6 and §10 rows end to end through one worker process: statuses, kinds, retries."""

from __future__ import annotations

import orjson
import pytest

from tests.harness import Client, WorkerProcess, dead_letters, unique

pytestmark = pytest.mark.usefixtures("shared_worker")


def _error(reply: dict) -> dict:
    assert reply["status"] == "error", reply
    return reply["error"]


async def test_ok_reply_carries_result_and_derived_ids(shared_client: Client) -> None:
    sent = await shared_client.call("add", {"a": 2, "b": 3}, key=b"k")
    reply = await shared_client.reply_for(run_id=sent.run_id)
    assert reply == {
        "status": "ok",
        "tool": "add",
        "run_id": sent.run_id,
        "call_id": sent.call_id,
        "result": 5,
    }


async def test_given_ids_are_kept(shared_client: Client) -> None:
    run_id, call_id = unique("run"), unique("call")
    await shared_client.call("echo", {"y": [1, 2]}, run_id=run_id, call_id=call_id)
    reply = await shared_client.reply_for(run_id=run_id)
    assert reply["call_id"] == call_id and reply["result"] == {"y": [1, 2]}


@pytest.mark.parametrize(
    ("payload", "status"),
    [
        (b"{not json", 400),
        (b"\xff\xfe", 400),
        (b'{"tool": "echo", "arguments": {}, "approved": true}', 400),
        (b'{"tool": "echo", "arguments": [1]}', 400),
        (b"[]", 400),
        (b'{"tool": "echo", "arguments": {"x": NaN}}', 400),
    ],
)
async def test_broken_envelope_gets_error_reply_with_derived_ids(
    shared_client: Client, payload: bytes, status: int
) -> None:
    partition, offset = await shared_client.send(payload, key=b"broken")
    sent = shared_client.sent(partition, offset)
    error = _error(await shared_client.reply_for(run_id=sent.run_id))
    assert error["kind"] == "ToolUsageError" and error["status"] == status
    assert error["retryable"] is False


async def test_bad_arguments_are_422(shared_client: Client) -> None:
    sent = await shared_client.call("add", {"a": 1, "b": "2"})
    error = _error(await shared_client.reply_for(run_id=sent.run_id))
    assert (error["kind"], error["status"]) == ("ToolUsageError", 422)


@pytest.mark.parametrize("tool", ["no_such_tool", "admin_reset"])
async def test_unknown_and_disallowed_tools_read_the_same(shared_client: Client, tool: str) -> None:
    sent = await shared_client.call(tool)
    error = _error(await shared_client.reply_for(run_id=sent.run_id))
    assert (error["kind"], error["status"]) == ("ToolNotFound", 404)
    assert "admin_reset must never run" not in orjson.dumps(error).decode()


async def test_tool_failure_is_500_not_retryable(shared_client: Client) -> None:
    sent = await shared_client.call("boom")
    error = _error(await shared_client.reply_for(run_id=sent.run_id))
    assert (error["kind"], error["status"], error["retryable"]) == ("ToolFailed", 500, False)


async def test_timeout_is_retried_then_504(shared_client: Client) -> None:
    sent = await shared_client.call("sleep", {"seconds": 2.5})
    error = _error(await shared_client.reply_for(run_id=sent.run_id, timeout_s=30))
    assert (error["kind"], error["status"], error["retryable"]) == ("ToolTimeout", 504, True)


async def test_retryable_failure_is_retried_in_place(shared_client: Client) -> None:
    sent = await shared_client.call("flaky", {"key": unique("f"), "fail_times": 2})
    reply = await shared_client.reply_for(run_id=sent.run_id)
    assert reply["status"] == "ok" and reply["result"] == {"attempts": 3}


async def test_exhausted_retries_give_error_reply_and_dead_letter(
    shared_client: Client, shared_worker: WorkerProcess
) -> None:
    key = unique("f")
    sent = await shared_client.call("flaky", {"key": key, "fail_times": 10}, key=b"dlq-key")
    error = _error(await shared_client.reply_for(run_id=sent.run_id))
    assert error["kind"] == "ToolFailed" and error["retryable"] is True

    settings = shared_worker.settings
    letters = await dead_letters(settings)
    mine = [m for m in letters if dict(m.headers)["message-id"] == sent.message_id.encode()]
    assert len(mine) == 1
    letter = mine[0]
    headers = dict(letter.headers)
    assert letter.key == b"dlq-key"
    assert orjson.loads(letter.value) == {
        "tool": "flaky",
        "arguments": {"key": key, "fail_times": 10},
    }
    assert headers["error-kind"] == b"ToolFailed"
    assert headers["error-status"] == b"500"
    assert headers["retryable"] == b"true"
    assert headers["attempts"] == b"3"
    assert headers["source-topic"] == settings.calls_topic.encode()
    assert headers["source-partition"] == str(sent.partition).encode()
    assert headers["source-offset"] == str(sent.offset).encode()
    assert headers["failed-at"].endswith(b"Z")
