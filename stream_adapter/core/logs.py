"""Structured logging on the `stream_adapter` logger; WARNING+ carries names and ids only.

Arguments, results, exception text and decision reasons may be logged only below WARNING
(and only by passing them as fields to :func:`event`, which drops them at WARNING+).
"""

from __future__ import annotations

import logging
import re
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
    "escape",
    "event",
    "log",
    "text_value",
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
        "held_s",
        "stuck_threads",
        "max_threads",
        "client",
        "path",
        "servers",
        "outage_s",
        "suppressed",
        "reviewer",
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


_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u206f\ufeff\ufff9-\ufffb]"
)
"""Control, invisible-format, bidi and line-separator characters: never written raw."""

_QUOTE = re.compile(_CONTROL.pattern[:-1] + '\\s"=\\\\]')
"""What makes a text-format value need quotes: the above, whitespace, quote, `=`, backslash."""


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    if char in '"\\':
        return "\\" + char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """text with control characters escaped (``\\n`` → ``\\x0a``), so it stays on one line."""
    return _CONTROL.sub(_escape_char, text)


def text_value(value: Any) -> str:
    """A field value for the text format: bare when plain, else quoted with escapes, so no
    value can end its line or pose as another ``key=value``."""
    text = str(value)
    if text and _QUOTE.search(text) is None:
        return text
    return '"' + _QUOTE.sub(_quoted_char, text) + '"'


def _quoted_char(match: re.Match[str]) -> str:
    char = match.group()
    return char if char in " =" else _escape_char(match)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...``, one line per record.

    Every value is escaped (`escape`, `text_value`): a producer's tool name with a newline
    cannot forge a second record. Tracebacks (below WARNING only) follow on indented lines.
    """

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info and record.levelno >= WARNING:
            record = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
        record.message = escape(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        fields = getattr(record, _ATTR, {})
        if fields:
            line += "".join(f" {k}={text_value(v)}" for k, v in fields.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for block in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            if block:
                line += "".join(f"\n    {escape(part)}" for part in block.splitlines())
        return line


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
