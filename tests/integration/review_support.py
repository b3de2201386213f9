"""Running the review service as a real process (`stream-adapter review`) for integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import aiohttp

from stream_adapter.settings import Settings
from stream_adapter.stream import faults
from stream_adapter_dev.broker.local import free_port
from tests.harness import ROOT, Client, CliProcess, WorkerProcess, unique, wait_for


def cli(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `stream-adapter ARGS` with the test's settings; returns the finished process."""
    full = {**os.environ, **settings.to_env(), **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "stream_adapter", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def add_reviewer(settings: Settings, name: str) -> str:
    """`stream-adapter reviewers add NAME --token-only`: the new reviewer's token."""
    done = cli(settings, "reviewers", "add", name, "--token-only")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass
class ReviewProcess(CliProcess):
    """`stream-adapter review` on a free port: ready once its view has caught up."""

    command: ClassVar[str] = "review"
    ready_line: ClassVar[str] = "review service listening on"

    port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def env(self) -> dict[str, str]:
        return {**super().env(), "STREAM_ADAPTER_REVIEW_PORT": str(self.port)}


class Api:
    """The review service's JSON API with one reviewer's bearer token."""

    def __init__(self, session: aiohttp.ClientSession, base: str, token: str) -> None:
        self.session = session
        self.base = base.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"}

    async def request(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.session.request(
            method, self.base + path, headers=self.headers, **kwargs
        ) as response:
            return response.status, await response.json(content_type=None)

    async def record(self, approval_id: str) -> dict[str, Any]:
        status, body = await self.request("GET", f"/api/approvals/{approval_id}")
        assert status == 200, body
        return dict(body)

    async def wait_listed(self, approval_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until the service's view has the approval; returns its record."""

        async def check() -> dict[str, Any] | None:
            status, body = await self.request("GET", f"/api/approvals/{approval_id}")
            return dict(body) if status == 200 else None

        found: dict[str, Any] = await wait_for(
            check, timeout_s=timeout_s, what=f"the view to list {approval_id}"
        )
        return found


async def park_invoice(
    client: Client,
    run_id: str,
    customer: str = "acme",
    *,
    amount_cents: int = 1250,
    key: bytes | None = None,
    call_id: str | None = None,
) -> str:
    """Produce a real send_invoice call and wait for its pending_approval reply: the approval_id."""
    await send_invoice(
        client, run_id, customer, amount_cents=amount_cents, key=key, call_id=call_id
    )
    reply = await client.reply_for(status="pending_approval", run_id=run_id)
    return str(reply["approval_id"])


async def send_invoice(
    client: Client,
    run_id: str,
    customer: str = "acme",
    *,
    amount_cents: int = 1250,
    key: bytes | None = None,
    call_id: str | None = None,
) -> None:
    """Produce a send_invoice call (keyed by its run id unless key is given)."""
    await client.send(
        {
            "tool": "send_invoice",
            "arguments": {"customer": customer, "amount_cents": amount_cents},
            "run_id": run_id,
            "call_id": call_id or f"{run_id}-call",
        },
        key=key if key is not None else run_id.encode(),
    )


def ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


SHORT_RUNS = {"STREAM_ADAPTER_MAX_RUN_S": "1", "STREAM_ADAPTER_RETRY_ATTEMPTS": "1"}
"""A run of a tool without a timeout is surely over a second after it started: "it did not
run" is allowed soon after its worker died."""


async def approve_and_crash(
    worker_factory: Callable[..., WorkerProcess], client: Client, name: str, account: str
) -> tuple[str, str, str]:
    """An approved wire_funds call (not idempotent) whose worker dies right after the call's
    running mark is durable, before the tool starts: (approval_id, run_id, call_id).

    The next worker meets the run with no outcome and marks it unknown, for a person."""
    worker = worker_factory(name=name, STREAM_ADAPTER_CRASH_AT=faults.RUNNING, **SHORT_RUNS)
    await worker.ready()
    run_id, call_id = unique("run"), unique("call")
    await client.call(
        "wire_funds", {"account": account, "amount_cents": 5}, run_id=run_id, call_id=call_id
    )
    pending = await client.reply_for(status="pending_approval", run_id=run_id)
    await client.decide(pending["approval_id"], True)

    def dead() -> bool:
        assert worker.proc is not None
        return worker.proc.poll() is not None

    await wait_for(dead, timeout_s=60, what=f"{worker.name} to die")
    return str(pending["approval_id"]), run_id, call_id
