"""Every Kafka client the project creates, built in one place from `Settings`.

Bootstrap servers, security protocol, SASL credentials, the TLS context and the producers'
compression all come from here, so a cluster that needs TLS and SCRAM is configured once
(docs/connect.md). Failures to connect become one clear error each: `AuthenticationFailed`
(the credentials), `TlsFailed` (the certificate or handshake), `NotAuthorized` (an ACL),
`BrokerError` (anything else). Secrets go to the clients and nowhere else: no message built
here names a password or a key.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient

from stream_adapter.core.errors import (
    AdapterError,
    AuthenticationFailed,
    BrokerError,
    NotAuthorized,
    RecordTooLarge,
    TlsFailed,
)
from stream_adapter.kafka.codecs import check_codecs
from stream_adapter.settings import Settings

__all__ = [
    "SIZE_ERRORS",
    "admin",
    "check_connection",
    "client_options",
    "compression_type",
    "connection_error",
    "consumer",
    "kafka_error",
    "producer",
    "ssl_context",
    "started",
]

Client = TypeVar("Client", AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient)

_AUTHORIZATION_ERRORS: dict[type[Exception], str] = {
    kafka_errors.TopicAuthorizationFailedError: "a topic",
    kafka_errors.GroupAuthorizationFailedError: "the consumer group",
    kafka_errors.ClusterAuthorizationFailedError: "the cluster",
    kafka_errors.TransactionalIdAuthorizationFailed: "the transactional id",
}

SIZE_ERRORS: tuple[type[Exception], ...] = (
    kafka_errors.MessageSizeTooLargeError,
    kafka_errors.RecordTooLargeError,
    kafka_errors.RecordListTooLargeError,
)
"""A record (or batch) too large for the producer's max_request_size or the topic's
max.message.bytes: the record's fault, so retrying it can never succeed."""


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of SSL and SASL_SSL connections (None for the other protocols).

    Verifies the broker's certificate and host name against SSL_CAFILE (else the system's
    CAs); presents SSL_CERTFILE/SSL_KEYFILE when given (mutual TLS).
    """
    if not settings.uses_tls:
        return None
    try:
        context = ssl.create_default_context(cafile=settings.ssl_cafile or None)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFailed(f"cannot load SSL_CAFILE {settings.ssl_cafile}: {_reason(exc)}") from None
    if settings.ssl_certfile:
        password = settings.ssl_key_password.get_secret_value() or None
        try:
            context.load_cert_chain(
                settings.ssl_certfile, settings.ssl_keyfile or None, password=password
            )
        except (OSError, ssl.SSLError) as exc:
            raise TlsFailed(
                f"cannot load the client certificate {settings.ssl_certfile}: {_reason(exc)}"
            ) from None
    return context


def _reason(exc: BaseException) -> str:
    """An OS or SSL error's reason, without its arguments (they could quote a key file)."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).replace("_", " ").lower()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def client_options(settings: Settings) -> dict[str, Any]:
    """What every aiokafka client gets: where the cluster is and how to authenticate."""
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "security_protocol": settings.security_protocol,
    }
    context = ssl_context(settings)
    if context is not None:
        options["ssl_context"] = context
    if settings.security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = settings.sasl_mechanism
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = settings.sasl_password.get_secret_value()
    return options


def compression_type(settings: Settings) -> str | None:
    """The producers' `compression_type` (None for "none")."""
    return None if settings.compression == "none" else settings.compression


def producer(settings: Settings, **options: Any) -> AIOKafkaProducer:
    """A producer acknowledged by all in-sync replicas, compressed as COMPRESSION says."""
    check_codecs()
    base: dict[str, Any] = {"acks": "all", "compression_type": compression_type(settings)}
    return AIOKafkaProducer(**client_options(settings), **{**base, **options})


def consumer(settings: Settings, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer (group-less unless `group_id` is given); it reads every codec."""
    check_codecs()
    base: dict[str, Any] = {"enable_auto_commit": False}
    return AIOKafkaConsumer(*topics, **client_options(settings), **{**base, **options})


def admin(settings: Settings, **options: Any) -> AIOKafkaAdminClient:
    """An admin client (topics, configs, metadata)."""
    base: dict[str, Any] = {"request_timeout_ms": 10_000}
    return AIOKafkaAdminClient(**client_options(settings), **{**base, **options})


@contextlib.asynccontextmanager
async def started(settings: Settings, client: Client) -> AsyncIterator[Client]:
    """Start client, yield it, stop it; a failure to connect is raised as one clear error."""
    await start(settings, client)
    try:
        yield client
    finally:
        await _stop(client)


async def start(settings: Settings, client: Client) -> Client:
    """Start client; on failure stop it and raise connection_error's verdict."""
    try:
        await client.start()
    except Exception as exc:
        await _stop(client)
        raise await connection_error(settings, exc) from None
    return client


async def check_connection(settings: Settings) -> None:
    """Fail fast, with one clear error, when this process could not use the cluster.

    Checks the codecs, then connects and asks for the cluster's metadata as the settings say.
    """
    check_codecs()
    async with started(settings, admin(settings)) as client:
        try:
            await client.describe_cluster()
        except Exception as exc:
            raise kafka_error(exc, "describe the cluster") from None


async def _stop(client: Any) -> None:
    with contextlib.suppress(Exception):
        if isinstance(client, AIOKafkaAdminClient):
            await client.close()
        else:
            await client.stop()


async def connection_error(settings: Settings, exc: BaseException) -> AdapterError:
    """What went wrong connecting, as one clear error.

    aiokafka reports every failed bootstrap as "Unable to bootstrap" and logs the cause; one
    fresh connection to each bootstrap server, with the same options, finds the cause itself.
    """
    if isinstance(exc, AdapterError):
        return exc
    mapped = kafka_error(exc, "connect")
    if not isinstance(exc, kafka_errors.KafkaConnectionError):
        return mapped
    for host, port in _hosts(settings):
        cause = await _probe(settings, host, port)
        if cause is not None:
            return cause
    return mapped


def _hosts(settings: Settings) -> Iterable[tuple[str, int]]:
    for server in settings.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if host and port.isdigit():
            yield host.strip("[]"), int(port)


async def _probe(settings: Settings, host: str, port: int) -> AdapterError | None:
    """Open one connection to host:port as the clients would; the error it meets, if any."""
    from aiokafka.conn import create_conn

    options = client_options(settings)
    options.pop("bootstrap_servers")
    sasl = {
        "sasl_mechanism": options.pop("sasl_mechanism", None),
        "sasl_plain_username": options.pop("sasl_plain_username", None),
        "sasl_plain_password": options.pop("sasl_plain_password", None),
    }
    where = f"{host}:{port}"
    try:
        conn = await asyncio.wait_for(
            create_conn(host, port, request_timeout_ms=10_000, **options, **sasl), 15
        )
    except ssl.SSLCertVerificationError as err:
        detail = err.verify_message or _reason(err)
        return TlsFailed(f"the certificate of {where} is not trusted: {detail} (see SSL_CAFILE)")
    except ssl.SSLError as err:
        return TlsFailed(f"TLS handshake with {where} failed: {_reason(err)}")
    except kafka_errors.UnsupportedSaslMechanismError:
        return AuthenticationFailed(
            f"{where} does not offer SASL mechanism {settings.sasl_mechanism}"
        )
    except kafka_errors.SaslAuthenticationFailed:
        return AuthenticationFailed(
            f"{where} refused the credentials of user {settings.sasl_username!r} "
            f"({settings.sasl_mechanism}): check SASL_USERNAME and SASL_PASSWORD"
        )
    except kafka_errors.KafkaConnectionError:
        # The listener hung up while the connection was set up: it speaks another protocol,
        # or it wants a client certificate this client did not present.
        return BrokerError(
            f"{where} closed the connection while it was set up: does the listener use "
            f"{settings.security_protocol} (SECURITY_PROTOCOL), and does it require a client "
            "certificate (SSL_CERTFILE)?"
        )
    except (OSError, TimeoutError, kafka_errors.KafkaError) as err:
        return BrokerError(f"cannot reach the broker at {where}: {type(err).__name__}")
    conn.close()
    return None


def kafka_error(exc: BaseException, action: str) -> AdapterError:
    """An aiokafka error met while doing `action` (e.g. "write tool-calls"), as an AdapterError.

    Only error class names reach the message: a broker error's text can quote the request.
    """
    if isinstance(exc, AdapterError):
        return exc
    if isinstance(exc, SIZE_ERRORS):
        return RecordTooLarge(f"the broker refused a record too large: cannot {action}")
    for kind, what in _AUTHORIZATION_ERRORS.items():
        if isinstance(exc, kind):
            return NotAuthorized(f"the cluster's ACLs refuse {what}: cannot {action}")
    if isinstance(exc, kafka_errors.SaslAuthenticationFailed):
        return AuthenticationFailed(f"the cluster refused the credentials: cannot {action}")
    return BrokerError(f"cannot {action}: {type(exc).__name__}")
