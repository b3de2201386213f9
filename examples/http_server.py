"""The HTTP tool server over the demo tools, for any ASGI host (uvicorn, Modal, Vercel, FastAPI).

    STREAM_ADAPTER_CALLERS_FILE=callers.json STREAM_ADAPTER_REVIEWERS_FILE=reviewers.json \\
    STREAM_ADAPTER_APPROVAL_STORE=redis://cache:6379/0 uvicorn examples.http_server:app

Tokens: ``STREAM_ADAPTER_REVIEWERS_FILE=callers.json stream-adapter reviewers add agent-1``
gives a caller token; the same command with the reviewers file gives a reviewer token.
"""

from __future__ import annotations

import os

from examples.backend import TOOLS, backend
from stream_adapter import create_app

__all__ = ["CALLERS_ENV", "REVIEWERS_ENV", "app"]

CALLERS_ENV = "STREAM_ADAPTER_CALLERS_FILE"
REVIEWERS_ENV = "STREAM_ADAPTER_REVIEWERS_FILE"

# Built once per process (per container); serve it with any ASGI server.
app = create_app(
    backend(),
    callers=os.environ.get(CALLERS_ENV, "callers.json"),
    reviewers=os.environ.get(REVIEWERS_ENV, "reviewers.json"),
    tools=TOOLS,
)
