"""When this worker last heard from its group coordinator that it is still a member.

aiokafka heartbeats in a task of its own and keeps the time of its last good answer in a local
variable. The claims (engine/claims.py) need that time to tell when the worker may have been
cut off from its group, paused or partitioned from the broker, before a fenced write would
tell them. Installed by engine/patches.py over `GroupCoordinator._do_heartbeat`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

ATTRIBUTE = "_stream_adapter_heartbeat_at"
"""The coordinator's attribute: the monotonic time its last good heartbeat was sent."""


def stamped_heartbeat(
    own: Callable[[Any], Awaitable[bool]],
) -> Callable[[Any], Awaitable[bool]]:
    """aiokafka's heartbeat, noting for each answer that keeps the member in the group
    (aiokafka's own `True`: no error, or a rebalance under way that this member may join)
    when its request was sent: the membership held then. An answer read only after a pause
    says nothing of the pause."""

    async def _do_heartbeat(self: Any) -> bool:
        sent_at = time.monotonic()
        ok = await own(self)
        if ok:
            setattr(self, ATTRIBUTE, max(sent_at, getattr(self, ATTRIBUTE, 0.0)))
        return ok

    return _do_heartbeat


def last_heartbeat(coordinator: Any) -> float | None:
    """When coordinator's last good heartbeat was sent (monotonic), None before the first."""
    return getattr(coordinator, ATTRIBUTE, None)
