"""Contender 4: a Quix Streams application doing the same envelope -> reply work."""

from __future__ import annotations

import os
from typing import Any

from quixstreams import Application


def main() -> None:
    app = Application(
        broker_address=os.environ["BENCH_BOOTSTRAP"],
        consumer_group=os.environ["BENCH_GROUP"],
        auto_offset_reset="earliest",
        processing_guarantee="at-least-once",
        state_dir=os.environ.get("BENCH_STATE_DIR", "quix-state"),
    )
    calls = app.topic(os.environ["BENCH_CALLS"], value_deserializer="json")
    replies = app.topic(os.environ["BENCH_REPLIES"], value_serializer="json")

    def reply(envelope: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "tool": envelope["tool"], "result": envelope["arguments"]}

    app.dataframe(calls).apply(reply).to_topic(replies)
    app.run()


if __name__ == "__main__":
    main()
