"""Contenders 4 and 5: a Quix Streams application doing the same envelope -> reply work, at
least once, or exactly once at a given checkpoint interval (`BENCH_COMMIT_INTERVAL_S`)."""

from __future__ import annotations

import os
from typing import Any

from quixstreams import Application

from stream_adapter.settings import Settings


def main() -> None:
    exactly_once = os.environ.get("BENCH_GUARANTEE") == "exactly-once"
    # Replies compressed with the environment's COMPRESSION, like the worker's (librdkafka
    # writes lz4 in LZ4's fast mode, as the worker does).
    options: dict[str, Any] = {
        "producer_extra_config": {"compression.type": Settings().compression},
    }
    if "BENCH_COMMIT_INTERVAL_S" in os.environ:
        options["commit_interval"] = float(os.environ["BENCH_COMMIT_INTERVAL_S"])
    app = Application(
        broker_address=os.environ["BENCH_BOOTSTRAP"],
        consumer_group=os.environ["BENCH_GROUP"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if exactly_once else "at-least-once",
        state_dir=os.environ.get("BENCH_STATE_DIR", "quix-state"),
        **options,
    )
    calls = app.topic(os.environ["BENCH_CALLS"], value_deserializer="json")
    replies = app.topic(os.environ["BENCH_REPLIES"], value_serializer="json")

    def reply(envelope: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "tool": envelope["tool"], "result": envelope["arguments"]}

    app.dataframe(calls).apply(reply).to_topic(replies)
    app.run()


if __name__ == "__main__":
    main()
