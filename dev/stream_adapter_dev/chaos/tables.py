"""Table/changelog disagreements at the end of a run: each approvals partition's owner's local
store (its RocksDB database, opened read-only beside the running worker) against the latest
committed changelog record of each key of that partition.

The store is what the owner reads its records from, and what it would serve and act on after
a restart without a restore; it is read from disk, not asked of the worker, so a worker that
believes something else cannot answer for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

OFFSET_KEY = b"__faust\0offset__"
"""Faust's own key in each partition's store (the changelog offset it has applied)."""

__all__ = ["disagreements", "latest_records", "partition_of_calls", "read_store", "store_path"]


def latest_records(changelog: Iterable[Any]) -> dict[int, dict[bytes, bytes | None]]:
    """Per partition, each key's latest value (None: a tombstone)."""
    out: dict[int, dict[bytes, bytes | None]] = {}
    for message in changelog:
        out.setdefault(message.partition, {})[message.key] = message.value
    return out


def partition_of_calls(changelog: Iterable[Any]) -> dict[str, int]:
    """Each call's approvals partition, from its records."""
    out: dict[str, int] = {}
    for message in changelog:
        if message.value is not None:
            call_id = json.loads(message.value).get("call_id")
            if call_id:
                out[str(call_id)] = message.partition
    return out


def store_path(data_dir: Path, table: str, partition: int) -> Path | None:
    """The RocksDB folder of a table's partition under a worker's data folder, if any."""
    found = sorted(data_dir.glob(f"**/tables/{table}-{partition}.db"))
    return found[0] if found else None


def read_store(path: Path) -> dict[bytes, bytes]:
    """Every key and value of a partition's store, read-only (the worker may hold it open)."""
    from rocksdict import AccessType, Options, Rdict

    db = Rdict(str(path), options=Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        items = {k: v for k, v in db.items() if isinstance(k, bytes) and isinstance(v, bytes)}
        return {k: v for k, v in items.items() if k != OFFSET_KEY}
    finally:
        db.close()


def disagreements(store: Mapping[bytes, bytes], latest: Mapping[bytes, bytes | None]) -> list[str]:
    """Keys whose stored value is not their latest changelog value (absent for a tombstone)."""
    out = []
    for key in sorted(set(store) | set(latest)):
        if store.get(key) != latest.get(key):
            out.append(key.decode(errors="replace"))
    return out
