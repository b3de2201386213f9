"""The HTTP tool server over the demo tools, for any ASGI host (uvicorn, Modal, Vercel, FastAPI).

    STREAM_ADAPTER_CALLERS_FILE=callers.json STREAM_ADAPTER_REVIEWERS_FILE=reviewers.json \\
    STREAM_ADAPTER_APPROVAL_STORE=redis://cache:6379/0 uvicorn examples.http_server:app

Tokens: ``STREAM_ADAPTER_REVIEWERS_FILE=callers.json stream-adapter reviewers add agent-1``
gives a caller token; the same command with the reviewers file gives a reviewer token.
Failed tokens are limited per client address as in the review service
(``STREAM_ADAPTER_REVIEW_AUTH_FAILURES`` per ``STREAM_ADAPTER_REVIEW_AUTH_WINDOW_S``), and
``STREAM_ADAPTER_REVIEW_TRUST_FORWARDED=true`` takes that address from ``X-Forwarded-For``;
``STREAM_ADAPTER_REVIEW_TOOL_ROLES=send_invoice=billing`` lets only reviewers with that role
decide the tool's calls.
"""

from __future__ import annotations

import os

from examples.backend import TOOLS, backend
from stream_adapter import create_app
from stream_adapter.review.auth import FailureLimiter
from stream_adapter.settings import Settings

__all__ = ["CALLERS_ENV", "REVIEWERS_ENV", "app"]

CALLERS_ENV = "STREAM_ADAPTER_CALLERS_FILE"
REVIEWERS_ENV = "STREAM_ADAPTER_REVIEWERS_FILE"

settings = Settings()

# Built once per process (per container); serve it with any ASGI server.
app = create_app(
    backend(),
    callers=os.environ.get(CALLERS_ENV, "callers.json"),
    reviewers=os.environ.get(REVIEWERS_ENV, "reviewers.json"),
    tools=TOOLS,
    limiter=FailureLimiter(settings.review_auth_failures, settings.review_auth_window_s),
    trust_forwarded=settings.review_trust_forwarded,
    tool_roles=settings.tool_roles,
)
