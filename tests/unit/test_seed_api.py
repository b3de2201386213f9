"""The upstream documents' call shapes work as written: Envelope, timeout=, Backend, pubsub."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from stream_adapter import (
    Backend,
    Envelope,
    Executor,
    MemoryApprovalStore,
    ToolRegistry,
    ToolTimeout,
    build_backend,
    handle_envelope,
    parse_envelope,
    record_decision,
    run_sync,
    tool_handler,
)
from stream_adapter.hosts.backend import executor_of

ROOT = Path(__file__).parent.parent.parent


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("STREAM_ADAPTER_DEMO_LEDGER", str(path))
    return path


def test_envelope_is_a_frozen_dataclass() -> None:
    env = parse_envelope(b'{"tool":"t","arguments":{"a":1}}', message_id="m", source="s")
    assert dataclasses.is_dataclass(env)
    moved = dataclasses.replace(env, tool="u")
    assert (moved.tool, moved.run_id, moved.call_id) == ("u", env.run_id, env.call_id)
    assert env != tuple(getattr(env, f.name) for f in dataclasses.fields(env))
    assert env == dataclasses.replace(env)
    with pytest.raises(dataclasses.FrozenInstanceError):
        env.tool = "x"  # type: ignore[misc]
    positional = Envelope("t", {}, "r", "c", None, "m", "s")
    assert not positional.is_resume and positional.to_payload()["run_id"] == "r"


async def test_timeout_is_accepted_as_the_tool_option() -> None:
    registry = ToolRegistry()

    @registry.tool(timeout=0.05)
    async def slow() -> None:
        await asyncio.sleep(5)

    @registry.tool(timeout=3)
    def quick() -> int:
        return 1

    assert registry.get("slow").timeout_s == 0.05 and registry.get("quick").timeout_s == 3
    with pytest.raises(ToolTimeout):
        await handle_envelope(Executor(registry), {"tool": "slow", "arguments": {}})
    with pytest.raises(TypeError, match="not both"):
        registry.tool(timeout=1, timeout_s=2)


async def test_record_decision_takes_the_backend() -> None:
    registry = ToolRegistry()

    @registry.tool(confirm=True)
    async def pay(amount: int) -> dict[str, int]:
        return {"paid": amount}

    backend = build_backend(registry, store=MemoryApprovalStore(), tools={"pay"})
    assert isinstance(backend, Backend) and backend.tools == frozenset({"pay"})
    assert backend.origin == "queue" and backend.store is backend.executor.store
    parked = await handle_envelope(backend.executor, {"tool": "pay", "arguments": {"amount": 3}})
    status, record = await record_decision(
        backend, parked["approval_id"], reviewer="ann", approved=True
    )
    assert status == 200 and record["state"] == "approved" and record["reviewer"] == "ann"
    done = await handle_envelope(backend.executor, {"approval_id": parked["approval_id"]})
    assert done["result"] == {"paid": 3}
    status, _ = await record_decision(backend, "appr_missing", reviewer="ann", approved=True)
    assert status == 404
    with pytest.raises(TypeError, match="Executor or a Backend"):
        executor_of("nope")  # type: ignore[arg-type]


def test_build_backend_from_the_topology_with_only_a_store(ledger: Path) -> None:
    """``build_backend(store=...)``: the configured topology's tools, the store given."""
    store = MemoryApprovalStore()
    backend = build_backend(store=store)
    assert backend.store is store
    from topologies.demo import TOOLS

    assert backend.tools == TOOLS
    handler = tool_handler(backend.executor, tools=TOOLS, timeout=30)
    invoice = {"tool": "send_invoice", "arguments": {"customer": "c", "amount_cents": 9}}
    parked = handler(invoice)
    assert parked["status"] == "pending_approval"
    reply = run_sync(
        record_decision(backend, parked["approval_id"], reviewer="ann", approved=True), timeout=30
    )
    assert reply[0] == 200
    assert handler({"approval_id": parked["approval_id"]})["status"] == "ok"
    assert handler({"approval_id": parked["approval_id"]})["status"] == "already_done"
    assert len(ledger.read_text().splitlines()) == 1
    with pytest.raises(Exception, match="admin_reset"):
        handler({"tool": "admin_reset", "arguments": {}})


def test_build_backend_reads_the_topology_setting(tmp_path: Path) -> None:
    module = f"topo_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from stream_adapter import Executor, ToolRegistry\n"
        "registry = ToolRegistry()\n"
        "@registry.tool\n"
        "async def hello() -> str:\n"
        "    return 'hi'\n"
        "@registry.tool\n"
        "async def hidden() -> str:\n"
        "    return 'no'\n"
        "TOOLS = frozenset({'hello'})\n"
        "def build_executor(store=None):\n"
        "    return Executor(registry, store)\n"
    )
    code = (
        "import asyncio, json\n"
        "from stream_adapter import ToolNotFound, build_backend, handle_envelope\n"
        "b = build_backend(origin='fn')\n"
        "r = asyncio.run(handle_envelope(b.executor, {'tool': 'hello', 'arguments': {}}))\n"
        "try:\n"
        "    asyncio.run(handle_envelope(b.executor, {'tool': 'hidden', 'arguments': {}}))\n"
        "except ToolNotFound:\n"
        "    hidden = 'refused'\n"
        "print(json.dumps([r['result'], hidden, b.origin]))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
        "STREAM_ADAPTER_TOPOLOGY": module,
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == ["hi", "refused", "fn"]


def test_a_topology_without_build_executor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="build_executor"):
        build_backend(topology="json")


async def test_examples_backend_is_built_once_and_serves_handle_envelope() -> None:
    from examples.backend import backend, executor

    assert backend() is backend() and executor() is backend().executor
    reply: dict[str, Any] = await handle_envelope(
        backend().executor, {"tool": "add", "arguments": {"a": 1, "b": 2}}
    )
    assert reply["result"] == 3
