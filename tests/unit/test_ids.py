"""Derived ids: deterministic, namespaced by source, injective over (source, message_id)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stream_adapter.core.ids import (
    _digest,
    approval_id_for,
    derive_call_id,
    derive_ids,
    derive_run_id,
    fresh_id,
    legacy_approval_id,
)

text = st.text(max_size=30)


@given(text, text)
def test_same_delivery_same_ids(message_id: str, source: str) -> None:
    assert derive_ids(message_id, source) == derive_ids(message_id, source)
    run_id, call_id = derive_ids(message_id, source)
    assert run_id != call_id and run_id.startswith("run_") and call_id.startswith("call_")


@given(text, text, text)
def test_different_sources_never_collide(message_id: str, a: str, b: str) -> None:
    if a != b:
        ids_a, ids_b = set(derive_ids(message_id, a)), set(derive_ids(message_id, b))
        assert not ids_a & ids_b


@given(text, text, text, text)
def test_distinct_pairs_never_collide(m1: str, s1: str, m2: str, s2: str) -> None:
    if (m1, s1) != (m2, s2):
        assert not set(derive_ids(m1, s1)) & set(derive_ids(m2, s2))


@given(text, text)
def test_derive_ids_is_the_two_digests(message_id: str, source: str) -> None:
    expected = (
        "run_" + _digest("run", source, message_id),
        "call_" + _digest("call", source, message_id),
    )
    assert derive_ids(message_id, source) == expected


def test_many_sources_keep_their_ids() -> None:
    """More sources than the primed hashers kept: each still derives its own digests."""
    first = [derive_ids("m", f"source-{n}") for n in range(200)]
    again = [derive_ids("m", f"source-{n}") for n in range(200)]
    assert first == again
    assert first[7] == (
        "run_" + _digest("run", "source-7", "m"),
        "call_" + _digest("call", "source-7", "m"),
    )


def test_encoding_is_length_prefixed() -> None:
    assert derive_ids("c", "a:b") != derive_ids("b:c", "a")
    assert derive_ids("b|c", "a") != derive_ids("c", "a|b")
    assert approval_id_for("a:b", "c", "s") != approval_id_for("a", "b:c", "s")


def test_one_id_derivations() -> None:
    assert derive_call_id("r", "m", "s") == derive_call_id("r", "m", "s")
    assert derive_call_id("r", "m", "s") != derive_call_id("r", "m", "t")
    assert derive_call_id("r", "", "s") != derive_call_id("r", "", "s")  # fresh without delivery id
    assert derive_run_id("c", "s") == derive_run_id("c", "s") != derive_run_id("c", "t")


def test_approval_ids_are_deterministic() -> None:
    assert approval_id_for("r", "c", "s") == approval_id_for("r", "c", "s")
    assert approval_id_for("r", "c", "s") != approval_id_for("r", "d", "s")


def test_two_sources_with_the_same_ids_never_share_an_approval() -> None:
    assert approval_id_for("r", "c", "kafka") != approval_id_for("r", "c", "sqs")
    assert legacy_approval_id("r", "c") not in {
        approval_id_for("r", "c", s) for s in ("", "kafka", "sqs")
    }


def test_a_scope_makes_a_repeated_delivery_id_another_call() -> None:
    """A topic created again starts its offsets at 0: its topic id (the scope) differs."""
    old, new = "3f1e0c1a-0000-4000-8000-000000000001", "9b2d7e44-0000-4000-8000-000000000002"
    assert derive_ids("calls:0:1", "kafka", old) != derive_ids("calls:0:1", "kafka", new)
    assert derive_ids("calls:0:1", "kafka", old) == derive_ids("calls:0:1", "kafka", old)
    assert derive_ids("calls:0:1", "kafka", old) != derive_ids("calls:0:1", "kafka")
    assert derive_ids("calls:0:1", "kafka", "") == derive_ids("calls:0:1", "kafka")
    assert derive_call_id("r", "calls:0:1", "kafka", old) != derive_call_id(
        "r", "calls:0:1", "kafka", new
    )


def test_fresh_ids_are_unique() -> None:
    assert len({fresh_id() for _ in range(1000)}) == 1000
    assert fresh_id("run_").startswith("run_")
