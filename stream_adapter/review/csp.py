"""The security headers of every review response: a Content-Security-Policy whose nonce is
fresh per response (the pages' scripts and styles carry it), no caching, sniffing, framing or
referrer."""

from __future__ import annotations

import secrets
from typing import Any

from aiohttp import web

from stream_adapter.review.context import Handler

CSP = (
    "default-src 'none'; script-src 'nonce-{n}'; style-src 'nonce-{n}'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The policy; `{n}` is the response's nonce."""

NONCE = web.RequestKey("nonce", str)


@web.middleware
async def security_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A CSP nonce per response, no caching, no sniffing, no framing, no referrer."""
    request[NONCE] = nonce = secrets.token_urlsafe(16)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        _harden(exc.headers, nonce)
        raise
    _harden(response.headers, nonce)
    return response


def _harden(headers: Any, nonce: str) -> None:
    headers.setdefault("Content-Security-Policy", CSP.format(n=nonce))
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    headers["X-Frame-Options"] = "DENY"
    headers["Cache-Control"] = "no-store"
