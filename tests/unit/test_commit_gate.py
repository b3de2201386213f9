"""Exactly-once output sections: outputs leave in offset order; a commit waits for open ones."""

from __future__ import annotations

import asyncio

from stream_adapter.stream.engine.commits.gate import CommitGate, OutputSection


async def test_a_message_without_outputs_does_not_let_the_next_pass_an_earlier_one() -> None:
    gate = CommitGate()
    first = OutputSection(gate, None)
    quiet = OutputSection(gate, first.done)  # a park request: nothing in the transaction
    third = OutputSection(gate, quiet.done)
    quiet.close()
    opened = asyncio.ensure_future(third.open())
    await asyncio.sleep(0.01)
    assert not quiet.done.done() and not opened.done()
    await first.open()
    first.close()
    await asyncio.wait_for(opened, 1.0)
    assert quiet.done.done()
    third.close()
    assert third.done.done()


async def test_a_commit_waits_for_open_sections_and_holds_new_ones() -> None:
    gate = CommitGate()
    section = OutputSection(gate, None)
    await section.open()
    committed = asyncio.Event()

    async def commit() -> None:
        async with gate.exclusive():
            committed.set()

    task = asyncio.ensure_future(commit())
    await asyncio.sleep(0.01)
    assert not committed.is_set()
    later = OutputSection(gate, None)
    entering = asyncio.ensure_future(later.open())
    await asyncio.sleep(0.01)
    assert not entering.done()  # held while the commit is pending
    section.close()
    await asyncio.wait_for(task, 1.0)
    await asyncio.wait_for(entering, 1.0)
    assert committed.is_set()
    later.close()
