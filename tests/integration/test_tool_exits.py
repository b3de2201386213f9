"""A worker answers tools that raise SystemExit, KeyboardInterrupt or CancelledError with a
ToolFailed reply and keeps serving; a real SIGINT or SIGTERM still stops it."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.harness import Client, WorkerProcess
from tests.topologies.exits import EXITS

STOP_S = 30.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
async def test_exits_fail_their_call_and_a_real_signal_still_stops_the_worker(
    worker_factory: type[WorkerProcess], client: Client, sig: signal.Signals
) -> None:
    worker = worker_factory(STREAM_ADAPTER_TOPOLOGY="tests.topologies.exits")  # type: ignore[call-arg]
    await worker.ready()
    names = [f"{name}_{form}" for name in EXITS for form in ("async", "inline", "sync")]
    sent = {name: await client.call(name, key=name.encode()) for name in names}
    after = await client.call("add", {"a": 2, "b": 3}, key=b"after")
    for name, call in sent.items():
        reply = await client.reply_for(call_id=call.call_id, timeout_s=60)
        assert reply["status"] == "error", (name, reply)
        assert reply["error"]["kind"] == "ToolFailed", (name, reply)
        assert reply["error"]["retryable"] is False, (name, reply)
    assert (await client.reply_for(call_id=after.call_id, status="ok"))["result"] == 5
    assert worker.proc is not None
    worker.proc.send_signal(sig)
    try:
        code = worker.proc.wait(STOP_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"worker ignored {sig.name}:\n{worker.log_text()[-4000:]}") from None
    assert code == 0, worker.log_text()[-4000:]
