"""The walking skeleton: a call produced with aiokafka is answered by the worker process."""

from __future__ import annotations

from tests.harness import Client, WorkerProcess


async def test_echo_call_gets_ok_reply(worker: WorkerProcess, client: Client) -> None:
    partition, offset = await client.send({"tool": "echo", "arguments": {"x": 1}}, key=b"run-1")
    reply = await client.reply_for(status="ok", tool="echo")
    assert reply["result"] == {"x": 1}
    assert reply["run_id"].startswith("run_") and reply["call_id"].startswith("call_")
    headers = client.reply_headers[client.replies.index(reply)]
    assert headers["message-id"] == client.message_id(partition, offset).encode()
    assert headers["content-type"] == b"application/json"
