"""The Redis approval store: shared by every process and host that reaches one Redis.

For function hosts whose containers die between invocations. Each transition is one Lua
script (atomic in Redis), guarded by the record's expected state and runs count, so exactly one
caller in any process wins a claim. A record that settles gets an EXPIRE of the settled
retention, so Redis removes it then. Needs the ``redis`` extra (redis-py's asyncio client).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from stream_adapter.core.approvals import SETTLED_STATES, ApprovalRecord, ApprovalState, instant
from stream_adapter.core.runners import LoopLocal
from stream_adapter.hosts.stores._cas import CompareAndSetStore
from stream_adapter.hosts.stores._common import unavailable_on
from stream_adapter.hosts.stores._lifetimes import FROM_SETTINGS, Lifetime, lifetimes

__all__ = ["RedisApprovalStore"]

# KEYS: record hash, index zset. ARGV: state, record bytes, index score, approval_id.
_INSERT = """
if redis.call('HSETNX', KEYS[1], 'state', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'record', ARGV[2])
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
  return ARGV[2]
end
return redis.call('HGET', KEYS[1], 'record')
"""

# KEYS: record hash. ARGV: expected state, new state, new record bytes, expected runs, TTL in
# ms (0: none).
_SWAP = """
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[1] then
  return 0
end
local stored = cjson.decode(redis.call('HGET', KEYS[1], 'record'))
if tonumber(stored['runs'] or 0) ~= tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'record', ARGV[3])
if tonumber(ARGV[5]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
return 1
"""

# KEYS: record hash, index zset. ARGV: expected state, approval_id.
_DELETE = """
local state = redis.call('HGET', KEYS[1], 'state')
if state == ARGV[1] or not state then
  redis.call('ZREM', KEYS[2], ARGV[2])
end
if state == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


@dataclass(frozen=True)
class _Conn:
    """One loop's client and its registered scripts."""

    client: Redis
    insert: AsyncScript
    swap: AsyncScript
    delete: AsyncScript


def _score(record: ApprovalRecord) -> float:
    """requested_at as epoch milliseconds, the index's sort key."""
    return _score_of(record.requested_at)


def _score_of(moment: str) -> float:
    """An ISO 8601 time as epoch milliseconds (0 when unreadable)."""
    at = instant(moment)
    return 0.0 if at is None else at.timestamp() * 1000


class RedisApprovalStore(CompareAndSetStore):
    """Approval records in Redis hashes, with a sorted set by request time for listing.

    Keys share the hash tag ``{namespace}``, so the scripts also run on Redis Cluster. A
    client is built lazily per event loop (a LoopLocal): warm invocations on the shared loop
    reuse one connection pool, and a fresh loop per invocation (RunSync) gets its own.
    Settled records expire after settled_retention_s (Redis removes them; `sweep` drops their
    ids from the index), and pending ones after pending_expiry_s (defaults: the settings).
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        namespace: str = "stream-adapter",
        settled_retention_s: Lifetime = FROM_SETTINGS,
        pending_expiry_s: Lifetime = FROM_SETTINGS,
        **client_options: Any,
    ) -> None:
        self.url = url
        self.lifetimes = lifetimes(settled_retention_s, pending_expiry_s)
        self.namespace = namespace
        tag = "{" + namespace + "}"
        self._prefix = f"{tag}:approval:"
        self._index = f"{tag}:approvals"
        self._options = client_options
        self._conns: LoopLocal[_Conn] = LoopLocal(self._connect)

    def _connect(self) -> _Conn:
        client = Redis.from_url(self.url, **self._options)
        return _Conn(
            client,
            client.register_script(_INSERT),
            client.register_script(_SWAP),
            client.register_script(_DELETE),
        )

    def _ttl_ms(self, record: ApprovalRecord) -> int:
        """The EXPIRE a record gets when written: its retention once settled, else none."""
        retention_s = self.lifetimes.settled_retention_s
        if retention_s is None or record.state not in SETTLED_STATES:
            return 0
        return max(1, int(retention_s * 1000))

    def _key(self, approval_id: str) -> str:
        return self._prefix + approval_id

    async def _insert(self, record: ApprovalRecord) -> ApprovalRecord:
        conn = self._conns.get()
        with unavailable_on(RedisError, OSError):
            stored = await conn.insert(
                keys=[self._key(record.approval_id), self._index],
                args=[record.state.value, record.to_bytes(), _score(record), record.approval_id],
            )
        return ApprovalRecord.from_bytes(stored)

    async def _load(self, approval_id: str) -> ApprovalRecord | None:
        conn = self._conns.get()
        with unavailable_on(RedisError, OSError):
            data = await conn.client.hget(self._key(approval_id), "record")
        return None if data is None else ApprovalRecord.from_bytes(data)

    async def _swap(self, record: ApprovalRecord, expected: ApprovalRecord) -> bool:
        conn = self._conns.get()
        with unavailable_on(RedisError, OSError):
            swapped = await conn.swap(
                keys=[self._key(record.approval_id)],
                args=[
                    expected.state.value,
                    record.state.value,
                    record.to_bytes(),
                    expected.runs,
                    self._ttl_ms(record),
                ],
            )
        return int(swapped) == 1

    async def _delete(self, record: ApprovalRecord) -> bool:
        conn = self._conns.get()
        with unavailable_on(RedisError, OSError):
            deleted = await conn.delete(
                keys=[self._key(record.approval_id), self._index],
                args=[record.state.value, record.approval_id],
            )
        return int(deleted) == 1

    async def _scan_due(
        self, state: ApprovalState, before: str, limit: int
    ) -> builtins.list[ApprovalRecord]:
        """Also drops from the index the ids of records Redis already expired."""
        cutoff = _score_of(before)
        conn = self._conns.get()
        with unavailable_on(RedisError, OSError):
            members = await conn.client.zrangebyscore(
                self._index, "-inf", f"({cutoff}", start=0, num=limit
            )
            ids = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
            if not ids:
                return []
            async with conn.client.pipeline(transaction=False) as pipe:
                for approval_id in ids:
                    pipe.hget(self._key(approval_id), "record")
                blobs = await pipe.execute()
            gone = [i for i, blob in zip(ids, blobs, strict=True) if blob is None]
            if gone:
                await conn.client.zrem(self._index, *gone)
        records = [ApprovalRecord.from_bytes(blob) for blob in blobs if blob is not None]
        return [r for r in records if r.state == state]

    async def _scan(self, state: ApprovalState | None) -> builtins.list[ApprovalRecord]:
        conn = self._conns.get()
        with unavailable_on(RedisError, OSError):
            ids = await conn.client.zrange(self._index, 0, -1)
            if not ids:
                return []
            async with conn.client.pipeline(transaction=False) as pipe:
                for member in ids:
                    approval_id = member.decode() if isinstance(member, bytes) else str(member)
                    pipe.hget(self._key(approval_id), "record")
                blobs = await pipe.execute()
        records = [ApprovalRecord.from_bytes(blob) for blob in blobs if blob is not None]
        return [r for r in records if state is None or r.state == state]

    async def aclose(self) -> None:
        """Close the running loop's client (a new one is built on next use)."""
        conn = self._conns.pop()
        if conn is not None:
            await conn.client.aclose()
