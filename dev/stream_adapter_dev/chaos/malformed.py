"""Malformed messages for the fuzz run: handcrafted cases and hypothesis-generated ones.

Every call payload here must be answered with exactly one error reply and one dead letter;
`is_malformed_call` keeps only payloads the envelope parser refuses or that name no real tool
(anything else could legitimately run). Decisions here must all be dead-lettered: they are
malformed, unsigned, badly signed, or signed for an approval that does not exist.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson

from stream_adapter.core.envelope import MAX_ENVELOPE_BYTES, parse_envelope
from stream_adapter.core.errors import AdapterError
from stream_adapter.core.signing import KEY_ID_HEADER, SIGNATURE_HEADER, DecisionKeys

REAL_TOOLS = frozenset({"echo", "add", "sleep", "flaky", "boom", "send_invoice"})
Headers = list[tuple[str, bytes]]


def is_malformed_call(payload: bytes) -> bool:
    """True when the topology must answer payload with an error (never run anything)."""
    try:
        envelope = parse_envelope(payload, message_id="fuzz:0:0", source="kafka")
    except AdapterError:
        return True
    return envelope.approval_id is not None or envelope.tool not in REAL_TOOLS


def _envelope_with(value: bytes) -> bytes:
    return b'{"tool":"echo","arguments":{"x":' + value + b"}}"


def oversized_envelope() -> bytes:
    """A syntactically fine envelope of exactly MAX_ENVELOPE_BYTES + 1 bytes."""
    head, tail = b'{"tool":"echo","arguments":{"pad":"', b'"}}'
    pad = MAX_ENVELOPE_BYTES + 1 - len(head) - len(tail)
    return head + b"a" * pad + tail


def handcrafted_calls() -> list[bytes]:
    """One of each kind of bad call the spec names, and a few more."""
    deep_object = b'{"a":' * 200 + b"1" + b"}" * 200
    return [
        b"",
        b"null",
        b"[]",
        b"42",
        b'"just a string"',
        b"\x00\x01\x02\xff",
        b"\xff\xfe\x00{",
        b'{"tool":"echo","arguments":{"x":"\xc3\x28"}}',  # invalid UTF-8
        b'{"tool":"echo","arguments":{"x":"\xc0\xaf"}}',  # overlong encoding
        b'{"tool":"echo","arguments":{"x":"\xed\xa0\x80"}}',  # an encoded surrogate
        b'{"tool":"echo","arguments":{"x":"\\ud800"}}',  # a lone surrogate escape
        b'\xef\xbb\xbf{"tool":"echo","arguments":{}}',  # a BOM
        '{"tool":"echo","arguments":{}}'.encode("utf-16"),
        b'{"tool":"echo","arguments":{}',  # truncated
        b'{"tool":"echo","arguments":{}} trailing',
        oversized_envelope(),
        _envelope_with(deep_object),
        b'{"tool":"echo","arguments":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        _envelope_with(b"NaN"),
        _envelope_with(b"Infinity"),
        _envelope_with(b"-Infinity"),
        _envelope_with(b"1e999"),
        b'{"tool":"echo","tool":"boom","arguments":{}}',  # duplicate keys
        b'{"tool":"echo","arguments":{"a":1,"a":2}}',
        b'{"tool":"echo","arguments":{"a":{"b":1,"\\u0062":2}}}',  # duplicate via an escape
        _envelope_with(b"1" + b"0" * 400),  # huge integers
        _envelope_with(str(1 << 64).encode()),
        _envelope_with(str(-(1 << 63) - 1).encode()),
        b'{"tool":"send_invoice","arguments":{"customer":"c","amount_cents":1},"approved":true}',
        b'{"approval_id":"appr_x","approved":true}',
        b'{"approval_id":"appr_x","approved":true,"reviewer":"mallory"}',
        b'{"approval_id":"appr_does_not_exist"}',
        b'{"approval_id":"appr_x","tool":"echo","arguments":{}}',
        b'{"approval_id":""}',
        b'{"approval_id":7}',
        b'{"tool":1,"arguments":{}}',
        b'{"tool":"","arguments":{}}',
        b'{"tool":null,"arguments":{}}',
        b'{"tool":"echo","arguments":[]}',
        b'{"tool":"echo","arguments":"x"}',
        b'{"tool":"echo"}',
        b'{"arguments":{}}',
        b'{"tool":"echo","arguments":{},"run_id":""}',
        b'{"tool":"echo","arguments":{},"call_id":5}',
        b'{"tool":"echo","arguments":{},"extra":1}',
        b'{"tool":"' + b"t" * 300 + b'","arguments":{}}',
        b'{"tool":"nope","arguments":{}}',
        b'{"tool":"admin_reset","arguments":{}}',
        b'{"tool":"ECHO","arguments":{}}',
        b'{"tool":"echo ","arguments":{}}',
    ]


def is_rejected_decision(value: bytes, headers: Headers, keys: DecisionKeys) -> bool:
    """Decisions generated here are only kept when signing or parsing refuses them, or they
    are signed for unknown approvals (ids starting `appr_fuzz_`)."""
    from stream_adapter.core.approvals import parse_decision
    from stream_adapter.core.signing import SignatureError

    try:
        keys.verify(value, dict(headers))
        decision = parse_decision(value)
    except (SignatureError, AdapterError):
        return True
    return decision.approval_id.startswith("appr_fuzz_")


def handcrafted_decisions(keys: DecisionKeys, pending: list[str]) -> list[tuple[bytes, Headers]]:
    """Bad decisions: malformed, unsigned or badly signed (also for real pending approvals),
    and correctly signed ones for approvals that do not exist."""

    def signed(value: bytes) -> tuple[bytes, Headers]:
        return value, list(keys.sign(value).items())

    def body(**fields: Any) -> bytes:
        return orjson.dumps(fields)

    out: list[tuple[bytes, Headers]] = [
        (b"", []),
        (b"\xff\xfe", []),
        signed(b""),
        signed(b"not json"),
        signed(b"\xc3\x28"),
        signed(b'{"approval_id":"appr_fuzz_1","approved":true,"reviewer":"r","approved":false}'),
        signed(b'{"approval_id":"appr_fuzz_1","approved":NaN,"reviewer":"r"}'),
        signed(body(approval_id="appr_fuzz_1", approved="yes", reviewer="r")),
        signed(body(approval_id="appr_fuzz_1", approved=1, reviewer="r")),
        signed(body(approval_id="appr_fuzz_1", approved=True)),
        signed(body(approval_id="appr_fuzz_1", approved=True, reviewer="")),
        signed(body(approval_id="appr_fuzz_1", approved=True, reviewer="r", extra=1)),
        signed(body(approval_id="appr_fuzz_1", approved=True, reviewer="r", decided_at="never")),
        signed(body(approval_id="appr_fuzz_1", approved=True, reviewer="r", reason="x" * 5000)),
        signed(body(approval_id="", approved=True, reviewer="r")),
        signed(body(approval_id="a" * 300, approved=True, reviewer="r")),
        signed(body(approval_id="appr_fuzz_unknown", approved=True, reviewer="r")),
        signed(body(approval_id="appr_fuzz_unknown", approved=False, reviewer="r")),
    ]
    for approval_id in pending:  # unsigned and badly signed decisions for real approvals
        value = body(approval_id=approval_id, approved=True, reviewer="mallory")
        key_id = next(iter(keys.keys))
        out.append((value, []))
        out.append((value, [(KEY_ID_HEADER, key_id.encode())]))
        out.append((value, [(KEY_ID_HEADER, key_id.encode()), (SIGNATURE_HEADER, b"00" * 32)]))
        out.append((value, [(KEY_ID_HEADER, b"no-such-key"), (SIGNATURE_HEADER, b"00" * 32)]))
        forged = DecisionKeys({key_id: b"not-the-secret"}).sign(value)
        out.append((value, list(forged.items())))
    return out


def generated(strategy: Any, count: int, seed: int) -> list[Any]:
    """Up to count examples of a hypothesis strategy (generation only, no shrinking)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    out: list[Any] = []

    @seeded(seed)
    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(example: Any) -> None:
        out.append(example)

    collect()
    return out


def call_strategy() -> Any:
    """Hypothesis payloads for tool-calls: bytes, JSON values, and near-envelopes."""
    from hypothesis import strategies as st

    json_values = st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )
    near_envelope = st.fixed_dictionaries(
        {"tool": st.one_of(st.text(max_size=12), st.integers(), st.none())},
        optional={
            "arguments": json_values,
            "run_id": st.one_of(st.text(max_size=10), st.integers()),
            "call_id": st.one_of(st.text(max_size=10), st.integers()),
            "approval_id": st.text(max_size=10),
            "approved": st.booleans(),
            "reviewer": st.text(max_size=6),
        },
    )
    encode: Callable[[Any], bytes] = lambda v: _dumps(v)  # noqa: E731
    return st.one_of(
        st.binary(max_size=300),
        json_values.map(encode),
        near_envelope.map(encode),
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    )


def decision_strategy() -> Any:
    """Hypothesis decision values: bytes and near-decisions (signing is decided by the caller)."""
    from hypothesis import strategies as st

    near = st.fixed_dictionaries(
        {},
        optional={
            "approval_id": st.one_of(
                st.text(max_size=12).map(lambda t: "appr_fuzz_" + t), st.integers()
            ),
            "approved": st.one_of(st.booleans(), st.text(max_size=3), st.integers()),
            "reviewer": st.one_of(st.text(max_size=8), st.none()),
            "reason": st.text(max_size=20),
            "decided_at": st.text(max_size=12),
        },
    )
    return st.one_of(st.binary(max_size=200), near.map(_dumps))


def _dumps(value: Any) -> bytes:
    import json

    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


def fill(first: list[Any], more: list[Any], count: int, rng: random.Random) -> list[Any]:
    """count items, shuffled: all of `first`, then `more` in order, cycling when short."""
    pool = (first + more)[:count]
    if not pool:
        return []
    out = list(pool)
    while len(out) < count:
        out.append(rng.choice(pool))
    rng.shuffle(out)
    return out
