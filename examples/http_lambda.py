"""The HTTP tool server on AWS Lambda: API Gateway HTTP APIs (payload v2) or a function URL.

Set the function's handler to ``examples.http_lambda.handler``. Mangum runs every warm
invocation on one event loop, so the store's clients stay open between invocations.
"""

from __future__ import annotations

from mangum import Mangum

from examples.http_server import app

__all__ = ["handler"]

handler = Mangum(app, lifespan="off")
