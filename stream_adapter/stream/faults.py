"""Crash points for crash tests: SIGKILL this process at a named step, when asked to.

`STREAM_ADAPTER_CRASH_AT=<point>` makes the worker kill itself the first time it reaches that
point, exactly as an operator's `kill -9` would, so crash tests need no timing luck.
"""

from __future__ import annotations

import os
import signal

_ENV = "STREAM_ADAPTER_CRASH_AT"

CALL_REPLIED = "call-replied"  # a plain call's reply is acked by the broker; not yet acked itself
PARKED = "parked"  # the pending record is durable; no pending_approval reply yet
RUNNING = "running"  # an approved call's running mark is durable; the tool has not started
APPROVED_RAN = "approved-ran"  # the approved tool has returned; its done mark is not written


def crash_point(name: str) -> None:
    """Die by SIGKILL here if the environment names this point."""
    if os.environ.get(_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
