"""Approval stores: park once, first decision wins, an approved call runs exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from stream_adapter import (
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalState,
    Executor,
    MemoryApprovalStore,
    SQLiteApprovalStore,
    ToolRegistry,
    handle_envelope,
    record_decision,
)
from stream_adapter.core.approvals import (
    MAX_RUNS,
    ApprovalRecord,
    ApprovalStore,
    Decision,
    Resolution,
    new_record,
)
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.hosts.stores._cas import CompareAndSetStore

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ApprovalStore]:
    if request.param == "memory":
        yield MemoryApprovalStore()
    else:
        sqlite = SQLiteApprovalStore(tmp_path / "approvals.db")
        yield sqlite
        sqlite.close()


def a_record(message_id: str = "m") -> Any:
    env = parse_envelope(b'{"tool":"pay","arguments":{"n":1}}', message_id=message_id)
    return new_record(env, "pay", origin="queue")


async def test_protocol_is_met(store: ApprovalStore) -> None:
    assert isinstance(store, ApprovalStore)


async def test_park_is_insert_if_absent(store: ApprovalStore) -> None:
    rec = a_record()
    assert await store.park(rec) == rec
    decided = await store.decide(
        rec.approval_id, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    assert await store.park(rec) == decided
    assert await store.get(rec.approval_id) == decided
    assert await store.get("missing") is None


async def test_decide(store: ApprovalStore) -> None:
    rec = await store.park(a_record())
    yes = Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    no = Decision(approval_id=rec.approval_id, approved=False, reviewer="bob")
    assert (await store.decide(rec.approval_id, yes)).state is ApprovalState.APPROVED
    with pytest.raises(ApprovalConflict):
        await store.decide(rec.approval_id, no)
    assert (await store.get(rec.approval_id)).reviewer == "ann"  # type: ignore[union-attr]
    with pytest.raises(ApprovalNotFound):
        await store.decide("missing", yes)


async def test_claim_and_finish(store: ApprovalStore) -> None:
    rec = await store.park(a_record())
    assert (await store.claim(rec.approval_id)) == (rec, False)
    await store.decide(
        rec.approval_id, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    running, won = await store.claim(rec.approval_id)
    assert won and running.state is ApprovalState.RUNNING
    assert (await store.claim(rec.approval_id))[1] is False
    done = await store.finish(rec.approval_id, {"status": "ok"})
    assert done.state is ApprovalState.DONE and done.reply == {"status": "ok"}
    with pytest.raises(ApprovalConflict):
        await store.finish(rec.approval_id, {"status": "ok"})
    with pytest.raises(ApprovalNotFound):
        await store.claim("missing")


async def test_reclaim_reruns_a_running_record_up_to_max_runs(store: ApprovalStore) -> None:
    rec = await store.park(a_record())
    assert (await store.reclaim(rec.approval_id))[1] is False  # pending: nothing to run again
    await store.decide(
        rec.approval_id, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    assert (await store.reclaim(rec.approval_id))[1] is False  # approved: claim, not reclaim
    running, _ = await store.claim(rec.approval_id)
    assert running.runs == 1
    for runs in range(2, MAX_RUNS + 1):
        again, won = await store.reclaim(rec.approval_id)
        assert won and again.state is ApprovalState.RUNNING and again.runs == runs
    last, won = await store.reclaim(rec.approval_id)
    assert not won and last.runs == MAX_RUNS
    done = await store.finish(rec.approval_id, {"status": "ok"})
    assert done.state is ApprovalState.DONE and done.runs == MAX_RUNS
    assert (await store.reclaim(rec.approval_id))[1] is False


async def _unknown(store: ApprovalStore) -> Any:
    """A record whose (non-idempotent) run died: approved, claimed, then given up."""
    rec = await store.park(a_record())
    await store.decide(
        rec.approval_id, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    assert (await store.give_up(rec.approval_id, idempotent=False, rerun_after_s=0))[1] is False
    await store.claim(rec.approval_id)
    # A run that may still be going (younger than rerun_after_s) is not given up.
    young, moved = await store.give_up(rec.approval_id, idempotent=False, rerun_after_s=3600)
    assert not moved and young.state is ApprovalState.RUNNING
    # An idempotent one with runs left is run again, not given up.
    assert (await store.give_up(rec.approval_id, idempotent=True, rerun_after_s=0))[1] is False
    unknown, moved = await store.give_up(rec.approval_id, idempotent=False, rerun_after_s=0)
    assert moved and unknown.state is ApprovalState.UNKNOWN and unknown.unknown_at
    assert (await store.give_up(rec.approval_id, idempotent=False, rerun_after_s=0))[1] is False
    assert [r.approval_id for r in await store.list(ApprovalState.UNKNOWN)] == [rec.approval_id]
    return unknown


async def test_resolve_ran_settles_an_unknown_outcome(store: ApprovalStore) -> None:
    rec = await _unknown(store)
    ran = Resolution(approval_id=rec.approval_id, resolution="ran", reviewer="bob", result=[1])
    done = await store.resolve(rec.approval_id, ran)
    assert done.state is ApprovalState.DONE and done.resolution == "ran"
    assert done.reply is not None and done.reply["status"] == "ok"
    assert done.reply["result"] == [1] and done.reply["resolved_by"] == "bob"
    assert await store.get(rec.approval_id) == done
    with pytest.raises(ApprovalConflict):  # only an unknown outcome is resolved
        await store.resolve(rec.approval_id, ran)
    with pytest.raises(ApprovalNotFound):
        await store.resolve("missing", ran)


async def test_resolve_not_run_approves_one_fresh_run(store: ApprovalStore) -> None:
    rec = await _unknown(store)
    not_run = Resolution(approval_id=rec.approval_id, resolution="not_run", reviewer="bob")
    approved = await store.resolve(rec.approval_id, not_run)
    assert approved.state is ApprovalState.APPROVED and approved.resolved_by == "bob"
    running, won = await store.claim(rec.approval_id)
    assert won and running.runs == 2 and running.resolution == "not_run"
    unknown, moved = await store.give_up(rec.approval_id, idempotent=False, rerun_after_s=0)
    assert moved and unknown.state is ApprovalState.UNKNOWN
    with pytest.raises(ApprovalConflict):  # "it did not run" starts it again once only
        await store.resolve(rec.approval_id, not_run)
    ran = Resolution(approval_id=rec.approval_id, resolution="ran", reviewer="bob")
    assert (await store.resolve(rec.approval_id, ran)).state is ApprovalState.DONE


def read_once(store: ApprovalStore, old: ApprovalRecord) -> bool:
    """Make a compare-and-set store's next read return old: a host that read the record,
    stalled, and writes only now (every store is one now; False for any that is not)."""
    if not isinstance(store, CompareAndSetStore):
        return False

    async def load(approval_id: str) -> ApprovalRecord | None:
        del store._load  # the next read is a real one again
        return old

    store._load = load  # type: ignore[method-assign]
    return True


async def test_after_not_run_neither_a_stale_nor_a_racing_host_starts_it_twice(
    store: ApprovalStore,
) -> None:
    rec = await store.park(a_record())
    first = await store.decide(
        rec.approval_id, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    await store.claim(rec.approval_id)
    await store.give_up(rec.approval_id, idempotent=False, rerun_after_s=0)
    not_run = Resolution(approval_id=rec.approval_id, resolution="not_run", reviewer="bob")
    again = await store.resolve(rec.approval_id, not_run)
    assert again.state is ApprovalState.APPROVED and again.runs == 1
    # A host that read the record when it was first approved, and claims only now, loses.
    if read_once(store, first):
        stale, won = await store.claim(rec.approval_id)
        assert not won and stale == again
    # Hosts racing for the fresh run: one starts it, once.
    claims = await asyncio.gather(*(store.claim(rec.approval_id) for _ in range(20)))
    winners = [record for record, won in claims if won]
    assert len(winners) == 1, claims
    stored = await store.get(rec.approval_id)
    assert stored == winners[0]
    assert stored.runs == 2 and stored.resolution == "not_run" and stored.resolved_by == "bob"


async def test_racing_reruns_of_an_idempotent_call_start_one_run(store: ApprovalStore) -> None:
    rec = await store.park(a_record())
    await store.decide(
        rec.approval_id, Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    )
    running, _ = await store.claim(rec.approval_id)
    # Hosts meeting the dead run at once: each rerun is won by one of them (a host that reads
    # the record after a rerun started may run it once more, up to MAX_RUNS, as the rule says).
    reclaims = await asyncio.gather(*(store.reclaim(rec.approval_id) for _ in range(20)))
    runs = sorted(r.runs for r, won in reclaims if won)
    assert runs == list(range(2, MAX_RUNS + 1))[: len(runs)] and runs, reclaims
    last = await store.get(rec.approval_id)
    assert last is not None and last.runs == runs[-1]
    # A host that read the first run's record, and runs it again only now, loses.
    if read_once(store, running):
        stale, won = await store.reclaim(rec.approval_id)
        assert not won and stale == last
    # The first run ending late still settles it; a rerun then finds it done.
    done = await store.finish(rec.approval_id, {"status": "ok"})
    assert done.state is ApprovalState.DONE and done.runs == last.runs
    with pytest.raises(ApprovalConflict):
        await store.finish(rec.approval_id, {"status": "ok"})


async def test_list(store: ApprovalStore) -> None:
    a, b = await store.park(a_record("1")), await store.park(a_record("2"))
    await store.decide(
        b.approval_id, Decision(approval_id=b.approval_id, approved=False, reviewer="r")
    )
    assert {r.approval_id for r in await store.list()} == {a.approval_id, b.approval_id}
    assert [r.approval_id for r in await store.list(ApprovalState.PENDING)] == [a.approval_id]


def counting_executor(store: ApprovalStore, runs: list[int]) -> Executor:
    reg = ToolRegistry()

    @reg.tool(confirm=True)
    async def pay(n: int) -> int:
        runs.append(n)
        await asyncio.sleep(0)  # let the other resumes pile up behind the claim
        return n

    return Executor(reg, store)


async def approved(ex: Executor) -> str:
    reply = await handle_envelope(ex, b'{"tool":"pay","arguments":{"n":7}}', message_id="m")
    assert reply["status"] == "pending_approval"
    assert (await record_decision(ex, reply["approval_id"], reviewer="ann", approved=True))[
        0
    ] == 200
    return str(reply["approval_id"])


async def test_100_concurrent_resumes_run_once(store: ApprovalStore) -> None:
    runs: list[int] = []
    ex = counting_executor(store, runs)
    approval_id = await approved(ex)
    replies = await asyncio.gather(
        *(handle_envelope(ex, {"approval_id": approval_id}) for _ in range(100))
    )
    assert runs == [7]
    statuses = [r["status"] for r in replies]
    assert statuses.count("ok") == 1 and statuses.count("already_done") == 99


async def test_100_concurrent_resumes_over_two_sqlite_connections(tmp_path: Path) -> None:
    runs: list[int] = []
    stores = [SQLiteApprovalStore(tmp_path / "shared.db") for _ in range(2)]
    executors = [counting_executor(s, runs) for s in stores]
    approval_id = await approved(executors[0])
    replies = await asyncio.gather(
        *(handle_envelope(executors[i % 2], {"approval_id": approval_id}) for i in range(100))
    )
    assert runs == [7]
    assert [r["status"] for r in replies].count("ok") == 1
    for s in stores:
        s.close()


async def test_sqlite_survives_a_restart(tmp_path: Path) -> None:
    first = SQLiteApprovalStore(tmp_path / "a.db")
    rec = await first.park(a_record())
    first.close()
    second = SQLiteApprovalStore(tmp_path / "a.db")
    assert await second.get(rec.approval_id) == rec
    second.close()


def test_memory_claims_from_many_threads_start_one_run() -> None:
    """Threads, each with its own event loop, claiming one approved call: one wins."""
    store = MemoryApprovalStore()
    rec = asyncio.run(store.park(a_record()))
    decision = Decision(approval_id=rec.approval_id, approved=True, reviewer="ann")
    asyncio.run(store.decide(rec.approval_id, decision))
    start = threading.Barrier(8)

    def claim(_: int) -> tuple[ApprovalRecord, bool]:
        start.wait()
        return asyncio.run(store.claim(rec.approval_id))

    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(claim, range(8)))
    winners = [record for record, won in claims if won]
    assert len(winners) == 1 and winners[0].runs == 1
    assert asyncio.run(store.get(rec.approval_id)) == winners[0]


def test_concurrent_resumes_across_two_processes(tmp_path: Path) -> None:
    db, counter = tmp_path / "shared.db", tmp_path / "runs.txt"
    runs: list[int] = []
    approval_id = asyncio.run(_approve_in(db, runs))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(HERE / "crossproc_worker.py"), str(db), str(counter), approval_id]
    children = [
        subprocess.Popen(
            [*cmd, "50"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    outputs = [child.communicate("go\n", timeout=120)[0] for child in children]
    assert all(child.returncode == 0 for child in children)
    statuses = [s for out in outputs for s in json.loads(out.strip().splitlines()[-1])]
    assert len(statuses) == 100
    assert statuses.count("ok") == 1 and statuses.count("already_done") == 99
    assert len(counter.read_text().splitlines()) == 1


async def _approve_in(db: Path, runs: list[int]) -> str:
    store = SQLiteApprovalStore(db)
    try:
        return await approved(counting_executor(store, runs))
    finally:
        store.close()


def test_stores_are_importable_from_the_package_not_from_approvals() -> None:
    """The state machine (`core.approvals`) knows no store: the package names them."""
    import stream_adapter
    from stream_adapter.core import approvals

    get: Callable[[str], Any] = stream_adapter.__getattr__
    assert get("MemoryApprovalStore") is MemoryApprovalStore
    with pytest.raises(AttributeError):
        get("Nope")
    assert not hasattr(approvals, "MemoryApprovalStore")
