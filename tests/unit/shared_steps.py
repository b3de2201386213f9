"""Run in a child process (a fresh "container"): one step against a shared approval store.

The store and the ledger come from STREAM_ADAPTER_APPROVAL_STORE and
STREAM_ADAPTER_DEMO_LEDGER, exactly as a deployed function would get them.

    invoke CALLS_JSON                run examples.serverless.handler once per [event, request_id]
                                     pair, in order; print what each returned
    review APPROVAL_ID               approve as "ann"; print the status and the resume sent
    burst APPROVAL_ID N              print "ready", wait for a line, run N concurrent resumes,
                                     print their statuses (or error kinds)
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


class Context:
    """The parts of a Lambda context the handler reads."""

    def __init__(self, request_id: str) -> None:
        self.aws_request_id = request_id

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def invoke(calls: str) -> Any:
    from examples.serverless import handler

    return [
        handler(event, Context(request_id) if request_id else None)
        for event, request_id in json.loads(calls)
    ]


def review(approval_id: str) -> Any:
    from examples.serverless import review

    sent: list[dict[str, Any]] = []
    status, _ = review(approval_id, reviewer="ann", approved=True, send=sent.append)
    return {"status": status, "sent": sent}


def burst(approval_id: str, n: int) -> Any:
    from examples.backend import executor
    from stream_adapter import AdapterError, handle_envelope

    ex = executor()
    print("ready", flush=True)
    sys.stdin.readline()  # the parent says go once every child is ready

    async def one() -> str:
        try:
            return str((await handle_envelope(ex, {"approval_id": approval_id}))["status"])
        except AdapterError as exc:
            return exc.kind

    async def all_of_them() -> list[str]:
        return await asyncio.gather(*(one() for _ in range(n)))

    return asyncio.run(all_of_them())


if __name__ == "__main__":
    step, *args = sys.argv[1:]
    if step == "invoke":
        out = invoke(args[0])
    elif step == "review":
        out = review(args[0])
    else:
        out = burst(args[0], int(args[1]))
    print(json.dumps(out), flush=True)
