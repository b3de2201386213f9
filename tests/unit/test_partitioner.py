"""Our murmur2 partitioner picks the partitions the Kafka clients pick."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given
from hypothesis import strategies as st

from stream_adapter.kafka import partitions as partitioner


@given(st.binary(max_size=300))
def test_murmur2_matches_the_reference(data: bytes) -> None:
    assert partitioner.murmur2(data) == murmur2(data)


@given(st.binary(min_size=1, max_size=64), st.integers(min_value=1, max_value=500))
def test_partition_matches_aiokafkas_default_partitioner(key: bytes, partitions: int) -> None:
    every = list(range(partitions))
    assert partitioner.partition_for(key, partitions) == DefaultPartitioner()(key, every, every)


def test_java_client_vectors() -> None:
    # Values from Kafka's own UtilsTest (murmur2 of these strings, as signed ints).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536}
    for data, signed in cases.items():
        assert partitioner.murmur2(data) == signed & 0xFFFFFFFF
