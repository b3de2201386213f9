"""Run in a child process: N concurrent resumes of one approval in a shared SQLite file."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from stream_adapter import (
    AdapterError,
    Executor,
    SQLiteApprovalStore,
    ToolRegistry,
    handle_envelope,
)


async def main(db: str, counter: str, approval_id: str, n: int) -> None:
    reg = ToolRegistry()

    @reg.tool(confirm=True)
    def pay(n: int) -> int:
        fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return n

    ex = Executor(reg, SQLiteApprovalStore(db))
    print("ready", flush=True)
    sys.stdin.readline()  # the parent says go once both children are ready

    async def one() -> str:
        try:
            return str((await handle_envelope(ex, {"approval_id": approval_id}))["status"])
        except AdapterError as exc:
            return exc.kind

    statuses = await asyncio.gather(*(one() for _ in range(n)))
    print(json.dumps(statuses), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
