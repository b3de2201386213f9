"""MAX_ENVELOPE_BYTES holds whatever the payload's type: bytes, str, bytearray, memoryview or
an already-decoded mapping (the cap applies to its encoded size), at exactly the same bound."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import orjson
import pytest

from stream_adapter import (
    MAX_ENVELOPE_BYTES,
    Executor,
    MemoryApprovalStore,
    ToolRegistry,
    ToolUsageError,
    handle_envelope,
    parse_envelope,
    tool_handler,
)
from tests.unit.aws_events import eventbridge_event

FORMS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "bytes": orjson.dumps,
    "str": lambda obj: orjson.dumps(obj).decode(),
    "bytearray": lambda obj: bytearray(orjson.dumps(obj)),
    "memoryview": lambda obj: memoryview(orjson.dumps(obj)),
    "dict": lambda obj: obj,
    "mapping": MappingProxyType,
}


EMPTY = len(orjson.dumps({"tool": "keep", "arguments": {"text": ""}}))


def envelope_of(chars: int, char: str) -> dict[str, Any]:
    return {"tool": "keep", "arguments": {"text": char * chars}}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("char", ["x", "\u20ac"], ids=["ascii", "3-byte"])
def test_the_cap_is_the_same_for_every_form(form: str, char: str) -> None:
    most = (MAX_ENVELOPE_BYTES - EMPTY) // len(char.encode())  # the most chars that fit
    at_cap, past_cap = envelope_of(most, char), envelope_of(most + 1, char)
    assert len(orjson.dumps(at_cap)) <= MAX_ENVELOPE_BYTES < len(orjson.dumps(past_cap))
    parse_envelope(FORMS[form](at_cap))
    with pytest.raises(ToolUsageError, match=f"larger than {MAX_ENVELOPE_BYTES} bytes"):
        parse_envelope(FORMS[form](past_cap))


class Keeper:
    def __init__(self) -> None:
        self.kept: list[int] = []
        self.store = MemoryApprovalStore()
        registry = ToolRegistry()

        @registry.tool
        async def keep(text: str) -> int:
            self.kept.append(len(text))
            return len(text)

        @registry.tool(confirm=True)
        async def park(text: str) -> int:
            return len(text)

        self.executor = Executor(registry, self.store)


@pytest.mark.parametrize("tool", ["keep", "park"])
async def test_a_five_megabyte_mapping_is_refused_and_nothing_runs_or_parks(tool: str) -> None:
    keeper = Keeper()
    big = {"tool": tool, "arguments": {"text": "x" * 5_000_000}}
    with pytest.raises(ToolUsageError, match="larger than"):
        await handle_envelope(keeper.executor, big)
    assert keeper.kept == [] and await keeper.store.list() == []


def test_an_eventbridge_detail_is_capped_too() -> None:
    keeper = Keeper()
    event = eventbridge_event({"tool": "park", "arguments": {"text": "x" * 5_000_000}})
    with pytest.raises(ToolUsageError, match="larger than"):
        tool_handler(keeper.executor)(event)
    assert keeper.kept == []


def test_a_mapping_that_cannot_be_encoded_is_refused() -> None:
    with pytest.raises(ToolUsageError, match="UTF-8"):
        parse_envelope({"tool": "keep", "arguments": {"text": "lone \ud800 surrogate"}})
