"""Crash points for crash tests: SIGKILL this process, or fail a job, at a named step.

`STREAM_ADAPTER_CRASH_AT=<point>` makes the worker kill itself the first time it reaches that
point, exactly as an operator's `kill -9` would, so crash tests need no timing luck.
`STREAM_ADAPTER_FAIL_ONCE_AT=<point>` raises `InjectedFault` there once instead: a job failing
for a reason that is not the message's (a broker hiccup, a bug).
"""

from __future__ import annotations

import os
import signal

_ENV = "STREAM_ADAPTER_CRASH_AT"
_FAIL_ENV = "STREAM_ADAPTER_FAIL_ONCE_AT"
_failed: set[str] = set()

CALL_REPLIED = "call-replied"  # a plain call's reply is acked by the broker; not yet acked itself
PARKED = "parked"  # the pending record is durable; no pending_approval reply yet
RUNNING = "running"  # an approved call's running mark is durable; the tool has not started
APPROVED_RAN = "approved-ran"  # the approved tool has returned; its done mark is not written
APPROVED_DONE = "approved-done"  # the approved call's done mark is durable; no reply yet


class InjectedFault(RuntimeError):
    """The failure STREAM_ADAPTER_FAIL_ONCE_AT asked for."""


def armed(name: str) -> bool:
    """True when the environment names this point (hot paths check once, not per call)."""
    return name in (os.environ.get(_ENV), os.environ.get(_FAIL_ENV))


def crash_point(name: str) -> None:
    """Die by SIGKILL here, or raise once, if the environment names this point."""
    if os.environ.get(_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(_FAIL_ENV) == name and name not in _failed:
        _failed.add(name)
        raise InjectedFault(name)
