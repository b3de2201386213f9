"""The commands this distribution adds to `stream-adapter`: where each lives, and its help's
first line (so `stream-adapter -h` imports none of them)."""

from stream_adapter.commands import Lazy

COMMANDS = {
    "bench": Lazy(
        "stream_adapter_dev.bench.command:bench",
        "Measure the worker side by side with an aiokafka loop and Quix Streams apps.",
    ),
    "chaos": Lazy(
        "stream_adapter_dev.chaos.commands:chaos",
        "Calls under SIGKILLs, broker faults and scaling; exit 1 unless nothing was lost.",
    ),
    "fuzz": Lazy(
        "stream_adapter_dev.chaos.commands:fuzz",
        "Malformed calls and decisions among valid ones; exit 1 unless each got its answer.",
    ),
    "kafka": Lazy(
        "stream_adapter_dev.kafka:kafka",
        "A local Apache Kafka (KRaft) for development and tests: one broker, or a cluster.",
    ),
}
