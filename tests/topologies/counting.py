"""The demo topology plus user code of its own: an ordinary Faust agent and table on its app.

Counts replies by tool from the replies topic, the way any Faust app counts: re-keyed by
tool (`group_by`), then a table updated per event. It runs beside the tool-call flows.
"""

from __future__ import annotations

from typing import Any

from topologies.demo import app, settings

replies = app.topic(settings.replies_topic, key_serializer="raw", value_serializer="json")
replies_by_tool = app.Table("replies-by-tool", default=int, partitions=settings.partitions)


@app.agent(replies)
async def count_replies(stream: Any) -> None:
    async for reply in stream.group_by(lambda reply: reply["tool"], name="tool"):
        replies_by_tool[reply["tool"]] += 1
