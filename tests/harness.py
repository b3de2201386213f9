"""Test harness: unique names, a worker process, and a client that produces calls and reads replies.

Everything here talks to a real broker; nothing is faked.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

import orjson
from prometheus_client.parser import text_string_to_metric_families

from stream_adapter.core.approvals import ApprovalRecord, fingerprint
from stream_adapter.core.ids import derive_ids
from stream_adapter.core.signing import DecisionKeys, new_keys_spec
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.settings import Settings
from stream_adapter_dev.broker.local import free_port
from stream_adapter_dev.chaos.observe import group_lag as chaos_group_lag
from stream_adapter_dev.chaos.observe import read_topic

ROOT = Path(__file__).resolve().parent.parent


def connection(where: Settings | str) -> Settings:
    """Settings to connect with: given ones, or a plaintext bootstrap address."""
    if isinstance(where, Settings):
        return where
    return Settings.model_validate({"broker": where})


def documented_acl_lines() -> list[str]:
    """The `kafka-acls.sh` lines of docs/operations.md's ACL block, as written there."""
    text = (ROOT / "docs" / "operations.md").read_text()
    for block in text.split("```")[1::2]:
        lines = [line for line in block.strip().splitlines() if line.strip()]
        if lines and lines[0].startswith("kafka-acls.sh $ADMIN "):
            return lines
    raise AssertionError("docs/operations.md has no block of kafka-acls.sh lines")


def unique(prefix: str) -> str:
    """A name no other test (or earlier run) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_settings(bootstrap: str, tmp_path: Path, **changes: Any) -> Settings:
    """Settings with a unique app id and topic names, data under tmp_path."""
    base: dict[str, Any] = {
        "broker": bootstrap,
        "partitions": 4,
        "data_dir": str(tmp_path / "data"),
        "retry_backoff_s": 0.05,
        "web_port": free_port(),
        # Workers refuse unsigned decisions: every test run signs with a key of its own.
        "decision_keys": new_keys_spec("test"),
    }
    return Settings.for_app(unique("t"), **{**base, **changes})


async def wait_for(
    check: Callable[[], Any], *, timeout_s: float, what: str, interval_s: float = 0.05
) -> Any:
    """Poll check() until it returns something truthy; fail with `what` past the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


@dataclass
class CliProcess:
    """`stream-adapter COMMAND` in a subprocess with the test's settings, logging to a file."""

    command: ClassVar[str]
    ready_line: ClassVar[str]  # what the process logs once it serves

    settings: Settings
    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    name: str = ""
    proc: subprocess.Popen[bytes] | None = None
    args: tuple[str, ...] = ()  # after the command, e.g. ("--web-port", "0")

    def __post_init__(self) -> None:
        self.name = self.name or self.command

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def env(self) -> dict[str, str]:
        """The child's environment: ours, the settings, then extra_env."""
        env = {**os.environ, **self.settings.to_env(), **self.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stream_adapter", self.command, *self.args],
                cwd=self.workdir,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def ready(self, timeout_s: float = 60.0) -> None:
        """Wait until the process logs its ready line; fail at once if it exits."""

        def check() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited early:\n{self.log_text()[-4000:]}")
            return self.ready_line in self.log_text()

        await wait_for(check, timeout_s=timeout_s, what=f"{self.name} to be ready")

    def kill(self) -> None:
        """SIGKILL: the crash the guarantees are about."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                tail = self.log_text()[-4000:]
                raise AssertionError(f"{self.name} ignored SIGTERM:\n{tail}") from None
        return int(self.proc.returncode)


Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class WorkerProcess(CliProcess):
    """`stream-adapter worker`: ready once it has joined its group and recovered its tables."""

    command: ClassVar[str] = "worker"
    ready_line: ClassVar[str] = "Worker ready"

    @property
    def ledger(self) -> Path:
        return self.workdir / "ledger.jsonl"

    def metrics(self) -> Metrics:
        """Every sample on the worker's /metrics now, by (name, sorted labels)."""
        url = f"http://127.0.0.1:{self.settings.web_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def env(self) -> dict[str, str]:
        env = super().env()
        env.setdefault("STREAM_ADAPTER_DEMO_LEDGER", str(self.ledger))
        # Each worker has its own RocksDB (two processes cannot share one), so a worker that
        # takes over restores its tables from the changelog.
        if "STREAM_ADAPTER_DATA_DIR" not in self.extra_env:
            env["STREAM_ADAPTER_DATA_DIR"] = str(self.workdir / f"{self.name}-data")
        return env


@dataclass(frozen=True)
class Sent:
    """A produced call: where it landed and the ids its reply carries."""

    message_id: str
    partition: int
    offset: int
    run_id: str
    call_id: str


def topic_id(settings: Settings, topic: str) -> str:
    """topic's Kafka topic id (a UUID per incarnation), as confluent-kafka describes it."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    described = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    raw = described.topic_id
    high = raw.get_most_significant_bits() & (2**64 - 1)
    low = raw.get_least_significant_bits() & (2**64 - 1)
    return str(uuid.UUID(int=high << 64 | low))


class Client:
    """Produces envelopes and decisions; collects replies (and dead letters) by run_id."""

    def __init__(self, settings: Settings, *, read_committed: bool = False) -> None:
        self.settings = settings
        self.isolation = "read_committed" if read_committed else "read_uncommitted"
        self.producer = kafka_clients.producer(settings)
        self.replies: list[dict[str, Any]] = []
        self.reply_headers: list[dict[str, bytes]] = []
        self._consumer: Any = None
        self._scope: str | None = None

    async def __aenter__(self) -> Client:
        await kafka_clients.start(self.settings, self.producer)
        self._consumer = kafka_clients.consumer(
            self.settings,
            self.settings.replies_topic,
            auto_offset_reset="earliest",
            isolation_level=self.isolation,
        )
        await kafka_clients.start(self.settings, self._consumer)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()
        if self._consumer is not None:
            await self._consumer.stop()

    async def send(
        self,
        payload: bytes | dict[str, Any],
        *,
        key: bytes | None = None,
        topic: str | None = None,
        headers: Iterable[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> tuple[int, int]:
        """Produce one message; returns (partition, offset)."""
        value = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        meta = await self.producer.send_and_wait(
            topic or self.settings.calls_topic,
            value,
            key=key,
            headers=list(headers) if headers else None,
            partition=partition,
        )
        return meta.partition, meta.offset

    def message_id(self, partition: int, offset: int) -> str:
        return f"{self.settings.calls_topic}:{partition}:{offset}"

    @property
    def scope(self) -> str:
        """The calls topic's Kafka topic id, which the worker derives ids in (asked once the
        topic exists, from an independent client)."""
        if self._scope is None:
            self._scope = topic_id(self.settings, self.settings.calls_topic)
        return self._scope

    def forget_scope(self) -> None:
        """Ask the topic id again (the calls topic was deleted and created again)."""
        self._scope = None

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        key: bytes | None = None,
        **ids: str,
    ) -> Sent:
        """Produce a call envelope; returns its delivery id and the ids its reply will carry."""
        body: dict[str, Any] = {"tool": tool, "arguments": arguments or {}, **ids}
        partition, offset = await self.send(body, key=key)
        return self.sent(partition, offset, **ids)

    def sent(self, partition: int, offset: int, **ids: str) -> Sent:
        message_id = self.message_id(partition, offset)
        run_id, call_id = derive_ids(message_id, self.settings.source, self.scope)
        if "run_id" in ids and "call_id" in ids:
            run_id, call_id = ids["run_id"], ids["call_id"]
        return Sent(message_id, partition, offset, run_id, call_id)

    async def decide(
        self,
        approval_id: str,
        approved: bool,
        *,
        reviewer: str = "ann",
        headers: Iterable[tuple[str, bytes]] | None = None,
        signed: bool = True,
        **extra: Any,
    ) -> None:
        """Produce a decision with headers, signed with the settings' decision keys (as the
        review service signs) unless signed is False."""
        body = {"approval_id": approval_id, "approved": approved, "reviewer": reviewer, **extra}
        value = orjson.dumps(body)
        if signed:
            signature = await bound_signature(self.settings, approval_id, value)
            headers = [*(headers or ()), *signature]
        await self.send(
            value, key=approval_id.encode(), topic=self.settings.decisions_topic, headers=headers
        )

    async def _poll(self) -> None:
        assert self._consumer is not None
        batches = await self._consumer.getmany(timeout_ms=100)
        for messages in batches.values():
            for message in messages:
                self.replies.append(orjson.loads(message.value))
                self.reply_headers.append(dict(message.headers))

    async def wait_replies(
        self,
        predicate: Callable[[list[dict[str, Any]]], bool],
        *,
        timeout_s: float = 30.0,
        what: str = "replies",
    ) -> list[dict[str, Any]]:
        async def check() -> bool:
            await self._poll()
            return predicate(self.replies)

        await wait_for(check, timeout_s=timeout_s, what=what, interval_s=0)
        return self.replies

    async def reply_for(
        self, *, status: str | None = None, timeout_s: float = 30.0, **match: Any
    ) -> dict[str, Any]:
        """The first reply whose fields equal match (and status, if given)."""

        def found(replies: list[dict[str, Any]]) -> bool:
            return any(_matches(r, status, match) for r in replies)

        await self.wait_replies(found, timeout_s=timeout_s, what=f"a reply {status} {match}")
        return next(r for r in self.replies if _matches(r, status, match))

    def replies_for(self, **match: Any) -> list[dict[str, Any]]:
        return [r for r in self.replies if _matches(r, None, match)]


def _matches(reply: dict[str, Any], status: str | None, match: dict[str, Any]) -> bool:
    if status is not None and reply.get("status") != status:
        return False
    return all(reply.get(k) == v for k, v in match.items())


async def latest_record(settings: Settings, approval_id: str) -> ApprovalRecord | None:
    """approval_id's latest record on the approvals topic, if any."""
    found = [
        m.value
        for m in await read_all(settings, settings.approvals_topic)
        if m.key == approval_id.encode()
    ]
    return ApprovalRecord.from_bytes(found[-1]) if found and found[-1] is not None else None


async def bound_signature(
    settings: Settings, approval_id: str, value: bytes, keys: DecisionKeys | None = None
) -> list[tuple[str, bytes]]:
    """Signature headers for a decision's value, bound to its record as the review service
    binds them (over the value alone when no record is there)."""
    record = await latest_record(settings, approval_id)
    binds = "" if record is None else fingerprint(record)
    signer = keys or DecisionKeys.from_settings(settings)
    return list(signer.sign(value, binds=binds).items())


async def read_all(where: Settings | str, topic: str, *, timeout_s: float = 10.0) -> list[Any]:
    """Every message in topic up to its end offsets at the time of the call (`read_topic`,
    read uncommitted), from given settings or a plaintext bootstrap address."""
    return await read_topic(connection(where), topic, timeout_s=timeout_s)


async def group_lag(where: Settings | str, group: str, topic: str) -> int:
    """Sum over topic's partitions of (end offset - committed offset) for group (chaos's
    `group_lag`), from given settings or a plaintext bootstrap address."""
    return await chaos_group_lag(connection(where), group, [topic])


async def dead_letters(
    settings: Settings, *, at_least: int = 1, timeout_s: float = 20.0
) -> list[Any]:
    """The DLQ's messages, once at least `at_least` of them are there."""
    found: list[Any] = []

    async def check() -> bool:
        found[:] = await read_all(settings, settings.dlq_topic)
        return len(found) >= at_least

    await wait_for(check, timeout_s=timeout_s, what=f"{at_least} dead letter(s)")
    return found


async def wait_lag_zero(settings: Settings, *, timeout_s: float = 60.0) -> None:
    """Wait until the worker group has committed everything on the topics it consumes."""
    from stream_adapter.stream.topics import approval_requests_topic

    topics = (settings.calls_topic, settings.decisions_topic, approval_requests_topic(settings))

    async def zero() -> bool:
        lags = [await group_lag(settings, settings.app_id, t) for t in topics]
        return sum(lags) == 0

    await wait_for(zero, timeout_s=timeout_s, what="consumer lag 0", interval_s=0.2)


def settings_from_env(env: dict[str, str], base: Settings) -> Settings:
    """base with the STREAM_ADAPTER_* connection variables of env applied."""
    changes = {k.removeprefix("STREAM_ADAPTER_").lower(): v for k, v in env.items()}
    return base.with_changes(**changes)


def deployment_acls(settings: Settings) -> list[Any]:
    """docs/operations.md's ACL lines with the default names replaced by settings' names."""
    from stream_adapter.ops.acls import parse_command

    names = {
        "tool-calls": settings.calls_topic,
        "tool-replies": settings.replies_topic,
        "approval-decisions": settings.decisions_topic,
        "tool-approvals": settings.approvals_topic,
        "tool-calls-dlq": settings.dlq_topic,
        "stream-adapter": settings.app_id,
        "stream-adapter-": f"{settings.app_id}-",
    }
    return [
        parse_command(" ".join(names.get(word, word) for word in line.split()))
        for line in documented_acl_lines()
    ]
