"""Run an app as a Faust worker process until SIGTERM or SIGINT."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_FAUST_LEVELS = {
    "debug": "debug",
    "info": "info",
    "warning": "warn",
    "error": "error",
    "critical": "crit",
}


def run(app: Any, log_level: str, before: Callable[[], None] | None = None) -> None:
    """Serve app until stopped; in-flight jobs finish before the last commit.

    before: called once the worker is built, before it starts (logging set-up).
    """
    from faust.worker import Worker

    worker = Worker(app, loglevel=_FAUST_LEVELS[log_level], quiet=True, override_logging=False)
    # Faust's start-up spinner writes terminal escapes into the log stream (a JSON-lines
    # reader would choke on them); a service logs "Ready" instead.
    worker.spinner = None
    if before is not None:
        before()
    worker.execute_from_commandline()
