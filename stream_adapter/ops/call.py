"""`stream-adapter call`: produce one envelope and follow its replies (request-reply over Kafka).

The call goes through a ToolClient. Ids not given are left for the worker to derive from the
produced message's delivery id, computed here with the same function; the client then reads
the call's replies partition from a little before the call was sent, so no reply slips past.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.errors import KafkaError

from stream_adapter.client import ToolClient
from stream_adapter.core.envelope import parse_envelope
from stream_adapter.core.replies import Reply
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.connectivity import RETRY_EVERY_S, BrokerChange, log_change, watching
from stream_adapter.settings import Settings

PENDING = "pending_approval"


@dataclass
class CallResult:
    """The produced call's delivery id and ids, and every reply seen for it, in order."""

    message_id: str
    run_id: str
    call_id: str
    replies: list[Reply] = field(default_factory=list)

    @property
    def final(self) -> Reply | None:
        """The last reply unless it is still pending_approval."""
        if self.replies and self.replies[-1].get("status") != PENDING:
            return self.replies[-1]
        return None


def envelope_for(
    tool: str, arguments: dict[str, Any], run_id: str | None, call_id: str | None
) -> dict[str, Any]:
    """The envelope to produce; ToolUsageError when it is not one the worker would accept."""
    body: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if run_id is not None:
        body["run_id"] = run_id
    if call_id is not None:
        body["call_id"] = call_id
    parse_envelope(body)  # validate before anything is produced
    return body


async def call(
    settings: Settings,
    body: dict[str, Any],
    *,
    wait_s: float,
    key: bytes | None = None,
    on_sent: Callable[[CallResult], None] | None = None,
    on_reply: Callable[[Reply], None] | None = None,
    on_broker: Callable[[BrokerChange], None] = log_change,
) -> CallResult:
    """Produce body to the calls topic through a ToolClient; collect its replies until a final
    one or wait_s.

    on_broker hears when the broker becomes unreachable and reachable again once the call is
    under way (connectivity.py; checked every few seconds, as the call is short; a broker that
    cannot be reached at the start is the one error raised instead).
    TopicMissing before anything is produced when the calls or replies topic does not exist.
    """
    try:
        async with (
            ToolClient(settings, watch_broker=False) as client,
            watching(settings, report=on_broker, check_every_s=RETRY_EVERY_S),
        ):
            handle = await client.send(
                body["tool"],
                body["arguments"],
                run_id=body.get("run_id"),
                call_id=body.get("call_id"),
                key=key,
                derive_ids=True,
            )
            async with handle:
                sent = handle.sent
                result = CallResult(sent.message_id, sent.run_id, sent.call_id)
                if on_sent is not None:
                    on_sent(result)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s):
                        async for reply in handle:
                            result.replies.append(reply)
                            if on_reply is not None:
                                on_reply(reply)
            return result
    except KafkaError as exc:  # an ACL refusal once connected, as every command says it
        raise kafka_clients.kafka_error(exc, "use the cluster") from None
