"""tool_handler: a sync function-host entry point (Lambda and alike) over handle_envelope.

contract §15. One invocation is one event: an SQS batch, an MSK / self-managed Kafka batch, an
EventBridge event, or the envelope itself. Each invocation runs within
``min(timeout, remaining time - margin_s)`` seconds; what is not done by then is failed, so
the host delivers it again. An approved call starts only when the time left holds its tool's
timeout, and is never cut once started (budget.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from stream_adapter.core import budget, logs
from stream_adapter.core.budget import time_budget
from stream_adapter.core.errors import AdapterError, ToolTimeout
from stream_adapter.core.executor import Executor
from stream_adapter.core.replies import Reply
from stream_adapter.core.runners import Runner, RunSync, default_runner
from stream_adapter.core.tools import ToolNames, allow_list
from stream_adapter.hosts.dead_letters import DeadLetters, dead_letter
from stream_adapter.hosts.events import (
    EventKind,
    Message,
    event_kind,
    is_fifo,
    kafka_messages,
    optional_id,
    sqs_messages,
)
from stream_adapter.hosts.handler import handle_envelope

__all__ = ["Handler", "budget_s", "tool_handler"]

T = TypeVar("T")

Handler = Callable[..., Any]
"""``handler(event, context=None)``: a reply, ``{"batchItemFailures": [...]}``, or a raise."""


def budget_s(timeout: float, margin_s: float, context: Any) -> float:
    """Seconds this invocation may run: the timeout, capped by the host's remaining time."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        return min(timeout, float(remaining()) / 1000.0 - margin_s)
    return timeout


class _Batch:
    """Which messages of a batch were done; every other one is reported failed."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = messages
        self.done = [False] * len(messages)
        self.errors: dict[int, BaseException] = {}

    def failures(self) -> list[dict[str, str]]:
        seen: dict[str, None] = {}
        for message, done in zip(self.messages, self.done, strict=True):
            if not done:
                seen.setdefault(message.message_id, None)
        return [{"itemIdentifier": message_id} for message_id in seen]


def tool_handler(
    executor: Executor,
    *,
    tools: ToolNames | None = None,
    timeout: float = 60.0,
    margin_s: float = 1.0,
    runner: Runner | None = None,
    dead_letters: DeadLetters | str | None = None,
) -> Handler:
    """A sync ``handler(event, context=None)`` that runs the event's envelopes through executor.

    - SQS batch: messages in order; returns ``{"batchItemFailures": [...]}`` naming every
      message not done (failed, or unreached when time ran out). A FIFO queue stops at its
      first failure, so that message and all later ones are failed and order holds.
    - MSK / self-managed Kafka: partitions run concurrently, each in offset order; the first
      failure stops the batch and raises it, so Lambda retries the batch (at least once, like
      the topology). Success returns an empty ``batchItemFailures``.
    - dead_letters (a DeadLetters sink, or an SQS queue URL for SqsDeadLetters): a batch
      message that fails with a non-retryable AdapterError is sent there and counts as done,
      as the Kafka worker dead-letters it, so its tool never runs again on a redelivery. If
      the letter cannot be sent, the message fails as before (nothing is lost). Without it,
      such a message is failed and the queue's own redrive policy decides.
    - EventBridge (the envelope in ``detail``) and direct invokes return the reply; errors
      raise. Without ``runner``, every handler shares the process's warm loop.
    """

    allowed = allow_list(tools)  # a str is refused here, at construction
    sink = _sink(dead_letters)

    async def run_one(message: Message, source: EventKind) -> Reply:
        return await handle_envelope(
            executor, message.body, tools=allowed, message_id=message.message_id, source=source
        )

    def handler(event: Any, context: Any = None) -> Any:
        limit = budget_s(timeout, margin_s, context)
        run = _Run(runner or default_runner(), executor, sink)
        kind = event_kind(event)
        if kind is EventKind.SQS:
            return _sqs(run, _with_dead_letters(run_one, sink), event, limit)
        if kind is EventKind.KAFKA:
            return _kafka(run, _with_dead_letters(run_one, sink), event, limit)
        if kind is EventKind.EVENTBRIDGE:
            message = Message(optional_id(event.get("id")), event["detail"])
        else:
            message = Message(optional_id(getattr(context, "aws_request_id", None)), event)
        return _single(run, lambda: run_one(message, kind), message, kind, limit)

    return handler


class _Run:
    """runner.run, plus: on a fresh loop per invocation, close the store's clients at the end.

    Loop-bound clients (the shared stores keep one per loop) would otherwise outlive their loop
    and leak a connection pool per invocation.
    """

    def __init__(
        self, runner: Runner, executor: Executor, dead_letters: DeadLetters | None = None
    ) -> None:
        self.runner = runner
        fresh = isinstance(runner, RunSync)
        owners = (executor.store, dead_letters) if fresh else ()
        self.release: list[Callable[[], Awaitable[None]]] = [
            close for close in (getattr(owner, "aclose", None) for owner in owners) if close
        ]

    def __call__(self, work: Callable[[], Awaitable[T]], limit: float) -> T:
        release = self.release

        async def within_budget() -> T:
            # The budget, not the runner, times the work: an approved run holds it off.
            try:
                async with time_budget(limit):
                    return await work()
            finally:
                for close in release:
                    await close()

        return self.runner.run(within_budget)


RunOne = Callable[[Message, EventKind], Awaitable[Reply | None]]
"""Runs one batch message: its reply, None once it was dead-lettered, or a raise."""


def _sink(dead_letters: DeadLetters | str | None) -> DeadLetters | None:
    if dead_letters is None or not isinstance(dead_letters, str):
        return dead_letters
    from stream_adapter.hosts.sqs_dead_letters import SqsDeadLetters  # the `sqs` extra's client

    return SqsDeadLetters(dead_letters)


def _with_dead_letters(run_one: RunOne, sink: DeadLetters | None) -> RunOne:
    """run_one, but a non-retryable AdapterError is dead-lettered to sink and counts as done."""
    if sink is None:
        return run_one

    async def run(message: Message, source: EventKind) -> Reply | None:
        try:
            return await run_one(message, source)
        except AdapterError as exc:
            if exc.retryable:
                raise
            letter = dead_letter(
                message_id=message.message_id,
                body=message.body,
                exc=exc,
                source=source,
                source_arn=message.source_arn,
                group=message.group,
                attempts=message.attempts,
            )
            try:
                await sink.send(letter)
            except Exception as failure:
                logs.event(
                    logs.ERROR,
                    "dead letter not sent; the message fails and is delivered again",
                    message_id=message.message_id,
                    source=source,
                    error_kind=type(failure).__name__,
                )
                raise exc from None
            logs.event(
                logs.WARNING,
                "message dead-lettered",
                message_id=message.message_id,
                source=source,
                tool=exc.tool,
                approval_id=exc.approval_id,
                error_kind=exc.kind,
            )
            return None

    return run


def _failed(message: Message, source: EventKind, exc: BaseException) -> None:
    if isinstance(exc, AdapterError):
        logs.event(
            logs.WARNING,
            "message failed",
            message_id=message.message_id,
            source=source,
            tool=exc.tool,
            approval_id=exc.approval_id,
            error_kind=exc.kind,
        )
    else:  # a bug below the adapter: fail this message, keep the rest of the batch
        logs.event(
            logs.ERROR,
            "message failed unexpectedly",
            message_id=message.message_id,
            source=source,
            error_kind=type(exc).__name__,
        )


def _out_of_time(source: EventKind) -> None:
    logs.event(logs.WARNING, "time budget ran out", source=source)


def _run_batch(run: _Run, work: Callable[[], Awaitable[None]], limit: float) -> bool:
    """Run work within limit seconds; False when time ran out first (or there was none)."""
    if limit <= 0:
        return False
    try:
        run(work, limit)
    except TimeoutError:
        return False
    return True


def _sqs(run: _Run, run_one: RunOne, event: Mapping[str, Any], limit: float) -> Any:
    batch = _Batch(sqs_messages(event))
    fifo = is_fifo(event)

    async def work() -> None:
        for index, message in enumerate(batch.messages):
            budget.check()
            try:
                await run_one(message, EventKind.SQS)
            except Exception as exc:
                _failed(message, EventKind.SQS, exc)
                if fifo:
                    return  # later messages stay undone: they are failed too, order holds
                continue
            batch.done[index] = True

    if not _run_batch(run, work, limit):
        _out_of_time(EventKind.SQS)
    return {"batchItemFailures": batch.failures()}


def _kafka(run: _Run, run_one: RunOne, event: Mapping[str, Any], limit: float) -> Any:
    groups = kafka_messages(event)
    batch = _Batch([message for group in groups for message in group])
    stop = asyncio.Event()

    async def partition(first: int, group: list[Message]) -> None:
        for index, message in enumerate(group, start=first):
            if stop.is_set():
                return
            budget.check()
            try:
                await run_one(message, EventKind.KAFKA)
            except Exception as exc:
                _failed(message, EventKind.KAFKA, exc)
                batch.errors[index] = exc
                stop.set()  # the batch will be retried whole: start nothing more
                return
            batch.done[index] = True

    async def work() -> None:
        starts = [sum(len(g) for g in groups[:i]) for i in range(len(groups))]
        await asyncio.gather(*(partition(s, g) for s, g in zip(starts, groups, strict=True)))

    in_time = _run_batch(run, work, limit)
    if batch.errors:
        raise batch.errors[min(batch.errors)]
    if not in_time:
        _out_of_time(EventKind.KAFKA)
        raise ToolTimeout("time budget ran out before the batch was done")
    return {"batchItemFailures": []}


def _single(
    run: _Run,
    work: Callable[[], Awaitable[Reply]],
    message: Message,
    source: EventKind,
    limit: float,
) -> Reply:
    if limit <= 0:
        _out_of_time(source)
        raise ToolTimeout("no time left for this invocation")
    try:
        return run(work, limit)
    except TimeoutError:
        _out_of_time(source)
        raise ToolTimeout("time budget ran out") from None
    except Exception as exc:
        _failed(message, source, exc)
        raise
