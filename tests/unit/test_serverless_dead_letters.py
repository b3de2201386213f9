"""tool_handler over a real SQS-compatible server (moto's): a non-retryable failure is
dead-lettered and acknowledged, so the queue never delivers it again and its tool runs once.

`EventSourceMapping` plays Lambda's SQS event source mapping with ReportBatchItemFailures:
it receives a batch, invokes the handler, deletes what succeeded and makes every listed
failure visible again at once (a zero visibility timeout, so a redelivery is not waited for).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from stream_adapter import (
    DeadLetter,
    Executor,
    MemoryApprovalStore,
    RunSync,
    SqsDeadLetters,
    ToolFailed,
    ToolRegistry,
    tool_handler,
)
from tests.unit.aws_events import LambdaContext, kafka_event

REGION = "eu-west-1"
FAIL = {"tool": "fail", "arguments": {}}
FLAKY = {"tool": "flaky", "arguments": {}}
OK = {"tool": "ok", "arguments": {"n": 1}}
UNKNOWN = {"tool": "nope", "arguments": {}}


class EventSourceMapping:
    """Lambda's SQS trigger with ReportBatchItemFailures, over a real queue."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def poll(self, handler: Any) -> int:
        """One batch: receive, invoke, delete the done, release the failed; how many came."""
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not messages:
            return 0
        event = {"Records": [self._record(m) for m in messages]}
        answer = handler(event, LambdaContext())
        failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
        for m in messages:
            if m["MessageId"] in failed:
                self.sqs.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0
                )
            else:
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=m["ReceiptHandle"])
        return len(messages)

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": message.get("MessageAttributes", {}),
            "md5OfBody": message["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.arn,
            "awsRegion": REGION,
        }


@pytest.fixture
def sqs(sqs_server: str) -> Any:
    return boto3.client("sqs", region_name=REGION, endpoint_url=sqs_server)


@pytest.fixture
def queues(sqs: Any) -> Iterator[tuple[str, str]]:
    """A fresh calls queue whose redrive policy points at a fresh dead-letter queue."""
    name = f"t{uuid.uuid4().hex[:12]}"
    dlq = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})
    calls = sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": redrive})["QueueUrl"]
    yield calls, dlq
    for url in (calls, dlq):
        sqs.delete_queue(QueueUrl=url)


@pytest.fixture
def runs() -> Counter[str]:
    return Counter()


@pytest.fixture
def executor(runs: Counter[str]) -> Executor:
    reg = ToolRegistry()

    @reg.tool
    async def ok(n: int) -> int:
        runs["ok"] += 1
        return n

    @reg.tool
    async def fail() -> None:
        runs["fail"] += 1
        raise RuntimeError("not retryable")

    @reg.tool
    async def flaky() -> None:
        runs["flaky"] += 1
        raise ToolFailed("try again", retryable=True)

    return Executor(reg, MemoryApprovalStore())


def send(sqs: Any, queue_url: str, *bodies: dict[str, Any]) -> list[str]:
    return [
        sqs.send_message(QueueUrl=queue_url, MessageBody=json.dumps(b))["MessageId"] for b in bodies
    ]


def drain(trigger: EventSourceMapping, handler: Any, polls: int) -> int:
    """Poll until the queue gives nothing or polls are used up; how many polls got messages."""
    for used in range(polls):
        if trigger.poll(handler) == 0:
            return used
    return polls


def letters(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    got = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    ).get("Messages", [])
    return [
        {
            "body": json.loads(m["Body"]),
            **{k: v["StringValue"] for k, v in m.get("MessageAttributes", {}).items()},
        }
        for m in got
    ]


def in_queue(sqs: Any, queue_url: str) -> int:
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attributes[n]) for n in names)


def test_non_retryable_failures_are_dead_lettered_once_and_never_run_again(
    sqs: Any, sqs_server: str, queues: tuple[str, str], executor: Executor, runs: Counter[str]
) -> None:
    calls, dlq = queues
    ids = send(sqs, calls, FAIL, OK, UNKNOWN)
    dead = SqsDeadLetters(dlq, region_name=REGION, endpoint_url=sqs_server)
    handler = tool_handler(executor, timeout=30, dead_letters=dead)
    drain(EventSourceMapping(sqs, calls), handler, polls=6)
    assert runs == {"fail": 1, "ok": 1}  # before: fail ran on every delivery until the redrive
    assert in_queue(sqs, calls) == 0
    kept = sorted(letters(sqs, dlq), key=lambda letter: letter["error-kind"])
    assert [letter["body"] for letter in kept] == [FAIL, UNKNOWN]
    assert [(letter["error-kind"], letter["error-status"]) for letter in kept] == [
        ("ToolFailed", "500"),
        ("ToolNotFound", "404"),
    ]
    assert [letter["message-id"] for letter in kept] == [ids[0], ids[2]]
    assert all(letter["retryable"] == "false" and letter["source"] == "sqs" for letter in kept)
    assert all(letter["source-arn"].endswith(calls.rsplit("/", 1)[1]) for letter in kept)
    assert all(letter["attempts"] == "1" for letter in kept)
    assert "not retryable" not in json.dumps(kept)  # the error's text stays out of it


def test_a_queue_url_names_the_dead_letter_queue(
    sqs: Any,
    sqs_server: str,
    queues: tuple[str, str],
    executor: Executor,
    runs: Counter[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls, dlq = queues
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", sqs_server)
    send(sqs, calls, FAIL)
    drain(EventSourceMapping(sqs, calls), tool_handler(executor, dead_letters=dlq), polls=3)
    assert runs == {"fail": 1}
    assert [letter["body"] for letter in letters(sqs, dlq)] == [FAIL]


def test_retryable_failures_stay_listed_for_redelivery(
    sqs: Any, sqs_server: str, queues: tuple[str, str], executor: Executor, runs: Counter[str]
) -> None:
    calls, dlq = queues
    send(sqs, calls, FLAKY)
    dead = SqsDeadLetters(dlq, region_name=REGION, endpoint_url=sqs_server)
    trigger = EventSourceMapping(sqs, calls)
    assert drain(trigger, tool_handler(executor, dead_letters=dead), polls=2) == 2
    assert runs == {"flaky": 2} and in_queue(sqs, calls) == 1
    assert letters(sqs, dlq) == []


def test_a_dead_letter_that_cannot_be_sent_fails_the_message(
    sqs: Any, sqs_server: str, queues: tuple[str, str], executor: Executor
) -> None:
    calls, _ = queues
    send(sqs, calls, FAIL)
    gone = f"{calls}-missing"  # no such queue: SendMessage fails
    dead = SqsDeadLetters(gone, region_name=REGION, endpoint_url=sqs_server)
    trigger = EventSourceMapping(sqs, calls)
    assert trigger.poll(tool_handler(executor, dead_letters=dead)) == 1
    assert in_queue(sqs, calls) == 1  # listed, so delivered again: nothing is lost


def test_fifo_dead_letters_the_failure_and_carries_on_in_order(
    sqs: Any, sqs_server: str, executor: Executor, runs: Counter[str]
) -> None:
    name = f"t{uuid.uuid4().hex[:12]}"
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    calls = sqs.create_queue(QueueName=f"{name}.fifo", Attributes=fifo)["QueueUrl"]
    dlq = sqs.create_queue(QueueName=f"{name}-dlq.fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    try:
        for n, body in enumerate([FAIL, OK]):
            sqs.send_message(
                QueueUrl=calls,
                MessageBody=json.dumps(body),
                MessageGroupId="run-1",
                MessageDeduplicationId=f"d{n}",
            )
        dead = SqsDeadLetters(dlq, region_name=REGION, endpoint_url=sqs_server)
        handler = tool_handler(executor, dead_letters=dead, runner=RunSync())  # a loop each
        drain(EventSourceMapping(sqs, calls), handler, polls=4)
        assert runs == {"fail": 1, "ok": 1}
        assert in_queue(sqs, calls) == 0
        assert [letter["body"] for letter in letters(sqs, dlq)] == [FAIL]
    finally:
        for url in (calls, dlq):
            sqs.delete_queue(QueueUrl=url)


class Kept:
    """A DeadLetters sink that keeps letters in a list."""

    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    async def send(self, letter: DeadLetter) -> None:
        self.letters.append(letter)


def test_msk_dead_letters_a_non_retryable_record_and_carries_on(
    executor: Executor, runs: Counter[str]
) -> None:
    kept = Kept()
    event = kafka_event({0: [FAIL, OK]})
    assert tool_handler(executor, dead_letters=kept)(event) == {"batchItemFailures": []}
    assert runs == {"fail": 1, "ok": 1}
    [letter] = kept.letters
    assert letter.body_encoding == "base64" and letter.message_id == "tool-calls:0:100"
    assert json.loads(base64.b64decode(letter.body)) == FAIL
    assert (letter.error_kind, letter.source) == ("ToolFailed", "kafka")
