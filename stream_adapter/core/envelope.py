"""The envelope on `tool-calls`: one call, or the resume of a decided approval (contract §3)."""

from __future__ import annotations

from collections.abc import Callable, KeysView, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from stream_adapter.core._json import JSONError, check_value, loads
from stream_adapter.core.errors import ToolUsageError
from stream_adapter.core.ids import (
    delivery_text,
    derive_call_id,
    derive_ids,
    derive_run_id,
    fresh_id,
)

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "MAX_ID_CHARS",
    "MAX_RECORD_BYTES",
    "TOPIC_MAX_MESSAGE_BYTES",
    "Envelope",
    "parse_envelope",
]

MAX_ENVELOPE_BYTES = 1 << 20
"""A larger payload is refused before it is parsed."""

MAX_RECORD_BYTES = MAX_ENVELOPE_BYTES + (256 << 10)
"""Largest record the worker writes (key, value and headers): a reply, approval record or
request carrying a call at MAX_ENVELOPE_BYTES, and the ids and headers around it. A larger
one is never sent: it becomes a small `RecordTooLarge` error instead."""

TOPIC_MAX_MESSAGE_BYTES = MAX_RECORD_BYTES + (16 << 10)
"""`max.message.bytes` of the topics the adapter creates: a record of MAX_RECORD_BYTES in its
batch's framing, so the broker never refuses what the worker checked."""

MAX_ID_CHARS = 256
"""Longest tool name or id accepted (they become Kafka keys and log fields)."""

_CALL_KEYS = frozenset({"tool", "arguments", "run_id", "call_id"})
_RESUME_KEYS = frozenset({"approval_id"})


@dataclass(frozen=True, slots=True, init=False)
class Envelope:
    """A parsed envelope: a call (tool set) or a resume (approval_id set).

    A frozen dataclass: ``dataclasses.replace`` works, and it never equals a plain tuple.
    One is built per call: `parse_envelope` fills a plain twin of the same slots and gives it
    this class (`_envelope`), about a third of what ``__init__`` costs; ``__init__`` (direct
    construction, ``replace``) sets the slots through their descriptors, past the generated
    frozen one that looks ``object.__setattr__`` up for each field.
    """

    tool: str | None
    arguments: Mapping[str, Any]
    run_id: str
    call_id: str
    approval_id: str | None
    message_id: str
    source: str

    def __init__(
        self,
        tool: str | None,
        arguments: Mapping[str, Any],
        run_id: str,
        call_id: str,
        approval_id: str | None,
        message_id: str,
        source: str,
    ) -> None:
        _set_tool(self, tool)
        _set_arguments(self, arguments)
        _set_run_id(self, run_id)
        _set_call_id(self, call_id)
        _set_approval_id(self, approval_id)
        _set_message_id(self, message_id)
        _set_source(self, source)

    @property
    def is_resume(self) -> bool:
        """True when this envelope resumes a decided approval."""
        return self.approval_id is not None

    def to_payload(self) -> dict[str, Any]:
        """The envelope as JSON with its ids spelled out, so a replay is the same call."""
        if self.approval_id is not None:
            return {"approval_id": self.approval_id}
        return {
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "run_id": self.run_id,
            "call_id": self.call_id,
        }


_Setter = Callable[[Envelope, Any], None]


def _slot_setter(name: str) -> _Setter:
    """The slot descriptor's own setter of an Envelope field (past the frozen __setattr__)."""
    setter: _Setter = vars(Envelope)[name].__set__
    return setter


class _Draft:
    """Envelope's slots, writable: filled by `_envelope`, then made an Envelope."""

    __slots__ = Envelope.__slots__


def _envelope(
    tool: str | None,
    arguments: Mapping[str, Any],
    run_id: str,
    call_id: str,
    approval_id: str | None,
    message_id: str,
    source: str,
) -> Envelope:
    """An Envelope of these fields, built as plain slots and then given its frozen class
    (the two classes have the same slots, so Python allows the switch)."""
    draft: Any = _Draft()  # typed as Any: its slots are Envelope's, named once there
    draft.tool = tool
    draft.arguments = arguments
    draft.run_id = run_id
    draft.call_id = call_id
    draft.approval_id = approval_id
    draft.message_id = message_id
    draft.source = source
    draft.__class__ = Envelope
    envelope: Envelope = draft
    return envelope


_set_tool = _slot_setter("tool")
_set_arguments = _slot_setter("arguments")
_set_run_id = _slot_setter("run_id")
_set_call_id = _slot_setter("call_id")
_set_approval_id = _slot_setter("approval_id")
_set_message_id = _slot_setter("message_id")
_set_source = _slot_setter("source")


def _name(obj: Mapping[str, Any], key: str) -> str:
    value = obj[key]
    if type(value) is not str or not value:
        raise ToolUsageError(f"{key} must be a non-empty string")
    if len(value) > MAX_ID_CHARS:
        raise ToolUsageError(f"{key} longer than {MAX_ID_CHARS} characters")
    return value


def _decode(payload: bytes | bytearray | memoryview | str | Mapping[str, Any]) -> dict[str, Any]:
    try:
        if type(payload) is bytes or isinstance(payload, bytes | str):
            obj = loads(payload, MAX_ENVELOPE_BYTES)
        elif isinstance(payload, bytearray | memoryview):
            size = payload.nbytes if isinstance(payload, memoryview) else len(payload)
            if size > MAX_ENVELOPE_BYTES:
                raise JSONError(f"payload larger than {MAX_ENVELOPE_BYTES} bytes")
            obj = loads(bytes(payload), MAX_ENVELOPE_BYTES)
        elif isinstance(payload, Mapping):
            obj = dict(payload)
            check_value(obj)
            _check_encoded_size(obj)
        else:
            raise ToolUsageError("envelope must be JSON bytes, str or a mapping")
    except JSONError as exc:
        raise ToolUsageError(f"malformed envelope: {exc}") from None
    if type(obj) is not dict:
        raise ToolUsageError("envelope must be a JSON object")
    return obj


def _check_encoded_size(obj: dict[str, Any]) -> None:
    """The cap holds for an already-decoded mapping too: it applies to the encoded size."""
    try:
        size = len(orjson.dumps(obj))
    except orjson.JSONEncodeError:
        raise JSONError("payload does not encode as JSON (not valid UTF-8)") from None
    if size > MAX_ENVELOPE_BYTES:
        raise JSONError(f"payload larger than {MAX_ENVELOPE_BYTES} bytes")


def parse_envelope(
    payload: bytes | bytearray | memoryview | str | Mapping[str, Any],
    *,
    message_id: str = "",
    source: str = "",
    scope: str = "",
) -> Envelope:
    """Validate payload; a call without ids gets them from (message_id, source), else fresh.

    scope: what makes message_id unique when it can repeat (the Kafka topic id of its topic);
    it goes into derived ids only (ids.derive_ids).

    Raises ToolUsageError for anything that is not exactly one of the two shapes, and for a
    message_id or source that is neither a str nor an int (an int counts as its digits).
    """
    if type(message_id) is not str or type(source) is not str:
        message_id = delivery_text(message_id, "message_id")
        source = delivery_text(source, "source")
    obj = _decode(payload)
    keys = obj.keys()
    if len(keys) != 2 or "tool" not in keys or "arguments" not in keys:  # not the usual call
        if keys == _RESUME_KEYS:
            approval_id = _name(obj, "approval_id")
            run_id, call_id = derive_ids(message_id, source, scope) if message_id else _fresh_pair()
            return _envelope(None, {}, run_id, call_id, approval_id, message_id, source)
        _check_call_keys(keys)
    tool = _name(obj, "tool")
    arguments = obj["arguments"]
    if type(arguments) is not dict:
        raise ToolUsageError("arguments must be a JSON object")
    given_run = _name(obj, "run_id") if "run_id" in obj else None
    given_call = _name(obj, "call_id") if "call_id" in obj else None
    if given_run is not None and given_call is not None:
        run_id, call_id = given_run, given_call
    elif given_run is not None:
        run_id, call_id = given_run, derive_call_id(given_run, message_id, source, scope)
    elif given_call is not None:
        run_id, call_id = derive_run_id(given_call, source), given_call
    else:
        run_id, call_id = derive_ids(message_id, source, scope) if message_id else _fresh_pair()
    return _envelope(tool, arguments, run_id, call_id, None, message_id, source)


def _check_call_keys(keys: KeysView[str]) -> None:
    """ToolUsageError unless keys are a call's: tool and arguments, run_id and call_id."""
    if "approval_id" in keys:
        raise ToolUsageError("a resume envelope carries only approval_id")
    extra = keys - _CALL_KEYS
    if extra:
        names = ", ".join(repr(k[:40]) for k in sorted(extra)[:5])
        raise ToolUsageError(f"envelope has unknown keys: {names}")
    if "tool" not in keys or "arguments" not in keys:
        raise ToolUsageError("envelope needs tool and arguments, or only approval_id")


def _fresh_pair() -> tuple[str, str]:
    return fresh_id("run_"), fresh_id("call_")
