"""Connection settings: TLS and SASL options built in one place; secrets never shown."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from stream_adapter.core.errors import TlsFailed
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.settings import Settings
from stream_adapter_dev.broker import secure

SECRET = "s3cr3t-never-shown"


def _sasl(**changes: str) -> Settings:
    values = {
        "broker": "127.0.0.1:9",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_username": "agents",
        "sasl_password": SECRET,
        "ssl_key_password": SECRET,
    }
    return Settings.model_validate({**values, **changes})


def test_secrets_stay_out_of_reprs_dumps_and_errors() -> None:
    settings = _sasl()
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)
    assert SECRET not in settings.model_dump_json()
    with pytest.raises(ValueError) as caught:
        Settings.model_validate(
            {"security_protocol": "PLAINTEXT", "sasl_username": "x", "sasl_password": SECRET}
        )
    assert SECRET not in str(caught.value)


def test_a_child_process_gets_the_secrets_back() -> None:
    env = _sasl().to_env()
    assert env["STREAM_ADAPTER_SASL_PASSWORD"] == SECRET
    again = Settings.model_validate(
        {k.removeprefix("STREAM_ADAPTER_").lower(): v for k, v in env.items()}
    )
    assert again.sasl_password.get_secret_value() == SECRET


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"security_protocol": "SASL_SSL"}, "needs sasl_username"),
        ({"security_protocol": "PLAINTEXT", "sasl_username": "a"}, "has no SASL"),
        ({"security_protocol": "PLAINTEXT", "ssl_cafile": "ca.pem"}, "has no TLS"),
        ({"security_protocol": "SSL", "ssl_keyfile": "k.pem"}, "without ssl_certfile"),
        ({"compression": "brotli"}, "compression"),
    ],
)
def test_inconsistent_settings_are_refused(changes: dict[str, str], says: str) -> None:
    base = {"sasl_username": "", "sasl_password": ""}
    if changes.get("sasl_username"):
        base["sasl_password"] = SECRET
    with pytest.raises(ValueError, match=says):
        Settings.model_validate({**base, **changes})


def test_sasl_ssl_options_for_every_client(tmp_path: Path) -> None:
    broker = secure.SecureBroker(home=tmp_path)
    secure.prepare(broker)
    settings = _sasl(ssl_cafile=str(broker.ca_file))
    options = kafka_clients.client_options(settings)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-256"
    assert options["sasl_plain_username"] == "agents"
    assert options["sasl_plain_password"] == SECRET
    context = options["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_mtls_presents_the_client_certificate(tmp_path: Path) -> None:
    broker = secure.SecureBroker(home=tmp_path)
    secure.prepare(broker)
    env = broker.mtls_env("agents")
    settings = Settings.model_validate(
        {k.removeprefix("STREAM_ADAPTER_").lower(): v for k, v in env.items()}
    )
    options = kafka_clients.client_options(settings)
    assert "sasl_mechanism" not in options
    assert isinstance(options["ssl_context"], ssl.SSLContext)


def test_a_missing_ca_file_is_one_clear_error(tmp_path: Path) -> None:
    settings = _sasl(ssl_cafile=str(tmp_path / "nowhere.pem"))
    with pytest.raises(TlsFailed, match="cannot load SSL_CAFILE"):
        kafka_clients.client_options(settings)


async def test_producers_compress_as_configured() -> None:
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        producer = kafka_clients.producer(Settings.model_validate({"compression": codec}))
        assert producer._compression_type == codec
    producer = kafka_clients.producer(Settings.model_validate({"compression": "none"}))
    assert producer._compression_type is None
