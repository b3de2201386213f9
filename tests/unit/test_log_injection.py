"""No logged value can forge a log line: control characters are escaped in text logs, values
that could pose as other fields are quoted, and JSON lines stay one object per line."""

from __future__ import annotations

import io
import json
import logging
import shlex
import sys
from collections.abc import Iterator

import pytest

from stream_adapter import Executor, MemoryApprovalStore, ToolRegistry, tool_handler
from stream_adapter.core.logs import JSONFormatter, TextFormatter, configure_logging, event
from tests.unit.aws_events import sqs_event

FORGED = "no\nCRITICAL stream_adapter forged line"
NASTY = [
    FORGED,
    "a\r\nCRITICAL forged",
    "carriage\rCRITICAL over the line",
    "ansi \x1b[2J\x1b[1;1HCRITICAL",
    "nul\x00byte",
    "line\u2028separator",
    "para\u2029separator",
    "next\x85line",
    "vertical\x0btab\x0cfeed",
    "bidi \u202eenilnoitcA",
    "tab\tinside",
]


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """configure_logging's text handler, writing to a buffer."""
    root = logging.getLogger()
    level = root.level
    configure_logging("DEBUG", "text")
    handler = next(h for h in root.handlers if getattr(h, "_stream_adapter", False))
    stream = io.StringIO()
    handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def assert_clean(text: str, records: int) -> None:
    """Exactly `records` lines, each a whole record, with no raw control character."""
    lines = text.splitlines()
    assert len(lines) == records, lines
    for line in lines:
        assert line[:4].isdigit(), line  # every line starts with its record's timestamp
        assert all(ch == " " or ch.isprintable() for ch in line), repr(line)
        assert "\u202e" not in line


def test_a_forged_tool_name_stays_on_its_line_end_to_end(text_log: io.StringIO) -> None:
    registry = ToolRegistry()
    handler = tool_handler(Executor(registry, MemoryApprovalStore()))
    answer = handler(sqs_event([{"tool": FORGED, "arguments": {}}]))
    assert len(answer["batchItemFailures"]) == 1
    lines = text_log.getvalue().splitlines()
    assert lines, "the failed message is logged"
    assert not any(line.startswith("CRITICAL") for line in lines), lines
    assert_clean(text_log.getvalue(), len(lines))
    assert any("message failed" in line and "CRITICAL" in line for line in lines)


@pytest.mark.parametrize("value", NASTY)
@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING])
def test_every_field_value_is_escaped(text_log: io.StringIO, value: str, level: int) -> None:
    event(level, "message failed", tool=value, run_id=value, approval_id="a1")
    assert_clean(text_log.getvalue(), 1)


@pytest.mark.parametrize("value", NASTY)
def test_messages_of_other_loggers_are_escaped(text_log: io.StringIO, value: str) -> None:
    logging.getLogger("faust.test").warning("topic %s is late", value)
    assert_clean(text_log.getvalue(), 1)


def test_a_value_cannot_pose_as_another_field(text_log: io.StringIO) -> None:
    event(logging.WARNING, "m", tool='x error_kind=Forged "q" back\\slash', run_id="")
    line = text_log.getvalue().rstrip("\n")
    pairs = dict(part.split("=", 1) for part in shlex.split(line.split(" m ", 1)[1]))
    assert pairs == {"tool": 'x error_kind=Forged "q" back\\slash', "run_id": ""}


def test_tracebacks_follow_on_indented_lines(text_log: io.StringIO) -> None:
    try:
        raise ValueError(FORGED)
    except ValueError:
        logging.getLogger("stream_adapter").debug("tool exception", exc_info=True)
    lines = text_log.getvalue().splitlines()
    assert lines[0][:4].isdigit() and len(lines) > 2
    assert all(line.startswith("    ") for line in lines[1:]), lines


@pytest.mark.parametrize("value", NASTY)
def test_json_lines_hold_one_record_each(value: str) -> None:
    record = logging.LogRecord("faust", logging.WARNING, __file__, 1, "late %s", (value,), None)
    record.sa_fields = {"tool": value}
    text = JSONFormatter().format(record)
    assert "\n" not in text and "\r" not in text
    body = json.loads(text)
    assert body["tool"] == value and body["message"] == f"late {value}"


def test_text_formatter_without_configure_logging() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, FORGED, None, None)
    try:
        raise RuntimeError(FORGED)
    except RuntimeError:
        record.exc_info = sys.exc_info()
    text = TextFormatter().format(record)
    assert "\n" not in text  # WARNING+ drops the traceback, and the message is escaped
    assert "no\\x0aCRITICAL" in text
