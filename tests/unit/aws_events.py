"""Realistic function-host event documents and a Lambda-like context, for the handler tests."""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

REGION = "eu-west-1"
ACCOUNT = "123456789012"


def _json(body: Any) -> str:
    return body if isinstance(body, str) else json.dumps(body)


def sqs_event(
    bodies: list[Any], *, fifo: bool = False, queue: str = "tool-calls"
) -> dict[str, Any]:
    """An SQS batch as Lambda delivers it (standard, or FIFO with group and sequence)."""
    name = queue + (".fifo" if fifo else "")
    records = []
    for index, body in enumerate(bodies):
        attributes = {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1735689600000",
            "SenderId": "AIDAEXAMPLEEXAMPLE",
            "ApproximateFirstReceiveTimestamp": "1735689600123",
        }
        if fifo:
            attributes |= {
                "SequenceNumber": str(18849496460467696128 + index),
                "MessageGroupId": "run-1",
                "MessageDeduplicationId": f"dedup-{index}",
            }
        text = _json(body)
        records.append(
            {
                "messageId": str(uuid.uuid4()),
                "receiptHandle": "AQEB" + uuid.uuid4().hex,
                "body": text,
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": "0" * 32,
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}",
                "awsRegion": REGION,
            }
        )
    return {"Records": records}


def eventbridge_event(detail: Any, *, event_id: str | None = None) -> dict[str, Any]:
    """An EventBridge event whose detail is the envelope."""
    return {
        "version": "0",
        "id": event_id or str(uuid.uuid4()),
        "detail-type": "Tool call",
        "source": "com.example.agents",
        "account": ACCOUNT,
        "time": "2025-01-01T00:00:00Z",
        "region": REGION,
        "resources": [],
        "detail": detail,
    }


def kafka_event(
    partitions: dict[int, list[Any]],
    *,
    topic: str = "tool-calls",
    first_offset: int = 100,
    self_managed: bool = False,
) -> dict[str, Any]:
    """An MSK (or self-managed Kafka) batch: records per topic-partition, base64 values."""
    records = {}
    for partition, bodies in partitions.items():
        records[f"{topic}-{partition}"] = [
            {
                "topic": topic,
                "partition": partition,
                "offset": first_offset + index,
                "timestamp": 1735689600000,
                "timestampType": "CREATE_TIME",
                "key": base64.b64encode(b"run-1").decode(),
                "value": base64.b64encode(_json(body).encode()).decode(),
                "headers": [{"content-type": list(b"application/json")}],
            }
            for index, body in enumerate(bodies)
        ]
    event: dict[str, Any] = {"records": records}
    if self_managed:
        event |= {"eventSource": "SelfManagedKafka", "bootstrapServers": "b-1.example:9092"}
    else:
        event |= {
            "eventSource": "aws:kafka",
            "eventSourceArn": f"arn:aws:kafka:{REGION}:{ACCOUNT}:cluster/demo/abc-1",
            "bootstrapServers": "b-1.demo.kafka.eu-west-1.amazonaws.com:9098",
        }
    return event


@dataclass
class LambdaContext:
    """The parts of Lambda's context object the handler reads."""

    remaining_s: float = 60.0
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_name: str = "tool-handler"
    _started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        left = self.remaining_s - (time.monotonic() - self._started)
        return max(0, int(left * 1000))
