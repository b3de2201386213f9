"""Progress of long work on stderr: a live line on a terminal, a line now and then in a log."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable

import click


@contextlib.asynccontextmanager
async def live_status(
    describe: Callable[[float], str], *, every_s: float = 15.0
) -> AsyncIterator[None]:
    """Show describe(elapsed seconds) on stderr while the block runs.

    On a terminal the line is redrawn twice a second; otherwise (CI, a log file) it is
    written every every_s seconds, so a long run's log still shows it moving.
    """
    started = time.monotonic()
    if sys.stderr.isatty():
        from rich.console import Console

        status = Console(stderr=True).status(describe(0.0))
        status.start()

        async def redraw() -> None:
            while True:
                await asyncio.sleep(0.5)
                status.update(describe(time.monotonic() - started))

        task = asyncio.create_task(redraw())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            status.stop()
        return

    async def write() -> None:
        while True:
            await asyncio.sleep(every_s)
            click.echo(describe(time.monotonic() - started), err=True)

    task = asyncio.create_task(write())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
