"""The Celery recipe with a real Redis broker and real `celery worker` processes.

Each test gets its own queue and approval-store namespace on the session's redis-server. The
producer here is a plain Celery client that only knows the task's name, as a separate service
would be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.result import AsyncResult

from examples.backend import store_from_url
from stream_adapter import build_backend, record_decision
from stream_adapter.core.ids import derive_ids

ROOT = Path(__file__).parent.parent.parent
TASK = "stream_adapter.run_envelope"
RESULT_TIMEOUT_S = 90.0


@dataclass
class Setup:
    """One test's broker, queue, store and ledger, and a producer client."""

    env: dict[str, str]
    queue: str
    store_url: str
    ledger: Path
    client: Celery

    def send(self, payload: dict[str, Any]) -> AsyncResult:
        return self.client.send_task(TASK, args=[payload], queue=self.queue)

    def ledger_lines(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]


@pytest.fixture
def setup(redis_server: str, tmp_path: Path) -> Iterator[Setup]:
    broker = redis_server.rsplit("/", 1)[0] + "/1"  # db 1: apart from the approval stores
    queue = f"tool-calls-{uuid.uuid4().hex[:12]}"
    namespace = f"celery-{uuid.uuid4().hex[:12]}:"
    store_url = f"{redis_server}#celery-{uuid.uuid4().hex[:12]}"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STREAM_ADAPTER_CELERY_BROKER": broker,
        "STREAM_ADAPTER_CELERY_BACKEND": broker,
        "STREAM_ADAPTER_CELERY_QUEUE": queue,
        "STREAM_ADAPTER_CELERY_NAMESPACE": namespace,
        "STREAM_ADAPTER_CELERY_VISIBILITY_TIMEOUT_S": "3",
        "STREAM_ADAPTER_APPROVAL_STORE": store_url,
        "STREAM_ADAPTER_DEMO_LEDGER": str(tmp_path / "ledger.jsonl"),
    }
    client = Celery("producer", broker=broker, backend=broker)
    client.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_transport_options={"global_keyprefix": namespace},
    )
    yield Setup(env, queue, store_url, tmp_path / "ledger.jsonl", client)
    client.close()


@pytest.fixture
def workers(setup: Setup, tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start `celery worker` processes (prefork, two children each); all are stopped after.

    Their logs go to files in the test's temp dir and are printed when the test fails.
    """
    started: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        log = tmp_path / f"worker-{name}.log"
        logs.append(log)
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "celery", "-A", "examples.celery_app", "worker"),
                    *("--loglevel", "INFO", "--pool", "prefork", "--concurrency", "2"),
                    *("-n", f"{name}-{uuid.uuid4().hex[:6]}@%h", "-Q", setup.queue),
                    *("--without-gossip", "--without-mingle", "--without-heartbeat"),
                ],
                env=setup.env,
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the children die with it
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_group(proc)
    for log in logs:
        print(f"--- {log.name}\n{log.read_text()[-4000:]}")


def kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)


def wait_started(result: AsyncResult) -> int:
    """Wait for the task to be running; return the pid of the process running it."""
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while time.monotonic() < deadline:
        # One read of the backend per poll: `result.state` reads it again at each access, so
        # a task starting between two reads would look neither pending nor started.
        meta = result.backend.get_task_meta(result.id)
        state, info = meta["status"], meta["result"]
        if state == "STARTED" and isinstance(info, dict):
            return int(info["pid"])
        assert state in ("PENDING", "STARTED"), state
        time.sleep(0.02)
    raise AssertionError("the task never started")


def approve(store_url: str, approval_id: str) -> int:
    async def decide() -> int:
        store = store_from_url(store_url)
        try:
            backend = build_backend(store=store, topology="topologies.demo")
            status, _ = await record_decision(backend, approval_id, reviewer="ann", approved=True)
            return status
        finally:
            await store.aclose()  # type: ignore[attr-defined]

    return asyncio.run(decide())


def test_calls_run_retry_and_fail_by_kind(setup: Setup, workers: Any) -> None:
    workers("w")
    added = setup.send({"tool": "add", "arguments": {"a": 2, "b": 3}})
    flaky = setup.send({"tool": "flaky", "arguments": {"key": uuid.uuid4().hex, "fail_times": 2}})
    hidden = setup.send({"tool": "admin_reset", "arguments": {}})
    assert added.get(timeout=RESULT_TIMEOUT_S)["result"] == 5
    reply = flaky.get(timeout=RESULT_TIMEOUT_S)
    assert reply["result"] == {"attempts": 3}  # retried twice, as the same task
    assert (reply["run_id"], reply["call_id"]) == derive_ids(flaky.id, "celery")
    with pytest.raises(Exception) as caught:
        hidden.get(timeout=RESULT_TIMEOUT_S)
    assert type(caught.value).__name__ == "ToolNotFound" and hidden.state == "FAILURE"


def test_a_confirm_call_parks_and_is_resumed_once(setup: Setup, workers: Any) -> None:
    workers("w")
    call = {"tool": "send_invoice", "arguments": {"customer": "acme", "amount_cents": 700}}
    parked = setup.send(call).get(timeout=RESULT_TIMEOUT_S)
    assert parked["status"] == "pending_approval"
    early = setup.send({"approval_id": parked["approval_id"]}).get(timeout=RESULT_TIMEOUT_S)
    assert early["status"] == "pending_approval" and setup.ledger_lines() == []
    assert approve(setup.store_url, parked["approval_id"]) == 200
    resumes = [setup.send({"approval_id": parked["approval_id"]}) for _ in range(3)]
    statuses = sorted(r.get(timeout=RESULT_TIMEOUT_S)["status"] for r in resumes)
    assert statuses == ["already_done", "already_done", "ok"]
    assert [line["call_id"] for line in setup.ledger_lines()] == [parked["call_id"]]


def test_a_call_whose_process_dies_is_delivered_again_as_the_same_call(
    setup: Setup, workers: Any
) -> None:
    workers("w")
    result = setup.send({"tool": "sleep", "arguments": {"seconds": 1.5}})
    pid = wait_started(result)
    os.kill(pid, signal.SIGKILL)  # the pool process running it dies mid-call
    reply = result.get(timeout=RESULT_TIMEOUT_S)  # acked late: requeued, run again
    assert reply["status"] == "ok" and reply["result"] == {"slept": 1.5}
    assert (reply["run_id"], reply["call_id"]) == derive_ids(result.id, "celery")


def test_a_killed_worker_s_call_goes_to_another_worker(setup: Setup, workers: Any) -> None:
    first = workers("first")
    result = setup.send({"tool": "sleep", "arguments": {"seconds": 1.5}})
    wait_started(result)
    kill_group(first)  # the whole worker, main process included: nobody acks or requeues
    workers("second")  # past the visibility timeout it takes the message over
    reply = result.get(timeout=RESULT_TIMEOUT_S)
    assert reply["result"] == {"slept": 1.5}
    assert (reply["run_id"], reply["call_id"]) == derive_ids(result.id, "celery")
