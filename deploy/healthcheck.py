"""The container's health check: the process in it answers over HTTP.

The image runs `stream-adapter worker` or `stream-adapter review`; which one is read from the
container's first process (or given as the first argument). The worker is healthy when its
metrics server answers `/health` (with `STREAM_ADAPTER_WEB_PORT=0` there is nothing to ask: it
counts as healthy while it runs); the review service when it answers on its port at all (it only
listens once its view of the approvals has caught up). Exit 0 healthy, 1 not.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 4.0


def command() -> str:
    """The stream-adapter subcommand this container runs (`worker` by default)."""
    if len(sys.argv) > 1:
        return sys.argv[1]
    try:
        args = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "worker"
    for arg in args:
        if arg in (b"worker", b"review"):
            return arg.decode()
    return "worker"


def answers(url: str, *, any_status: bool) -> bool:
    """True when url answers 200 (any HTTP status, with any_status)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return response.status == 200 or any_status
    except urllib.error.HTTPError as exc:
        return any_status and exc.code < 500
    except (OSError, ValueError):
        return False


def main() -> int:
    env = os.environ.get
    if command() == "review":
        port = env("STREAM_ADAPTER_REVIEW_PORT", "8080")
        return 0 if answers(f"http://127.0.0.1:{port}/health", any_status=True) else 1
    port = env("STREAM_ADAPTER_WEB_PORT", "6066")
    if port == "0":
        return 0
    return 0 if answers(f"http://127.0.0.1:{port}/health", any_status=False) else 1


if __name__ == "__main__":
    sys.exit(main())
