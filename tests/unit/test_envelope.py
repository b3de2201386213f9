"""parse_envelope: strict shapes, ToolUsageError and nothing else, ids that round-trip."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stream_adapter import MAX_ENVELOPE_BYTES, Envelope, ToolUsageError, parse_envelope
from stream_adapter.core._json import MAX_DEPTH
from stream_adapter.core.ids import derive_ids

CALL_KEYS = {"tool", "arguments", "run_id", "call_id"}

ids = st.text(min_size=1, max_size=40)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
arguments = st.dictionaries(st.text(max_size=10), json_values, max_size=5)


@st.composite
def valid_calls(draw: st.DrawFn) -> dict[str, Any]:
    env: dict[str, Any] = {"tool": draw(ids), "arguments": draw(arguments)}
    if draw(st.booleans()):
        env["run_id"] = draw(ids)
    if draw(st.booleans()):
        env["call_id"] = draw(ids)
    return env


def is_valid(obj: Any) -> bool:
    """An independent statement of contract §3's shapes."""
    if not isinstance(obj, dict):
        return False
    if set(obj) == {"approval_id"}:
        return isinstance(obj["approval_id"], str) and 0 < len(obj["approval_id"]) <= 256
    if not {"tool", "arguments"} <= set(obj) <= CALL_KEYS:
        return False
    names = [obj[k] for k in ("tool", "run_id", "call_id") if k in obj]
    return all(isinstance(n, str) and 0 < len(n) <= 256 for n in names) and isinstance(
        obj["arguments"], dict
    )


def encodings(obj: Any) -> list[bytes | str | dict[str, Any]]:
    text = json.dumps(obj)
    out: list[bytes | str | dict[str, Any]] = [
        text,
        text.encode(),
        json.dumps(obj, ensure_ascii=False),
    ]
    if isinstance(obj, dict):
        out.append(obj)
    return out


@given(st.binary(max_size=300))
@example(b"\xff\xfe")
@example(b'{"tool": "\xc3\x28", "arguments": {}}')
@example(b"")
def test_random_bytes_raise_only_usage_errors(payload: bytes) -> None:
    with contextlib.suppress(ToolUsageError):
        parse_envelope(payload)


@given(
    json_values
    | valid_calls()
    | st.dictionaries(st.sampled_from(sorted(CALL_KEYS | {"approval_id", "approved"})), json_values)
)
def test_any_json_is_valid_exactly_when_the_spec_says(obj: Any) -> None:
    for payload in encodings(obj):
        if is_valid(obj):
            env = parse_envelope(payload)
            assert env.is_resume == ("approval_id" in obj)
        else:
            with pytest.raises(ToolUsageError):
                parse_envelope(payload)


@given(valid_calls(), st.text(max_size=20), st.text(max_size=10))
def test_valid_calls_round_trip(obj: dict[str, Any], message_id: str, source: str) -> None:
    for payload in encodings(obj):
        env = parse_envelope(payload, message_id=message_id, source=source)
        assert env.tool == obj["tool"]
        assert env.arguments == obj["arguments"]
        assert env.approval_id is None and not env.is_resume
        for key in ("run_id", "call_id"):
            if key in obj:
                assert getattr(env, key) == obj[key]
        again = parse_envelope(json.dumps(env.to_payload()))
        assert (again.tool, again.arguments, again.run_id, again.call_id) == (
            env.tool,
            env.arguments,
            env.run_id,
            env.call_id,
        )


@given(ids)
def test_resume_round_trips(approval_id: str) -> None:
    env = parse_envelope(json.dumps({"approval_id": approval_id}))
    assert env.is_resume and env.approval_id == approval_id and env.tool is None
    assert env.to_payload() == {"approval_id": approval_id}


@given(
    valid_calls(),
    st.sampled_from(["approved", "reviewer", "decision", "reason", "x", "approval_id"]),
    json_values,
)
def test_extra_and_decision_looking_keys_are_refused(
    obj: dict[str, Any], key: str, value: Any
) -> None:
    obj = {**obj, key: value}
    for payload in encodings(obj):
        with pytest.raises(ToolUsageError):
            parse_envelope(payload)


@given(st.integers(min_value=1, max_value=3000))
@example(MAX_DEPTH - 1)
@example(MAX_DEPTH)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
def test_deep_nesting_is_a_usage_error_never_a_crash(depth: int) -> None:
    text = '{"tool":"t","arguments":{"a":' + "[" * depth + "]" * depth + "}}"
    nested: Any = []
    for _ in range(depth - 1):
        nested = [nested]
    for payload in (text, text.encode(), {"tool": "t", "arguments": {"a": nested}}):
        if depth + 1 <= MAX_DEPTH:  # the envelope is level 0, arguments level 1
            assert parse_envelope(payload).tool == "t"
        else:
            with pytest.raises(ToolUsageError):
                parse_envelope(payload)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
def test_nan_and_infinity_are_refused(constant: str) -> None:
    with pytest.raises(ToolUsageError):
        parse_envelope('{"tool":"t","arguments":{"x":' + constant + "}}")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_in_a_mapping_is_refused(value: float) -> None:
    with pytest.raises(ToolUsageError):
        parse_envelope({"tool": "t", "arguments": {"x": [value]}})


@given(st.integers(min_value=1 << 64) | st.integers(max_value=-(1 << 63) - 1))
@example(1 << 64)
@example(-(1 << 63) - 1)
@example(10**5000)
def test_integers_beyond_64_bits_are_refused(n: int) -> None:
    text = '{"tool":"t","arguments":{"n":%s}}'
    try:
        payload = text % n
    except ValueError:  # past Python's int-to-str limit: build the digits directly
        payload = text % ("9" * 5000)
    with pytest.raises(ToolUsageError):
        parse_envelope(payload)
    if abs(n) < 10**4000:
        with pytest.raises(ToolUsageError):
            parse_envelope({"tool": "t", "arguments": {"n": n}})


@pytest.mark.parametrize("n", [(1 << 64) - 1, -(1 << 63), 0, 9.3e18, -1e300])
def test_numbers_at_the_edges_are_kept(n: float) -> None:
    assert parse_envelope(f'{{"tool":"t","arguments":{{"n":{n!r}}}}}').arguments["n"] == n


@pytest.mark.parametrize(
    "payload",
    [
        '{"tool":"a","tool":"b","arguments":{}}',
        '{"tool":"a","arguments":{"x":1,"x":2}}',
        '{"tool":"a","arguments":{"x":{"y":1,"y":1}}}',
        '{"tool":"a","arguments":{"\\u0078":1,"x":2}}',
        '{"tool":"a","arguments":{"x":"a:b","x":"c"}}',
        '{"approval_id":"a","approval_id":"b"}',
    ],
)
def test_duplicate_keys_are_refused(payload: str) -> None:
    with pytest.raises(ToolUsageError):
        parse_envelope(payload)


@given(valid_calls())
def test_escaped_and_colon_heavy_payloads_parse_on_the_exact_path(obj: dict[str, Any]) -> None:
    obj["arguments"] = {**obj["arguments"], "url": "http://h:1/a:b", "\u00e9:": "\u2603"}
    env = parse_envelope(json.dumps(obj, ensure_ascii=True).encode())
    assert env.arguments == obj["arguments"]


@given(valid_calls())
def test_compact_payloads_parse_as_the_stdlib_reads_them(obj: dict[str, Any]) -> None:
    """A payload that is orjson's own encoding of its value takes the shortest path."""
    payload = orjson.dumps(obj)
    env = parse_envelope(payload)
    assert env.tool == obj["tool"] and env.arguments == json.loads(payload)["arguments"]


def _sized(size: int) -> bytes:
    head, tail = b'{"tool":"t","arguments":{"pad":"', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def test_size_limit_is_exact() -> None:
    assert parse_envelope(_sized(MAX_ENVELOPE_BYTES)).tool == "t"
    assert parse_envelope(_sized(MAX_ENVELOPE_BYTES).decode()).tool == "t"
    with pytest.raises(ToolUsageError, match="larger"):
        parse_envelope(_sized(MAX_ENVELOPE_BYTES + 1))
    with pytest.raises(ToolUsageError, match="larger"):
        parse_envelope(_sized(MAX_ENVELOPE_BYTES + 1).decode())
    with pytest.raises(ToolUsageError, match="larger"):
        parse_envelope(bytearray(_sized(MAX_ENVELOPE_BYTES + 1)))


def test_size_of_str_counts_utf8_bytes() -> None:
    text = _sized(MAX_ENVELOPE_BYTES).decode().replace("xx", "\u00e9", 1)  # same bytes
    assert parse_envelope(text).tool == "t"
    with pytest.raises(ToolUsageError):
        parse_envelope(text.replace("x", "\u00e9", 1))  # one byte more


@pytest.mark.parametrize(
    "obj",
    [
        [],
        "x",
        1,
        None,
        {},
        {"tool": "t"},
        {"arguments": {}},
        {"tool": "", "arguments": {}},
        {"tool": 1, "arguments": {}},
        {"tool": "t", "arguments": []},
        {"tool": "t", "arguments": "{}"},
        {"tool": "t", "arguments": {}, "run_id": ""},
        {"tool": "t", "arguments": {}, "call_id": 5},
        {"tool": "t", "arguments": {}, "approval_id": "a"},
        {"approval_id": ""},
        {"approval_id": None},
        {"approval_id": "a", "run_id": "r"},
        {"tool": "t" * 257, "arguments": {}},
    ],
)
def test_bad_shapes(obj: Any) -> None:
    for payload in encodings(obj):
        with pytest.raises(ToolUsageError):
            parse_envelope(payload)


@pytest.mark.parametrize("payload", [b'"\xed\xa0\x80"', "\ud800", b"\x00", b"{", 42, object()])
def test_odd_inputs(payload: Any) -> None:
    with pytest.raises(ToolUsageError):
        parse_envelope(payload)


def test_mapping_with_non_json_values_is_refused() -> None:
    for bad in ({1: 2}, {"x": object()}, {"x": {"y": b"bytes"}}):
        with pytest.raises(ToolUsageError):
            parse_envelope({"tool": "t", "arguments": bad})


def test_ids_from_the_delivery_id() -> None:
    env = parse_envelope(b'{"tool":"t","arguments":{}}', message_id="calls:0:7", source="kafka")
    assert (env.run_id, env.call_id) == derive_ids("calls:0:7", "kafka")
    assert (env.message_id, env.source) == ("calls:0:7", "kafka")


def test_derived_ids_never_change_between_versions() -> None:
    # A message redelivered across an upgrade must name the same call (and approval) again.
    assert derive_ids("calls:0:7", "kafka") == (
        "run_7603eee193e920c4a43d2a3e5ea832a1",
        "call_5822bb824ae2cc75f94680c07475a28f",
    )
    assert derive_ids("t:1:\u00fc\ud800", "s") == (
        "run_eac4b31f4242a9e4bc1ee789bf7cff5a",
        "call_1c8233e7715ee3d95086fd633644675a",
    )


def test_fresh_ids_without_a_delivery_id() -> None:
    a = parse_envelope(b'{"tool":"t","arguments":{}}')
    b = parse_envelope(b'{"tool":"t","arguments":{}}')
    assert len({a.run_id, b.run_id, a.call_id, b.call_id}) == 4


def test_one_id_given_derives_the_other() -> None:
    by_run = [
        parse_envelope('{"tool":"t","arguments":{},"run_id":"r"}', message_id="m", source="s")
        for _ in range(2)
    ]
    assert by_run[0].call_id == by_run[1].call_id and by_run[0].run_id == "r"
    other = parse_envelope('{"tool":"t","arguments":{},"run_id":"r"}', message_id="m2", source="s")
    assert other.call_id != by_run[0].call_id
    by_call = parse_envelope('{"tool":"t","arguments":{},"call_id":"c"}', source="s")
    assert (
        by_call.call_id == "c"
        and by_call.run_id
        == parse_envelope('{"tool":"t","arguments":{},"call_id":"c"}', source="s").run_id
    )


def test_envelope_is_frozen() -> None:
    env = parse_envelope(b'{"tool":"t","arguments":{}}')
    assert isinstance(env, Envelope)
    with pytest.raises(AttributeError):
        env.tool = "x"  # type: ignore[misc]


@given(arguments, st.text(max_size=8), json_values, json_values, st.booleans(), st.booleans())
def test_any_duplicated_key_is_refused(
    args: dict[str, Any], key: str, first: Any, second: Any, ascii_only: bool, compact: bool
) -> None:
    """Neither shortcut (the compact text, the colon count) misses a duplicate, escaped or
    not."""
    seps = (",", ":") if compact else None
    body = json.dumps(args, ensure_ascii=ascii_only, separators=seps)[1:-1]

    def pair(value: Any) -> str:
        return json.dumps(key, ensure_ascii=ascii_only) + ":" + json.dumps(value, separators=seps)

    inner = ",".join(p for p in (pair(first), body, pair(second)) if p)
    with pytest.raises(ToolUsageError):
        parse_envelope('{"tool":"t","arguments":{' + inner + "}}")


def test_parsed_envelope_is_a_whole_frozen_envelope() -> None:
    """parse_envelope builds its Envelope past __init__: the result must still be one in
    every way a caller can tell (type, equality, frozen, replace, copy, pickle)."""
    parsed = parse_envelope(b'{"tool":"echo","arguments":{"a":1}}', message_id="t:0:7")
    built = Envelope(
        parsed.tool,
        parsed.arguments,
        parsed.run_id,
        parsed.call_id,
        None,
        "t:0:7",
        "",
    )
    assert type(parsed) is Envelope
    assert parsed == built and built == parsed
    assert parsed != tuple(getattr(built, f.name) for f in dataclasses.fields(built))
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.tool = "other"  # type: ignore[misc]
    changed = dataclasses.replace(parsed, tool="other")
    assert type(changed) is Envelope and changed.tool == "other" and changed.run_id == parsed.run_id
    assert copy.copy(parsed) == parsed
    assert pickle.loads(pickle.dumps(parsed)) == parsed
    resume = parse_envelope(b'{"approval_id":"appr_1"}', message_id="t:0:8")
    assert type(resume) is Envelope and resume.is_resume
