"""The chaos topology's run journal, the evidence a chaos kill landed while an approved tool ran:
each confirm tool's run writes its start, effect and end with its process id; a real process
SIGKILLed mid-run leaves a run with no end, before or after its effect as the ledger shows."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stream_adapter_dev.chaos import running
from stream_adapter_dev.chaos.report import ledger_counts
from stream_adapter_dev.chaos.running import RunJournal
from stream_adapter_dev.chaos.topology import JOURNALLED, build_executor, registry
from topologies import demo


def test_the_chaos_topology_serves_the_demo_s_tools_as_the_demo_describes_them() -> None:
    assert registry.names() == demo.registry.names()
    for name in registry.names():
        ours, theirs = registry.get(name), demo.registry.get(name)
        assert ours.args_model.model_json_schema() == theirs.args_model.model_json_schema()
        assert (ours.confirm, ours.idempotent, ours.timeout_s, ours.fn.__doc__) == (
            theirs.confirm,
            theirs.idempotent,
            theirs.timeout_s,
            theirs.fn.__doc__,
        )
    journalled = {n for n in registry.names() if registry.get(n).fn is not demo.registry.get(n).fn}
    assert journalled == set(JOURNALLED) == {"send_invoice", "wire_funds"}


async def test_the_demo_s_own_confirm_tools_keep_no_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_path, ledger = tmp_path / "runs.jsonl", tmp_path / "ledger.jsonl"
    monkeypatch.setenv(running.RUNS_ENV, str(journal_path))
    monkeypatch.setenv(demo.LEDGER_ENV, str(ledger))
    await demo.build_executor().run_tool(
        demo.registry.get("wire_funds"),
        {"account": "a", "amount_cents": 1},
        run_id="run-1",
        call_id="call-1",
    )
    assert ledger_counts(ledger) == {"call-1": 1} and not journal_path.exists()


@pytest.mark.parametrize("tool", ["send_invoice", "wire_funds"])
async def test_a_run_writes_start_effect_end_around_its_latency(
    tool: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal_path, ledger = tmp_path / "runs.jsonl", tmp_path / "ledger.jsonl"
    monkeypatch.setenv(running.RUNS_ENV, str(journal_path))
    monkeypatch.setenv(demo.LEDGER_ENV, str(ledger))
    monkeypatch.setenv(running.LATENCY_ENV, "0.2")
    arguments = (
        {"customer": "c", "amount_cents": 1}
        if tool == "send_invoice"
        else {"account": "a", "amount_cents": 1}
    )
    started = time.monotonic()
    await build_executor().run_tool(registry.get(tool), arguments, run_id="run-1", call_id="call-1")
    assert time.monotonic() - started >= 0.2  # the latency is spent, half on each side
    lines = [json.loads(line) for line in journal_path.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["start", "effect", "end"]
    assert {(line["tool"], line["call_id"], line["pid"]) for line in lines} == {
        (tool, "call-1", os.getpid())
    }
    assert len({line["run"] for line in lines}) == 1
    journal = RunJournal(journal_path)
    journal.refresh()
    (run,) = journal.runs.values()
    assert run.effect and run.ended and journal.running([os.getpid()]) == []
    assert ledger_counts(ledger) == {"call-1": 1}


def test_a_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "runs.jsonl"
    start = {"event": "start", "tool": "wire_funds", "call_id": "c", "run": "r", "pid": 7}
    line = json.dumps({**start, "at": 1.0}) + "\n"
    path.write_text(line[:20])
    journal = RunJournal(path)
    journal.refresh()
    assert journal.runs == {}
    path.write_text(line)
    journal.refresh()
    assert [r.call_id for r in journal.running([7], "wire_funds")] == ["c"]
    assert journal.running([8]) == [] and journal.running([7], "send_invoice") == []


_RUN_ONE = """
import asyncio, sys
from stream_adapter_dev.chaos.topology import build_executor, registry

asyncio.run(build_executor().run_tool(
    registry.get("wire_funds"), {"account": "a", "amount_cents": 1},
    run_id="run-1", call_id=sys.argv[1],
))
"""


@pytest.mark.parametrize("after_effect", [False, True])
def test_a_process_killed_mid_run_leaves_a_run_cut_off_before_or_after_its_effect(
    after_effect: bool, tmp_path: Path
) -> None:
    journal_path, ledger = tmp_path / "runs.jsonl", tmp_path / "ledger.jsonl"
    env = {
        **os.environ,
        running.RUNS_ENV: str(journal_path),
        demo.LEDGER_ENV: str(ledger),
        running.LATENCY_ENV: "30",
    }
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", _RUN_ONE, "call-1"], env=env, cwd=root)
    journal = RunJournal(journal_path)
    deadline = time.monotonic() + 60
    try:
        while not [r for r in journal.running([proc.pid]) if r.effect == after_effect]:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
            journal.refresh()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    journal.refresh()
    (cut,) = journal.cut_off(proc.pid)
    assert (cut.call_id, cut.tool, cut.effect, cut.ended) == (
        "call-1",
        "wire_funds",
        after_effect,
        False,
    )
    assert ledger_counts(ledger).get("call-1", 0) == int(after_effect)
    assert journal.running([proc.pid]) == []  # cut off: never found running again
