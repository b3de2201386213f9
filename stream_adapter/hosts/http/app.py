"""The HTTP tool server: an ASGI app (Starlette) that runs calls and owns the approvals it parks.

Every route needs a bearer token. Callers (agents) hold tokens of the callers file; reviewers
hold tokens of the reviewers file; both files are the review service's format. A confirm call
parks a record whose ``origin`` is the server's and whose ``source`` names its caller, so:

- only the server resumes it (``handle_envelope`` on a queue or function refuses it), and only
  for the caller that made the call (``POST /approvals/{id}/resume``);
- only a reviewer decides it (``POST /approvals/{id}/decision``), never the caller itself.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from stream_adapter.core import logs
from stream_adapter.core.approvals import (
    ApprovalRecord,
    ApprovalState,
    ApprovalStore,
    new_record,
    same_call,
)
from stream_adapter.core.envelope import MAX_ENVELOPE_BYTES, MAX_ID_CHARS, parse_envelope
from stream_adapter.core.errors import (
    AdapterError,
    ApprovalNotFound,
    TokenChecksBusy,
    ToolFailed,
    ToolUsageError,
    TooManyFailures,
    Unauthenticated,
    problem,
)
from stream_adapter.core.executor import Executor
from stream_adapter.core.replies import Reply, ok_reply
from stream_adapter.core.tools import ToolNames, allow_list
from stream_adapter.hosts.backend import Backend, executor_of
from stream_adapter.hosts.handler import (
    handle_envelope,
    park_once,
    record_decision,
    resolve_outcome,
)
from stream_adapter.hosts.http.credentials import BearerTokens, bearer_token
from stream_adapter.review.auth import FailureLimiter, ReviewersFile, TokenChecks
from stream_adapter.review.bodies import (
    DecisionRequest,
    ResolutionRequest,
    read_decision,
    read_resolution,
)
from stream_adapter.review.policy import ToolRoles, check_may_decide

__all__ = ["IDEMPOTENCY_HEADER", "ToolServer", "create_app"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""A retried request with the same key is the same call (its ids derive from the key)."""

MAX_DECISION_BODY_BYTES = 8 * 1024
REALM = 'Bearer realm="stream-adapter tools"'

Role = Literal["caller", "reviewer"]
Handler = Callable[[Request, str], Awaitable[Response]]
Credentials = BearerTokens | ReviewersFile | str | os.PathLike[str]


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _problem(exc: AdapterError) -> Response:
    headers = {"WWW-Authenticate": REALM} if exc.status == 401 else None
    return Response(
        orjson.dumps(problem(exc)),
        exc.status,
        headers=headers,
        media_type="application/problem+json",
    )


def _tokens(credentials: Credentials, checks: TokenChecks) -> BearerTokens:
    if isinstance(credentials, BearerTokens):
        return credentials
    return BearerTokens(credentials, checks=checks)


class ToolServer:
    """The routes' state: the server's own executor, the allow-list and the two token files."""

    def __init__(
        self,
        backend: Executor | Backend,
        *,
        callers: Credentials,
        reviewers: Credentials,
        tools: ToolNames | None = None,
        origin: str = "http",
        limiter: FailureLimiter | None = None,
        trust_forwarded: bool = False,
        tool_roles: ToolRoles | None = None,
    ) -> None:
        given = executor_of(backend)
        # Its own executor: what it parks carries its origin, whatever the backend's is.
        self.executor = Executor(given.registry, given.store, origin=origin, tools=given.tools)
        self.tools = allow_list(tools)
        self.origin = origin
        self.checks = TokenChecks()
        self.callers = _tokens(callers, self.checks)
        self.reviewers = _tokens(reviewers, self.checks)
        self.limiter = limiter if limiter is not None else FailureLimiter()
        """Failed tokens per client address, counted before a token is hashed."""
        self.trust_forwarded = trust_forwarded
        """Take the client's address from X-Forwarded-For (set by a proxy in front)."""
        self.proxy_warned = False
        self.tool_roles: ToolRoles = tool_roles or {}
        """Roles one of which a tool's reviewers must have (`roles` in the reviewers file)."""

    def client_of(self, request: Request) -> str:
        """The client's address: the peer, or the one a trusted proxy in front appended.
        Warns once when requests look proxied and the proxy is not trusted."""
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded is not None and self.trust_forwarded:
            last = forwarded.rsplit(",", 1)[-1].strip()
            if last:
                return last[:64]
        if forwarded is not None and not self.proxy_warned:
            self.proxy_warned = True
            logs.event(
                logs.WARNING,
                "tool server: requests come through a proxy (X-Forwarded-For) but it is not "
                "trusted (trust_forwarded): failed-token limits count every client behind it "
                "as one",
                event="proxy_not_trusted",
            )
        return request.client.host if request.client is not None else "unknown"

    async def authenticate(self, request: Request, tokens: BearerTokens) -> str:
        """The name of the request's bearer token. A token not remembered as valid is counted
        against the client's address before it is hashed (forgiven when it passes):
        TooManyFailures past the limit, Unauthenticated when it fails."""
        token = bearer_token(request.headers.get("authorization"))
        name = tokens.remembered(token)
        if name is not None:
            return name
        client = self.client_of(request)
        stamp = self.limiter.begin(client)
        failed = False
        try:
            return await tokens.verify(token)
        except Unauthenticated:
            failed = True
            logs.event(
                logs.WARNING, "tool server: token refused", event="bearer_failed", client=client
            )
            raise
        finally:
            if not failed:
                self.limiter.succeeded(client, stamp)

    def source_of(self, caller: str) -> str:
        """The ``source`` of a caller's calls: derived ids and invokers stay apart per caller."""
        return f"{self.origin}:{caller}"

    # -- callers ------------------------------------------------------------------------------

    async def call(self, payload: bytes, caller: str, idempotency_key: str) -> Reply:
        """Run one call envelope for caller; a confirm call parks and answers pending_approval."""
        source = self.source_of(caller)
        envelope = parse_envelope(payload, message_id=idempotency_key, source=source)
        if envelope.approval_id is not None:
            raise ToolUsageError("resume an approval with POST /approvals/{approval_id}/resume")
        assert envelope.tool is not None
        tool = self.executor.resolve(envelope.tool, self.tools)
        if not tool.confirm:
            result = await self.executor.run_tool(
                tool, envelope.arguments, run_id=envelope.run_id, call_id=envelope.call_id
            )
            return ok_reply(tool.name, envelope.run_id, envelope.call_id, result)
        store = self.executor.store
        if store is None:
            raise ToolFailed("this server has no approval store", tool=tool.name)
        tool.validate(envelope.arguments)  # a reviewer never sees a call that cannot run
        record = await park_once(store, new_record(envelope, tool.name, origin=self.origin))
        if record.origin != self.origin or not same_call(
            record, tool.name, envelope.arguments, source
        ):
            raise ToolUsageError("run_id and call_id already name a different call", tool=tool.name)
        logs.event(
            logs.INFO,
            "call parked",
            tool=tool.name,
            approval_id=record.approval_id,
            origin=self.origin,
            state=record.state,
        )
        return await handle_envelope(
            self.executor, {"approval_id": record.approval_id}, tools=self.tools
        )

    async def resume(self, approval_id: str, caller: str) -> Reply:
        """Run caller's approved call once; pending_approval while undecided."""
        await self._record(approval_id, invoker=caller)
        return await handle_envelope(self.executor, {"approval_id": approval_id}, tools=self.tools)

    # -- reviewers ----------------------------------------------------------------------------

    async def approvals(self, state: ApprovalState | None) -> list[dict[str, Any]]:
        """This server's records, oldest first."""
        store = self._store()
        return [_record_json(r) for r in await store.list(state) if r.origin == self.origin]

    async def approval(self, approval_id: str) -> dict[str, Any]:
        return _record_json(await self._record(approval_id))

    async def decide(
        self, approval_id: str, reviewer: str, body: DecisionRequest
    ) -> tuple[int, dict[str, Any]]:
        """record_decision as reviewer: 200 record, 404, 409; 403 on one's own call or a
        tool whose role the reviewer lacks."""
        record = await self._record(approval_id)
        self._may(record, reviewer, "decide")
        return await record_decision(
            self.executor,
            approval_id,
            reviewer=reviewer,
            approved=body.approved,
            reason=body.reason,
        )

    async def resolve(
        self, approval_id: str, reviewer: str, body: ResolutionRequest
    ) -> tuple[int, dict[str, Any]]:
        """resolve_outcome as reviewer: 200 record, 404, 409; 403 on one's own call or a
        tool whose role the reviewer lacks."""
        record = await self._record(approval_id)
        self._may(record, reviewer, "resolve")
        return await resolve_outcome(
            self.executor,
            approval_id,
            reviewer=reviewer,
            ran=body.ran,
            result=body.result,
            reason=body.reason,
        )

    # -- helpers ------------------------------------------------------------------------------

    def _may(self, record: ApprovalRecord, reviewer: str, act: str) -> None:
        """Forbidden unless reviewer (as the reviewers file has them now) may act on record."""
        entry = self.reviewers.file.by_name(reviewer)
        check_may_decide(record, entry, self.tool_roles, act=act)

    def _store(self) -> ApprovalStore:
        if self.executor.store is None:
            raise ToolFailed("this server has no approval store")
        return self.executor.store

    async def _record(self, approval_id: str, *, invoker: str | None = None) -> ApprovalRecord:
        """One of this server's records (of invoker's calls, when given); 404 for any other."""
        if not approval_id or len(approval_id) > MAX_ID_CHARS:
            raise ToolUsageError("malformed approval_id")
        record = await self._store().get(approval_id)
        if (
            record is None
            or record.origin != self.origin
            or (invoker is not None and record.source != self.source_of(invoker))
        ):
            raise ApprovalNotFound(f"no approval {approval_id[:80]!r}", approval_id=approval_id)
        return record

    async def close(self) -> None:
        """Release the executor's threads and this loop's store clients."""
        self.executor.close()
        self.checks.close()
        aclose = getattr(self.executor.store, "aclose", None)
        if aclose is not None:
            await aclose()


def _answer(status: int, body: dict[str, Any]) -> Response:
    """A (status, body) pair of record_decision or resolve_outcome as a response."""
    if status != 200:
        return Response(orjson.dumps(body), status, media_type="application/problem+json")
    return _json(body)


def _record_json(record: ApprovalRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude_none=True)


async def _body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past limit bytes (also when it is streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ToolUsageError(f"the body is larger than {limit} bytes", status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ToolUsageError(f"the body is larger than {limit} bytes", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


def _route(server: ToolServer, role: Role, handler: Handler) -> Callable[[Request], Any]:
    """Authenticate as role, run handler with the credential's name, answer errors as problems."""
    tokens = server.callers if role == "caller" else server.reviewers

    async def endpoint(request: Request) -> Response:
        try:
            name = await server.authenticate(request, tokens)
        except Unauthenticated as exc:
            logs.event(logs.WARNING, "tool server: unauthenticated request", event="unauth")
            return _problem(exc)
        except (TooManyFailures, TokenChecksBusy) as exc:
            response = _problem(exc)
            response.headers["Retry-After"] = str(int(exc.retry_after_s + 0.999))
            return response
        try:
            return await handler(request, name)
        except AdapterError as exc:
            return _problem(exc)

    return endpoint


def _routes(server: ToolServer) -> list[Route]:
    async def list_tools(request: Request, caller: str) -> Response:
        registry = server.executor.registry
        names = [
            name
            for name in registry.names()
            if (server.executor.tools is None or name in server.executor.tools)
            and (server.tools is None or name in server.tools)
        ]
        tools = [
            {"name": n, "confirm": registry.get(n).confirm, "timeout_s": registry.get(n).timeout_s}
            for n in names
        ]
        return _json({"tools": tools})

    async def call(request: Request, caller: str) -> Response:
        key = request.headers.get(IDEMPOTENCY_HEADER.lower(), "")
        if len(key) > MAX_ID_CHARS:
            raise ToolUsageError(f"{IDEMPOTENCY_HEADER} longer than {MAX_ID_CHARS} characters")
        return _json(await server.call(await _body(request, MAX_ENVELOPE_BYTES), caller, key))

    async def resume(request: Request, caller: str) -> Response:
        return _json(await server.resume(request.path_params["approval_id"], caller))

    async def list_approvals(request: Request, reviewer: str) -> Response:
        raw = request.query_params.get("state")
        try:
            state = ApprovalState(raw) if raw else None
        except ValueError:
            choices = ", ".join(s.value for s in ApprovalState)
            raise ToolUsageError(f"state is one of {choices}") from None
        return _json({"approvals": await server.approvals(state)})

    async def get_approval(request: Request, reviewer: str) -> Response:
        return _json(await server.approval(request.path_params["approval_id"]))

    async def decide(request: Request, reviewer: str) -> Response:
        raw = await _body(request, MAX_DECISION_BODY_BYTES)
        body = read_decision(raw)
        status, answer = await server.decide(request.path_params["approval_id"], reviewer, body)
        return _answer(status, answer)

    async def resolve(request: Request, reviewer: str) -> Response:
        raw = await _body(request, MAX_ENVELOPE_BYTES)
        body = read_resolution(raw)
        status, answer = await server.resolve(request.path_params["approval_id"], reviewer, body)
        return _answer(status, answer)

    return [
        Route("/tools", _route(server, "caller", list_tools), methods=["GET"]),
        Route("/calls", _route(server, "caller", call), methods=["POST"]),
        Route(
            "/approvals/{approval_id}/resume",
            _route(server, "caller", resume),
            methods=["POST"],
        ),
        Route("/approvals", _route(server, "reviewer", list_approvals), methods=["GET"]),
        Route(
            "/approvals/{approval_id}",
            _route(server, "reviewer", get_approval),
            methods=["GET"],
        ),
        Route(
            "/approvals/{approval_id}/decision",
            _route(server, "reviewer", decide),
            methods=["POST"],
        ),
        Route(
            "/approvals/{approval_id}/resolution",
            _route(server, "reviewer", resolve),
            methods=["POST"],
        ),
    ]


class _Hardened:
    """ASGI middleware: no caching, no sniffing; unknown paths and methods answer problems."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Mapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_hardened(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"cache-control", b"no-store"),
                    (b"x-content-type-options", b"nosniff"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_hardened)


def create_app(
    backend: Executor | Backend,
    *,
    callers: Credentials,
    reviewers: Credentials,
    tools: ToolNames | None = None,
    origin: str = "http",
    limiter: FailureLimiter | None = None,
    trust_forwarded: bool = False,
    tool_roles: ToolRoles | None = None,
) -> Starlette:
    """The HTTP tool server over backend's tools and approval store (an ASGI app).

    ``callers`` and ``reviewers`` are token files in the review service's format (paths,
    ``ReviewersFile`` or ``BearerTokens``). ``tools`` narrows what runs. ``limiter`` counts
    failed tokens per client address (default: 10 a minute, then 429); ``trust_forwarded``
    takes that address from ``X-Forwarded-For`` (only behind a proxy that sets it).
    ``tool_roles`` maps a tool to the roles one of which its reviewers must have (``roles`` in
    the reviewers file); nobody decides their own call (same name, or a caller name listed
    under ``callers`` in the reviewers file). Routes:

    | route | who | does |
    |---|---|---|
    | ``GET /tools`` | caller | the tools it may call |
    | ``POST /calls`` | caller | run one call envelope (``Idempotency-Key`` names a retry) |
    | ``POST /approvals/{id}/resume`` | the call's caller | run the approved call once |
    | ``GET /approvals[?state=]`` | reviewer | this server's approvals, oldest first |
    | ``GET /approvals/{id}`` | reviewer | one approval |
    | ``POST /approvals/{id}/decision`` | reviewer | ``{"approved", "reason"?}`` |
    | ``POST /approvals/{id}/resolution`` | reviewer | an unknown outcome: ``{"ran", "result"?}`` |

    Answers are replies (200) or RFC 9457 problems with the error's status.
    """
    server = ToolServer(
        backend,
        callers=callers,
        reviewers=reviewers,
        tools=tools,
        origin=origin,
        limiter=limiter,
        trust_forwarded=trust_forwarded,
        tool_roles=tool_roles,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await server.close()

    async def not_found(request: Request, exc: Exception) -> Response:
        return _problem(AdapterError("no such route", status=404))

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _problem(AdapterError("method not allowed", status=405))

    app = Starlette(
        routes=_routes(server),
        lifespan=lifespan,
        exception_handlers={404: not_found, 405: not_allowed},
    )
    app.state.tool_server = server
    app.add_middleware(_Hardened)
    return app
