"""The HTTP tool server (`create_app`): calls over HTTP, approvals resumed over its own routes.

Needs the ``http`` extra (Starlette; uvicorn to serve it).
"""

from stream_adapter.hosts.http.app import IDEMPOTENCY_HEADER, ToolServer, create_app
from stream_adapter.hosts.http.credentials import BearerTokens, bearer_token

__all__ = ["IDEMPOTENCY_HEADER", "BearerTokens", "ToolServer", "bearer_token", "create_app"]
