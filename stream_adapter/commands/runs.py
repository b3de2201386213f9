"""Running a short command's Kafka work: its failures arrive as one line, not as log noise."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

import click

from stream_adapter.commands.options import source_of

T = TypeVar("T")

CLIENT_LOGGERS = ("aiokafka", "asyncio")
"""Loggers that report each refused connection and retry; the command reports the outcome."""


def run_client(work: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(work) with the Kafka clients' own logs quiet (all of them at debug)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and source_of(ctx).debug:
        return asyncio.run(work)
    loggers = [logging.getLogger(name) for name in CLIENT_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        return asyncio.run(work)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
