"""The engine's Faust patches: installed by one function, refused on a Faust they were not
written for."""

from __future__ import annotations

import asyncio
import sys
import time
from types import SimpleNamespace

import pytest
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.producer.transaction_manager import TransactionManager as AIOKafkaTransactionManager
from aiokafka.record import default_records as python_records
from faust.tables.recovery import Recovery
from faust.transport.consumer import Consumer, TransactionManager
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Producer

from stream_adapter.stream.engine import App, UnsupportedVersion, heartbeats, patches
from stream_adapter.stream.engine.commits import offsets

WRITTEN_FOR = {"faust-streaming": "0.15.3", "mode-streaming": "0.7.1", "aiokafka": "0.14.0"}


def test_the_versions_written_for_pass() -> None:
    patches.check_versions(WRITTEN_FOR)
    patches.check_versions({**WRITTEN_FOR, "aiokafka": "0.14.2", "mode-streaming": "0.7.9"})


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("faust-streaming", "0.15.4"),
        ("faust-streaming", "0.15"),
        ("faust-streaming", "0.16.0"),
        ("mode-streaming", "0.8.0"),
        ("aiokafka", "0.15.0"),
        ("aiokafka", "0.140.0"),
    ],
)
def test_another_release_is_refused_with_what_to_do(name: str, found: str) -> None:
    with pytest.raises(UnsupportedVersion) as refused:
        patches.check_versions({**WRITTEN_FOR, name: found})
    message = str(refused.value)
    assert f"{name} {found}" in message
    assert patches.WRITTEN_FOR[name] in message
    assert "docs/faust-patches.md" in message


def test_a_missing_distribution_is_refused() -> None:
    with pytest.raises(UnsupportedVersion, match="aiokafka missing"):
        patches.check_versions({k: v for k, v in WRITTEN_FOR.items() if k != "aiokafka"})


def test_the_installed_versions_are_the_ones_written_for() -> None:
    patches.check_versions()  # what pyproject.toml pins must pass its own check


def test_install_replaces_the_eleven_functions_once_and_keeps_the_originals() -> None:
    patches.install()
    patches.install()
    assert Consumer._new_offset is offsets.new_offset
    replaced = [
        (Consumer, "_new_offset"),
        (AIOKafkaConsumerThread, "_highwaters"),
        (Producer, "begin_transaction"),
        (TransactionManager, "commit"),
        (TransactionManager, "on_rebalance"),
        (Recovery, "_build_offsets"),
        (Recovery, "_build_highwaters"),
        (GroupCoordinator, "_do_fetch_commit_offsets"),
        (AIOKafkaTransactionManager, "consumer_group_to_add"),
        (GroupCoordinator, "_do_heartbeat"),
        (python_records, "lz4_encode"),
        (sys.modules[python_records.DefaultRecordBatchBuilder.__module__], "lz4_encode"),
    ]
    for owner, name in replaced:
        own = patches.original(owner, name)
        assert own is not getattr(owner, name)
        assert own.__module__.startswith(("faust.", "aiokafka.")), (owner, name)


def test_an_app_on_another_faust_is_refused_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = {**WRITTEN_FOR, "faust-streaming": "0.16.0"}
    monkeypatch.setattr(patches, "_version", found.get)
    with pytest.raises(UnsupportedVersion, match=r"faust-streaming 0\.16\.0"):
        App("refused-app")


async def test_a_good_heartbeat_is_timed_from_its_request_and_a_failed_one_is_not() -> None:
    answers = iter([False, True, False, True])
    answered = asyncio.Event()

    async def own(coordinator: object) -> bool:
        await answered.wait()  # the answer is read later, as after a pause
        return next(answers)

    heartbeat = heartbeats.stamped_heartbeat(own)
    coordinator = SimpleNamespace()
    answered.set()
    assert await heartbeat(coordinator) is False
    assert heartbeats.last_heartbeat(coordinator) is None
    answered.clear()
    before = time.monotonic()
    beat = asyncio.ensure_future(heartbeat(coordinator))
    await asyncio.sleep(0.05)
    read_at = time.monotonic()
    answered.set()
    assert await beat is True
    stamped = heartbeats.last_heartbeat(coordinator)
    assert stamped is not None and before <= stamped < read_at
    assert await heartbeat(coordinator) is False
    assert heartbeats.last_heartbeat(coordinator) == stamped
