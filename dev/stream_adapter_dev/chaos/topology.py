"""The demo topology as the chaos runs serve it: its confirm tools journal each run.

Each run of `send_invoice` or `wire_funds` spends the simulated external-API latency
(`STREAM_ADAPTER_DEMO_TOOL_LATENCY_S`) half before its effect (the demo's ledger line) and
half after, and appends start, effect and end lines to the journal `STREAM_ADAPTER_DEMO_RUNS`
names, with the process id: `running.RunJournal` reads which process ran which approved call,
and whether a run cut off by a kill got as far as its effect. The other tools are the demo's.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry, current_call
from stream_adapter.settings import Settings
from stream_adapter.stream.app import build_app
from topologies import demo

from .running import EFFECT, END, LATENCY_ENV, RUNS_ENV, START

JOURNALLED = ("send_invoice", "wire_funds")


def tool_latency_s() -> float:
    """The confirm tools' simulated external-API latency (0 unless the environment sets it)."""
    return max(0.0, float(os.environ.get(LATENCY_ENV) or 0.0))


def _append_line(path: Path, line: str) -> None:
    """Append line, written through to the OS (it outlives a SIGKILL of this process); the file
    lock keeps lines of processes sharing the journal whole."""
    with path.open("a") as out:
        fcntl.flock(out.fileno(), fcntl.LOCK_EX)
        try:
            out.write(line + "\n")
            out.flush()
        finally:
            fcntl.flock(out.fileno(), fcntl.LOCK_UN)


def journalled(tool: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn as one journalled run: start, half the latency, the effect, the other half, end."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        runs = os.environ.get(RUNS_ENV)
        journal = Path(runs) if runs else None
        fields = {"tool": tool, "call_id": current_call().call_id, "run": uuid.uuid4().hex[:12]}
        half_s = tool_latency_s() / 2

        def note(event: str) -> None:
            if journal is not None:
                line = {"event": event, **fields, "pid": os.getpid(), "at": time.time()}
                _append_line(journal, json.dumps(line))

        note(START)
        time.sleep(half_s)
        result = fn(*args, **kwargs)
        note(EFFECT)
        time.sleep(half_s)
        note(END)
        return result

    return run


registry = ToolRegistry()
for _name in demo.registry.names():
    _tool = demo.registry.get(_name)
    if _name in JOURNALLED:
        _tool = dataclasses.replace(_tool, fn=journalled(_name, _tool.fn))
    registry.register(_tool)


def build_executor() -> Executor:
    """An executor over these tools (in-memory approvals), limited to the demo's TOOLS."""
    return Executor(registry, MemoryApprovalStore(), tools=demo.TOOLS)


settings = Settings()
app = build_app(settings, build_executor(), tools=demo.TOOLS)
