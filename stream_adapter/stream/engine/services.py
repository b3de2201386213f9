"""Work that runs for the app's whole life: started with the worker, stopped with it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from mode import Service

Hook = Callable[[], Awaitable[None]]


class HookService(Service):
    """A mode service (what Faust starts with the app) calling `start` and `stop`."""

    def __init__(self, start: Hook, stop: Hook, **kwargs: Any) -> None:
        self._start_hook = start
        self._stop_hook = stop
        super().__init__(**kwargs)

    async def on_start(self) -> None:
        await self._start_hook()

    async def on_stop(self) -> None:
        await self._stop_hook()
