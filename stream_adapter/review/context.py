"""What every route of the review service shares: the service's state, the keys the app and
each request carry, how a handler says the way its requests authenticate, and plain answers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from stream_adapter.review.auth import (
    FailureLimiter,
    ReviewersFile,
    Session,
    Sessions,
    TokenChecks,
)
from stream_adapter.review.catalog import Catalog
from stream_adapter.review.decide import Decider
from stream_adapter.review.policy import ToolRoles
from stream_adapter.review.view import ApprovalsView

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AuthKind = Literal["api", "page", "login", "public"]


@dataclass
class ReviewService:
    """What the routes need: the view, the decider, the reviewers and the session signer."""

    view: ApprovalsView
    decider: Decider
    reviewers: ReviewersFile
    sessions: Sessions
    secure_cookies: bool = False
    catalog: Catalog = field(default_factory=lambda: Catalog({}))
    limiter: FailureLimiter = field(default_factory=FailureLimiter)
    trust_forwarded: bool = False
    """Take the client's address from X-Forwarded-For (set by a proxy in front), not the peer."""
    tool_roles: ToolRoles = field(default_factory=dict)
    """Roles one of which a tool's reviewers must have (REVIEW_TOOL_ROLES)."""
    checks: TokenChecks = field(default_factory=TokenChecks)
    """Where tokens are hashed: a few threads of their own, a bounded queue."""
    proxy_warned: bool = False


SERVICE = web.AppKey("service", ReviewService)
REVIEWER = web.RequestKey("reviewer", str)
SESSION = web.RequestKey("session", Session)


def auth(kind: AuthKind) -> Callable[[Handler], Handler]:
    """Mark a handler with how its requests authenticate."""

    def mark(handler: Handler) -> Handler:
        handler.auth_kind = kind  # type: ignore[attr-defined]
        return handler

    return mark


def service_of(request: web.Request) -> ReviewService:
    """The review service the request's app serves."""
    return request.app[SERVICE]


def redirect(location: str) -> web.Response:
    """303 to location (after a form post)."""
    return web.Response(status=303, headers={"Location": location})


def html(text: str, status: int = 200) -> web.Response:
    """An HTML answer."""
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")
