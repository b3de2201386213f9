"""Run in a child process (a fresh Lambda container): API Gateway v2 events through Mangum.

Reads a JSON list of events on stdin, invokes ``examples.http_lambda.handler`` once per event
in order (warm invocations of one container), and prints the responses as one JSON line.
"""

from __future__ import annotations

import json
import sys


class Context:
    """The parts of a Lambda context an ASGI adapter may read."""

    aws_request_id = "req-1"
    function_name = "tools"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


if __name__ == "__main__":
    from examples.http_lambda import handler

    events = json.loads(sys.stdin.read())
    print(json.dumps([handler(event, Context()) for event in events]), flush=True)
