"""The local broker's port and cluster-id choices and its blocking helper (no broker needed)."""

from __future__ import annotations

import asyncio
import threading

from stream_adapter_dev.broker import local


def test_free_ports_avoid_the_ephemeral_range_and_each_other() -> None:
    low = local._ephemeral_low()
    ports = [local.free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports)


def test_cluster_ids_never_read_as_an_option() -> None:
    ids = {local._cluster_id() for _ in range(3000)}
    assert len(ids) == 3000
    assert not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 for i in ids)


def test_run_blocking_runs_a_coroutine_with_or_without_a_running_loop() -> None:
    """The broker commands are synchronous: inside a loop their work runs on a helper thread."""
    caller = threading.get_ident()

    async def where() -> tuple[str, bool]:
        return "done", threading.get_ident() == caller

    assert local.run_blocking(where) == ("done", True)

    async def inside_a_loop() -> tuple[str, bool]:
        return local.run_blocking(where)

    assert asyncio.run(inside_a_loop()) == ("done", False)
