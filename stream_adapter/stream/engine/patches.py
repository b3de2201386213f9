"""The engine's replacements of faust-streaming and aiokafka methods, installed by one function.

Each replaces a method process-wide (a class attribute; for lz4, a module's function), so
each is written against one release: `install` refuses any other faust-streaming,
mode-streaming or aiokafka release than those, with a message saying what to check. What each
patch fixes, the test that proves it and when it can go are in docs/faust-patches.md.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

WRITTEN_FOR = {"faust-streaming": "0.15.3", "mode-streaming": "0.7", "aiokafka": "0.14"}
"""The distributions whose internals the engine replaces or relies on, with the release (or
release series, as pyproject.toml pins it) they were read in."""

ORIGINAL = "_stream_adapter_original_"
"""Prefix of the class attribute that keeps a replaced method (`original` reads it)."""


class UnsupportedVersion(RuntimeError):
    """The installed faust-streaming, mode-streaming or aiokafka is not the one the patches
    were written for (a deployment fault: no message could fix it, so never retried)."""


def check_versions(installed: dict[str, str | None] | None = None) -> None:
    """Raise UnsupportedVersion unless every WRITTEN_FOR distribution is at its version."""
    found = installed if installed is not None else {n: _version(n) for n in WRITTEN_FOR}
    wrong = {
        name: found.get(name)
        for name, want in WRITTEN_FOR.items()
        if not _matches(found.get(name), want)
    }
    if wrong:
        have = ", ".join(f"{name} {v or 'missing'}" for name, v in sorted(wrong.items()))
        need = ", ".join(f"{name} {WRITTEN_FOR[name]}" for name in sorted(wrong))
        raise UnsupportedVersion(
            f"stream-adapter's engine replaces internals of {need}, but found {have}: "
            "pin those versions, or check each patch in docs/faust-patches.md against the new "
            "release and update WRITTEN_FOR in stream_adapter/stream/engine/patches.py"
        )


def _matches(installed: str | None, want: str) -> bool:
    """True when installed is want or a release of want's series ("0.14" takes "0.14.1")."""
    return installed is not None and (installed == want or installed.startswith(want + "."))


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def install() -> None:
    """Check the versions, then install every patch (idempotent)."""
    check_versions()
    from aiokafka.consumer.group_coordinator import GroupCoordinator
    from aiokafka.producer.transaction_manager import (
        TransactionManager as AIOKafkaTransactionManager,
    )
    from faust.tables.recovery import Recovery
    from faust.transport.consumer import Consumer, TransactionManager
    from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread, Producer

    from stream_adapter.stream.engine import heartbeats, stable_offsets
    from stream_adapter.stream.engine.commits import offsets, transactions
    from stream_adapter.stream.engine.recovery import (
        broker_highwaters,
        foreign_stores_set_aside,
        standbys_without_waiting,
    )

    _replace(Consumer, "_new_offset", lambda _: offsets.new_offset)
    _replace(AIOKafkaConsumerThread, "_highwaters", broker_highwaters)
    _replace(Producer, "begin_transaction", transactions.guarded_begin_transaction)
    _replace(TransactionManager, "commit", lambda _: transactions.guarded_commit)
    _replace(TransactionManager, "on_rebalance", transactions.guarded_on_rebalance)
    _replace(Recovery, "_build_offsets", foreign_stores_set_aside)
    _replace(Recovery, "_build_highwaters", standbys_without_waiting)
    _replace(GroupCoordinator, "_do_fetch_commit_offsets", stable_offsets.stable_fetch)
    _replace(AIOKafkaTransactionManager, "consumer_group_to_add", transactions.early_offsets_group)
    _replace(GroupCoordinator, "_do_heartbeat", heartbeats.stamped_heartbeat)
    install_fast_lz4()


def install_fast_lz4() -> None:
    """Check the versions, then make aiokafka write lz4 batches in LZ4's fast mode (patch 9;
    `install` does this too): for clients outside a worker that compress as it does."""
    check_versions()
    import sys

    from aiokafka.record import default_records

    from stream_adapter.stream.engine import compression

    # The batch builder in use (aiokafka's C extension, or its Python one without it) calls
    # its own module's lz4_encode.
    builder_module = sys.modules[default_records.DefaultRecordBatchBuilder.__module__]
    for module in (default_records, builder_module):
        _replace(module, "lz4_encode", compression.fast_lz4)


def original(owner: type | ModuleType, name: str) -> Any:
    """What `install` replaced on owner (Faust's or aiokafka's own), or the current one if
    nothing was."""
    return getattr(owner, ORIGINAL + name, getattr(owner, name))


def _replace(owner: type | ModuleType, name: str, wrap: Any) -> None:
    """Set owner.name (a class's method or a module's function) to wrap(its own), once; the
    original is kept beside it."""
    kept = ORIGINAL + name
    if kept in vars(owner):
        return
    own = vars(owner)[name]
    setattr(owner, kept, own)
    setattr(owner, name, wrap(own))
