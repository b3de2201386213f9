"""The local broker with authentication, encryption and ACLs (`kafka start --secure`).

Beside the plain broker's state, its home holds `secure/`: a CA made for this broker, the
broker's certificate (for 127.0.0.1 and localhost), a client certificate per user for mutual
TLS, and `credentials.json` with the users' generated passwords (readable by the owner only).
Listeners:

- SASL_SSL on `port`: SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN, users created at format time;
- SSL on `mtls_port`: a client certificate is required, its CN is the principal (`User:CN`);
- the controller's own listener stays PLAINTEXT on 127.0.0.1 (its principal, ANONYMOUS, is a
  super user so the node can register itself; nothing else should use that port).

The standard authorizer refuses everything no ACL allows; `admin` is the super user.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream_adapter.core.errors import BrokerError
from stream_adapter_dev.broker import local

USERS = ("admin", "agents", "adapter", "review")
"""SCRAM users (and mTLS client certificates) made for the run; `admin` is the super user."""
_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_ADMIN_MECHANISM = "SCRAM-SHA-512"
_CERT_DAYS = 30


@dataclass(frozen=True, slots=True)
class SecureBroker:
    """Where the secured broker runs: its SASL_SSL port and its mTLS port."""

    home: Path = local.DEFAULT_HOME
    port: int = 9092
    mtls_port: int | None = None
    controller_port: int | None = None
    heap_mb: int = 768
    jars_dir: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def secure_dir(self) -> Path:
        return self.home / "secure"

    @property
    def ca_file(self) -> Path:
        return self.secure_dir / "ca.pem"

    @property
    def mtls(self) -> int:
        return self.mtls_port or self.port + 2

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def mtls_bootstrap(self) -> str:
        return f"127.0.0.1:{self.mtls}"

    def cert_file(self, user: str) -> Path:
        """The user's client certificate and key (PEM, one file), for mutual TLS."""
        return self.secure_dir / f"{user}.pem"

    def password(self, user: str) -> str:
        """The generated SCRAM password of user (a secret)."""
        return str(_credentials(self)[user])

    def sasl_env(self, user: str, mechanism: str = _ADMIN_MECHANISM) -> dict[str, str]:
        """STREAM_ADAPTER_* variables that connect as user over SASL_SSL."""
        return {
            "STREAM_ADAPTER_BROKER": self.bootstrap,
            "STREAM_ADAPTER_SECURITY_PROTOCOL": "SASL_SSL",
            "STREAM_ADAPTER_SASL_MECHANISM": mechanism,
            "STREAM_ADAPTER_SASL_USERNAME": user,
            "STREAM_ADAPTER_SASL_PASSWORD": self.password(user),
            "STREAM_ADAPTER_SSL_CAFILE": str(self.ca_file.resolve()),
        }

    def mtls_env(self, user: str) -> dict[str, str]:
        """STREAM_ADAPTER_* variables that connect as user with a client certificate."""
        return {
            "STREAM_ADAPTER_BROKER": self.mtls_bootstrap,
            "STREAM_ADAPTER_SECURITY_PROTOCOL": "SSL",
            "STREAM_ADAPTER_SSL_CAFILE": str(self.ca_file.resolve()),
            "STREAM_ADAPTER_SSL_CERTFILE": str(self.cert_file(user).resolve()),
        }

    def admin_properties(self) -> Path:
        """A Java client config (`--command-config`) that connects as admin."""
        path = self.secure_dir / "admin.properties"
        if not path.exists():
            _write_private(
                path,
                "security.protocol=SASL_SSL\n"
                f"sasl.mechanism={_ADMIN_MECHANISM}\n"
                f"sasl.jaas.config={_jaas('scram', 'admin', self.password('admin'))}\n"
                "ssl.truststore.type=PEM\n"
                f"ssl.truststore.location={self.ca_file.resolve()}\n",
            )
        return path

    def config(self) -> local.BrokerConfig:
        """The plain broker's config with the secured listeners, users and authorizer."""
        prepare(self)
        return local.BrokerConfig(
            home=self.home,
            port=self.port,
            controller_port=self.controller_port,
            heap_mb=self.heap_mb,
            jars_dir=self.jars_dir,
            extra={**_properties(self), **self.extra},
            format_args=tuple(_scram_args(self)),
            probe_options=_probe_options(self),
        )


def prepare(broker: SecureBroker) -> None:
    """Make the CA, certificates and passwords once; later starts reuse them."""
    if (broker.secure_dir / "credentials.json").exists():
        return
    broker.secure_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(broker.secure_dir, 0o700)
    ca_key, ca_cert = _ca("stream-adapter local CA")
    _write_private(broker.ca_file, _pem_cert(ca_cert))
    server_key, server_cert = _leaf(ca_key, ca_cert, "127.0.0.1", server=True)
    _write_private(broker.secure_dir / "broker.pem", _pem_key(server_key) + _pem_cert(server_cert))
    for user in USERS:
        key, cert = _leaf(ca_key, ca_cert, user, server=False)
        _write_private(broker.cert_file(user), _pem_cert(cert) + _pem_key(key))
    passwords = {user: secrets.token_hex(16) for user in USERS}
    _write_private(broker.secure_dir / "credentials.json", json.dumps(passwords, indent=2))


def start(broker: SecureBroker, *, timeout_s: float = 120.0) -> str:
    """Start the secured broker and give it the default deployment's ACLs on first start."""
    bootstrap = local.start(broker.config(), timeout_s=timeout_s)
    marker = broker.secure_dir / "acls.applied"
    if not marker.exists():
        from stream_adapter.ops.acls import acls
        from stream_adapter.settings import Settings

        lines = [acl.args(admin_args(broker)) for acl in acls(Settings.model_construct())]
        run_acl_commands(broker, lines)
        marker.write_text("default ACLs applied\n")
    return bootstrap


def admin_args(broker: SecureBroker) -> list[str]:
    """What `$ADMIN` stands for in the documented ACL commands, for this broker."""
    config = str(broker.admin_properties())
    return ["--bootstrap-server", broker.bootstrap, "--command-config", config]


def run_acl_commands(broker: SecureBroker, commands: list[list[str]]) -> list[str]:
    """Run Kafka's own `kafka-acls` (AclCommand) once per argument list; their outputs.

    A few at a time: each is a JVM that spends most of its seconds waiting on the broker.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(ACL_COMMANDS_AT_ONCE) as pool:
        return list(pool.map(lambda args: run_acl_command(broker, args), commands))


ACL_COMMANDS_AT_ONCE = 4


def run_acl_command(broker: SecureBroker, args: list[str]) -> str:
    """Run Kafka's own `kafka-acls` (AclCommand) from the broker's jars; its output."""
    return run_tool(broker, "org.apache.kafka.tools.AclCommand", args)


def run_tool(broker: SecureBroker | local.BrokerConfig, main: str, args: list[str]) -> str:
    """Run one of Kafka's command-line tools (a main class) on the broker's classpath."""
    libs = local.ensure_jars(broker.config() if isinstance(broker, SecureBroker) else broker)
    cmd = [
        local._java(),
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-cp",
        f"{libs.resolve()}/*",
        main,
        *args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        tool = main.rsplit(".", 1)[-1]
        raise BrokerError(f"{tool} failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return done.stdout


def _credentials(broker: SecureBroker) -> dict[str, Any]:
    path = broker.secure_dir / "credentials.json"
    if not path.exists():
        prepare(broker)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _jaas(kind: str, user: str, password: str, extra: str = "") -> str:
    module = {
        "scram": "org.apache.kafka.common.security.scram.ScramLoginModule",
        "plain": "org.apache.kafka.common.security.plain.PlainLoginModule",
    }[kind]
    return f'{module} required username="{user}" password="{password}"{extra};'


def _properties(broker: SecureBroker) -> dict[str, str]:
    creds = _credentials(broker)
    admin = creds["admin"]
    plain_users = "".join(f' user_{user}="{creds[user]}"' for user in USERS)
    ctrl = broker.controller_port or broker.port + 1
    secure = broker.secure_dir.resolve()
    return {
        "listeners": (
            f"SASL_SSL://127.0.0.1:{broker.port},SSL://127.0.0.1:{broker.mtls},"
            f"CONTROLLER://127.0.0.1:{ctrl}"
        ),
        "advertised.listeners": (
            f"SASL_SSL://127.0.0.1:{broker.port},SSL://127.0.0.1:{broker.mtls}"
        ),
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "sasl.mechanism.inter.broker.protocol": _ADMIN_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas("scram", "admin", admin),
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": _jaas("scram", "admin", admin),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas(
            "plain", "admin", admin, plain_users
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(secure / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(secure / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
        # A client certificate's CN is its principal: CN=agents is User:agents.
        "ssl.principal.mapping.rules": "RULE:^CN=([a-zA-Z0-9._-]+)(,.*)?$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:admin;User:ANONYMOUS",
    }


def _scram_args(broker: SecureBroker) -> list[str]:
    creds = _credentials(broker)
    args: list[str] = []
    for user in USERS:
        for mechanism in _MECHANISMS:
            args += ["--add-scram", f"{mechanism}=[name={user},password={creds[user]}]"]
    return args


def _probe_options(broker: SecureBroker) -> dict[str, Any]:
    import ssl

    return {
        "security_protocol": "SASL_SSL",
        "ssl_context": ssl.create_default_context(cafile=str(broker.ca_file)),
        "sasl_mechanism": _ADMIN_MECHANISM,
        "sasl_plain_username": "admin",
        "sasl_plain_password": broker.password("admin"),
    }


# -- certificates -------------------------------------------------------------------------------


def _ca(name: str) -> tuple[Any, Any]:
    """A fresh self-signed CA: (key, certificate)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def new_ca(name: str, path: Path) -> Path:
    """Write a CA certificate nobody uses to path (an untrusted CA, for trying refusals)."""
    _, cert = _ca(name)
    _write_private(path, _pem_cert(cert))
    return path


def _leaf(ca_key: Any, ca_cert: Any, name: str, *, server: bool) -> tuple[Any, Any]:
    """A key and certificate for name signed by the CA: a server's (SAN 127.0.0.1 and
    localhost) or a client's (CN=name)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=_CERT_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    return key, builder.sign(ca_key, hashes.SHA256())


def _pem_cert(cert: Any) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding

    return str(cert.public_bytes(Encoding.PEM).decode())


def _pem_key(key: Any) -> str:
    """PKCS#8, unencrypted: what Kafka's PEM key store reads."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    return str(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode())


def _write_private(path: Path, text: str) -> None:
    """Write text to a file only its owner can read (keys and passwords)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
