"""Structured logging on the `stream_adapter` logger; WARNING+ carries names and ids only.

Arguments, results, exception text and decision reasons may be logged only below WARNING
(and only by passing them as fields to :func:`event`, which drops them at WARNING+).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Literal

import orjson

__all__ = [
    "DEBUG",
    "ERROR",
    "INFO",
    "SAFE_FIELDS",
    "WARNING",
    "JSONFormatter",
    "TextFormatter",
    "configure_logging",
    "event",
    "log",
]

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR

log = logging.getLogger("stream_adapter")

SAFE_FIELDS = frozenset(
    {
        "tool",
        "run_id",
        "call_id",
        "approval_id",
        "message_id",
        "source",
        "error_kind",
        "status",
        "state",
        "origin",
        "attempt",
        "topic",
        "partition",
        "offset",
        "event",
        "retry_in_s",
    }
)
"""Fields allowed at WARNING and above: names, ids, kinds and counters."""

_ATTR = "sa_fields"
_RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


def event(level: int, message: str, /, **fields: Any) -> None:
    """Log a constant message with fields; at WARNING+ only SAFE_FIELDS survive."""
    if not log.isEnabledFor(level):
        return
    if level >= WARNING:
        fields = {k: v for k, v in fields.items() if k in SAFE_FIELDS and v is not None}
    else:
        fields = {k: v for k, v in fields.items() if v is not None}
    extra = {k: v for k, v in fields.items() if k not in _RESERVED}
    extra[_ATTR] = fields
    log.log(level, message, extra=extra, stacklevel=2)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message and the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        body.update(getattr(record, _ATTR, {}))
        if record.exc_info and record.levelno < WARNING:
            body["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(body, default=str).decode()


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and record.levelno >= WARNING:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        line = super().format(record)
        fields = getattr(record, _ATTR, {})
        return line + "".join(f" {k}={v}" for k, v in fields.items()) if fields else line


def configure_logging(level: int | str = "INFO", fmt: Literal["text", "json"] = "text") -> None:
    """Install one stderr handler on the root logger (idempotent) in text or JSON lines."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_stream_adapter", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    handler._stream_adapter = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
