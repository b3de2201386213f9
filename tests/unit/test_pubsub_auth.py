"""Pub/Sub push authentication with locally generated RSA keys served as a real JWK set.

Tokens are signed here the way Google signs a push subscription's ID token (RS256, a key id,
aud, iss, email, email_verified); the JWK set is served over HTTP on a free local port.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from examples import queues
from examples.backend import executor
from stream_adapter import BrokerError
from stream_adapter.core.ids import approval_id_for, derive_ids
from stream_adapter.hosts.pubsub import PushVerifier
from stream_adapter.review.auth import Forbidden, Unauthenticated
from tests.services import _free_port

AUDIENCE = "https://tools.example.test/pubsub/push"
ACCOUNT = "push-invoker@demo-project.iam.gserviceaccount.com"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Keys:
    """The signing keys by key id, the JWK set's URL, and how often it was fetched."""

    url: str
    private: dict[str, rsa.RSAPrivateKey]
    fetches: list[float] = field(default_factory=list)

    def jwks(self) -> bytes:
        keys = []
        for kid, key in self.private.items():
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "alg": "RS256", "use": "sig"})
        return json.dumps({"keys": keys}).encode()

    def token(
        self, kid: str | None = None, key: rsa.RSAPrivateKey | None = None, **claims: Any
    ) -> str:
        kid = kid or next(iter(self.private))
        now = int(time.time())
        body = {
            "aud": AUDIENCE,
            "iss": "https://accounts.google.com",
            "azp": "1234567890",
            "email": ACCOUNT,
            "email_verified": True,
            "sub": "1234567890",
            "iat": now,
            "exp": now + 3600,
            **claims,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, key or self.private[kid], algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def keys() -> Iterator[Keys]:
    port = _free_port()
    served = Keys(f"http://127.0.0.1:{port}/oauth2/v3/certs", {uuid.uuid4().hex: new_key()})

    class JWKS(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.fetches.append(time.monotonic())
            body = served.jwks()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), JWKS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


def verifier(keys: Keys) -> PushVerifier:
    return PushVerifier(audience=AUDIENCE, service_account_email=ACCOUNT, jwks_url=keys.url)


async def test_a_valid_push_token_gives_its_claims_and_keys_are_cached(keys: Keys) -> None:
    check = verifier(keys)
    claims = await check.verify(f"Bearer {keys.token()}")
    assert claims["email"] == ACCOUNT and claims["aud"] == AUDIENCE
    await check.verify(f"Bearer {keys.token(iss='accounts.google.com')}")  # both Google forms
    assert len(keys.fetches) == 1  # fetched once, then cached


async def test_a_rotated_key_is_fetched_again(keys: Keys) -> None:
    check = PushVerifier(
        audience=AUDIENCE, service_account_email=ACCOUNT, jwks_url=keys.url, refetch_cooldown_s=0
    )
    await check.verify(f"Bearer {keys.token()}")
    kid = uuid.uuid4().hex
    keys.private[kid] = new_key()
    await check.verify(f"Bearer {keys.token(kid)}")
    assert len(keys.fetches) == 2


async def test_unknown_key_ids_do_not_refetch_within_the_cooldown(keys: Keys) -> None:
    check = verifier(keys)
    await check.verify(f"Bearer {keys.token()}")
    for _ in range(5):
        with pytest.raises(Unauthenticated):
            await check.verify(f"Bearer {keys.token(uuid.uuid4().hex, key=new_key())}")
    assert len(keys.fetches) == 1


@pytest.mark.parametrize(
    "claims",
    [
        {"aud": "https://elsewhere.example.test/push"},
        {"iss": "https://evil.example.test"},
        {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
        {"iat": None},
        {"email": None},
    ],
    ids=["audience", "issuer", "expired", "no-iat", "no-email"],
)
async def test_tokens_with_wrong_claims_are_unauthenticated(
    keys: Keys, claims: dict[str, Any]
) -> None:
    with pytest.raises(Unauthenticated) as caught:
        await verifier(keys).verify(f"Bearer {keys.token(**claims)}")
    assert caught.value.status == 401


@pytest.mark.parametrize(
    "claims",
    [{"email": "someone-else@demo-project.iam.gserviceaccount.com"}, {"email_verified": False}],
    ids=["other-account", "unverified-email"],
)
async def test_another_service_account_is_forbidden(keys: Keys, claims: dict[str, Any]) -> None:
    with pytest.raises(Forbidden) as caught:
        await verifier(keys).verify(f"Bearer {keys.token(**claims)}")
    assert caught.value.status == 403


async def test_forged_tokens_are_unauthenticated(keys: Keys) -> None:
    check = verifier(keys)
    kid = next(iter(keys.private))
    public_pem = keys.private[kid].public_key()
    forged = [
        keys.token(kid, key=new_key()),  # the right key id, another key
        keys.token(uuid.uuid4().hex, key=new_key()),  # a key id nobody published
        jwt.encode({"aud": AUDIENCE, "email": ACCOUNT}, None, algorithm="none"),
        _hs256_with_public_key(public_pem, kid),
        "not.a.token",
        keys.token()[:-4] + "AAAA",  # a broken signature
    ]
    for token in forged:
        with pytest.raises(Unauthenticated):
            await check.verify(f"Bearer {token}")
    for header in (None, "", "Basic abc", "Bearer ", keys.token()):
        with pytest.raises(Unauthenticated):
            await check.verify(header)


def _hs256_with_public_key(public_key: Any, kid: str) -> str:
    """The algorithm-confusion attack: HS256 keyed with the (public) RSA key's bytes."""
    from cryptography.hazmat.primitives import serialization

    secret = public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "typ": "JWT", "kid": kid}
    body = {"aud": AUDIENCE, "iss": "https://accounts.google.com", "email": ACCOUNT}
    parts = [
        base64.urlsafe_b64encode(json.dumps(x).encode()).rstrip(b"=").decode()
        for x in (header, body)
    ]
    import hashlib
    import hmac

    mac = hmac.new(secret, ".".join(parts).encode(), hashlib.sha256).digest()
    return ".".join([*parts, base64.urlsafe_b64encode(mac).rstrip(b"=").decode()])


async def test_unreachable_keys_are_a_retryable_503() -> None:
    check = PushVerifier(
        audience=AUDIENCE,
        service_account_email=ACCOUNT,
        jwks_url=f"http://127.0.0.1:{_free_port()}/certs",
        fetch_timeout_s=2.0,
    )
    token = jwt.encode(
        {"aud": AUDIENCE, "email": ACCOUNT}, new_key(), algorithm="RS256", headers={"kid": "k"}
    )
    with pytest.raises(BrokerError) as caught:
        await check.verify(f"Bearer {token}")
    assert caught.value.status == 503 and caught.value.retryable


def test_audience_and_account_are_required() -> None:
    with pytest.raises(ValueError):
        PushVerifier(audience="", service_account_email=ACCOUNT)


# -- the recipe ---------------------------------------------------------------------------------


@pytest.fixture
def recipe(keys: Keys, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(queues.PUBSUB_AUDIENCE_ENV, AUDIENCE)
    monkeypatch.setenv(queues.PUBSUB_ACCOUNT_ENV, ACCOUNT)
    monkeypatch.setenv(queues.PUBSUB_JWKS_ENV, keys.url)
    queues.push_verifier.cache_clear()
    yield
    queues.push_verifier.cache_clear()


def push(envelope: dict[str, Any]) -> dict[str, Any]:
    message_id = str(uuid.uuid4().int)[:16]
    data = base64.b64encode(json.dumps(envelope).encode()).decode()
    return {
        "message": {"data": data, "messageId": message_id, "attributes": {}},
        "subscription": "projects/demo/subscriptions/tool-calls-push",
    }


async def test_the_push_endpoint_runs_only_authenticated_pushes(keys: Keys, recipe: None) -> None:
    call = {"tool": "send_invoice", "arguments": {"customer": "acme", "amount_cents": 5}}
    body = push(call)
    approval_id = approval_id_for(*derive_ids(body["message"]["messageId"], "pubsub"), "pubsub")
    status, problem = await queues.pubsub_endpoint(None, body)
    assert status == 401 and problem["kind"] == "Unauthenticated"
    other = keys.token(email="intruder@elsewhere.iam.gserviceaccount.com")
    status, problem = await queues.pubsub_endpoint(f"Bearer {other}", body)
    assert status == 403
    store = executor().store
    assert store is not None and await store.get(approval_id) is None  # refused: nothing parked
    status, reply = await queues.pubsub_endpoint(f"Bearer {keys.token()}", body)
    assert status == 200 and reply["status"] == "pending_approval"
    assert reply["approval_id"] == approval_id and await store.get(approval_id) is not None
    status, reply = await queues.pubsub_endpoint(
        f"Bearer {keys.token()}", push({"tool": "add", "arguments": {"a": 1, "b": 2}})
    )
    assert status == 200 and reply["result"] == 3
