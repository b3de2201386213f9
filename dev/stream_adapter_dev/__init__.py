"""stream-adapter's developer tooling, a distribution of its own (`stream-adapter-dev`).

- `broker/`: a local Apache Kafka (KRaft) from Maven jars, one broker or a cluster, TLS and SASL;
- `kafka`: the `stream-adapter kafka` commands over it;
- `bench/`: the worker side by side with an aiokafka loop, a librdkafka loop and Quix Streams;
- `chaos/`: calls under kills, pauses, partitions and broker faults; malformed and hostile input.

The runtime (`stream_adapter`) never imports it: its commands register through the
`stream_adapter.commands` entry point (`commands.py`).
"""
