"""Runners: a shared warm loop, a fresh loop per run, and per-loop values."""

from __future__ import annotations

import asyncio
import threading

import pytest

from stream_adapter import LoopLocal, LoopRunner, RunSync, run_sync
from stream_adapter.core.runners import default_runner


async def loop_id() -> int:
    return id(asyncio.get_running_loop())


async def forever() -> None:
    await asyncio.Event().wait()


def test_loop_runner_keeps_one_warm_loop() -> None:
    runner = LoopRunner()
    try:
        first, second = runner.run(loop_id), runner.run(loop_id)
        assert first == second
        with pytest.raises(TimeoutError):
            runner.run(forever, timeout=0.01)
        with pytest.raises(ZeroDivisionError):
            runner.run(lambda: asyncio.sleep(0, 1 // 0))
    finally:
        runner.close()


def test_loop_runner_from_many_threads() -> None:
    runner = LoopRunner()
    results: list[int] = []

    def worker() -> None:
        results.append(runner.run(loop_id))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 8
    runner.close()


def test_loop_runner_refuses_to_deadlock() -> None:
    runner = LoopRunner()

    async def nested() -> int:
        return runner.run(loop_id)

    with pytest.raises(RuntimeError):
        runner.run(nested)
    runner.close()


def test_run_sync_gives_fresh_loops() -> None:
    runner = RunSync()

    async def this_loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    first, second = runner.run(this_loop), runner.run(this_loop)
    assert first is not second and first.is_closed() and second.is_closed()
    with pytest.raises(TimeoutError):
        runner.run(forever, timeout=0.01)


def test_run_sync_takes_awaitables_and_work() -> None:
    assert run_sync(loop_id()) == run_sync(loop_id) == default_runner().run(loop_id)
    assert default_runner() is default_runner()
    with pytest.raises(TimeoutError):
        run_sync(forever(), timeout=0.01)


def test_loop_local_builds_one_value_per_loop() -> None:
    built: list[object] = []

    def factory() -> object:
        built.append(object())
        return built[-1]

    local: LoopLocal[object] = LoopLocal(factory)

    async def get_twice() -> tuple[object, object]:
        return local.get(), local.get()

    a1, a2 = asyncio.run(get_twice())
    b1, _ = asyncio.run(get_twice())
    assert a1 is a2 and a1 is not b1 and len(built) == 2
    runner = LoopRunner()
    warm = [runner.run(lambda: asyncio.sleep(0, local.get())) for _ in range(3)]
    assert warm[0] is warm[1] is warm[2]

    async def pop() -> object | None:
        return local.pop()

    assert runner.run(pop) is warm[0]
    runner.close()
    with pytest.raises(RuntimeError):
        local.get()  # no running loop
