"""Deterministic, source-namespaced ids: a redelivered message names the same call again.

A delivery id that can repeat (a Kafka `topic:partition:offset` after the topic is deleted and
created again, or on another cluster) is namespaced by a `scope` too: the topic's Kafka topic
id, a UUID per topic incarnation, so a new message never gets the ids of an old one.
"""

from __future__ import annotations

import uuid
from functools import lru_cache
from hashlib import blake2b

from stream_adapter.core.errors import ToolUsageError

__all__ = [
    "approval_id_for",
    "delivery_text",
    "derive_call_id",
    "derive_ids",
    "derive_run_id",
    "fresh_id",
    "kafka_message_id",
    "legacy_approval_id",
]

_PERSON = b"stream-adapter"


def _encoded(parts: tuple[str, ...]) -> bytes:
    """The injective length-prefixed encoding of parts, so ("a:b","c") != ("a","b:c")."""
    if len(parts) == 1:
        data = parts[0].encode("utf-8", "surrogatepass")
        return b"%d:%s" % (len(data), data)
    out = []
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        out.append(b"%d:%s" % (len(data), data))
    return b"".join(out)


_PRIMED_SOURCES = 64
"""How many (kind, source) prefixes, and derive_ids sources, keep a primed hasher."""


@lru_cache(maxsize=_PRIMED_SOURCES)
def _hasher(*prefix: str) -> blake2b:
    """blake2b having hashed prefix (a kind and a source: few, reused for every message)."""
    return blake2b(_encoded(prefix), digest_size=16, person=_PERSON)


def _digest(*parts: str) -> str:
    """Hash parts (the first two are a kind and a source) in their injective encoding."""
    h = _hasher(*parts[:2]).copy()
    h.update(_encoded(parts[2:]))
    return h.hexdigest()


def kafka_message_id(topic: str, partition: int, offset: int) -> str:
    """The delivery id of a Kafka record, ``topic:partition:offset``: stable across redeliveries."""
    return f"{topic}:{partition}:{offset}"


def delivery_text(value: object, name: str) -> str:
    """A delivery id or source as text: a str as it is, an int (a numeric message id, as some
    Pub/Sub clients give) as its digits, so both forms name the same call; else ToolUsageError.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ToolUsageError(f"{name} must be a str or an int, not {type(value).__name__}")


_ID_PAIRS: dict[tuple[str, str], tuple[blake2b, blake2b]] = {}
"""derive_ids' two primed hashers per (source, scope) (few, reused for every message)."""


def derive_ids(message_id: str, source: str, scope: str = "") -> tuple[str, str]:
    """(run_id, call_id) derived from a delivery id, namespaced by its source and scope.

    The same two digests as _digest("run"/"call", source, [scope,] message_id), with the
    message id encoded once and both primed hashers found in one lookup: this runs for every
    call that names no ids. scope (the Kafka topic id of the delivery's topic) makes a
    delivery id that repeats in another topic incarnation name another call; an empty scope
    derives the ids as before scopes existed (delivery ids that never repeat).
    """
    pair = _ID_PAIRS.get((source, scope))
    if pair is None:
        if len(_ID_PAIRS) >= _PRIMED_SOURCES:
            _ID_PAIRS.clear()
        pair = _ID_PAIRS[source, scope] = _primed_pair(source, scope)
    tail = _encoded((message_id,))
    run, call = pair[0].copy(), pair[1].copy()
    run.update(tail)
    call.update(tail)
    return "run_" + run.hexdigest(), "call_" + call.hexdigest()


def _primed_pair(source: str, scope: str) -> tuple[blake2b, blake2b]:
    if not scope:
        return _hasher("run", source), _hasher("call", source)
    primed = []
    for kind in ("run", "call"):
        h = _hasher(kind, source).copy()
        h.update(_encoded((scope,)))
        primed.append(h)
    return primed[0], primed[1]


def derive_call_id(run_id: str, message_id: str, source: str, scope: str = "") -> str:
    """The call_id for an envelope that gave only run_id; fresh without a delivery id."""
    if not message_id:
        return fresh_id("call_")
    if not scope:
        return "call_" + _digest("call-of-run", source, message_id, run_id)
    return "call_" + _digest("call-of-run", source, scope, message_id, run_id)


def derive_run_id(call_id: str, source: str) -> str:
    """The run_id for an envelope that gave only call_id (stable: call_id already is)."""
    return "run_" + _digest("run-of-call", source, call_id)


def approval_id_for(run_id: str, call_id: str, source: str) -> str:
    """The approval id of a call, so a redelivered confirm call finds its own record; two
    sources that use the same ids never share one."""
    return "appr_" + _digest("approval", source, run_id, call_id)


def legacy_approval_id(run_id: str, call_id: str) -> str:
    """The approval id records written before approval ids named their source are kept
    under: a call redelivered across the upgrade answers from its record there."""
    return "appr_" + _digest("approval", run_id, call_id)


def fresh_id(prefix: str = "") -> str:
    """A new random id (128 bits)."""
    return prefix + uuid.uuid4().hex
