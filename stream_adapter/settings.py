"""The one frozen configuration: `STREAM_ADAPTER_*` environment variables, or CLI options."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from stream_adapter.core.retention import DEFAULT_SETTLED_RETENTION_S

ENV_PREFIX = "STREAM_ADAPTER_"
COMMIT_INTERVAL_S = {"at_least_once": 0.5, "exactly_once": 0.07}
"""How often a worker commits, by processing guarantee. Exactly once, a reply is visible to a
`read_committed` reader only when its transaction commits, so the interval bounds the
reply's latency (0.07 s rather than Kafka Streams' 0.1 s: a lower tail for a little backlog
throughput). At least once it bounds only what a crash answers twice (docs/bench.md)."""
_TOPIC_ROLES = ("calls", "replies", "decisions", "approvals", "dlq")
_TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_SECRET_HELP = "prefer the environment variable: command lines are visible to others"
MIN_SECRET_CHARS = 32
"""Shortest SESSION_SECRET and decision key secret accepted (`secrets.token_hex(16)` is 32)."""

SECRET_FIELDS = ("decision_keys", "session_secret", "sasl_password", "ssl_key_password")
"""Settings that are secrets: never written to os.environ by this process (see `export`)."""
_IN_PROCESS: dict[str, tuple[str, str | None]] = {}
"""Secrets `export` handed to this process's later `Settings()`, kept out of os.environ: by
field, the value and the variable's value in os.environ then (a later change to it wins)."""

Compression = Literal["none", "gzip", "snappy", "lz4", "zstd"]
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


class Settings(BaseSettings):
    """Everything a worker, the CLI and the review service are configured by (contract §12)."""

    # Errors never quote the input: it holds the passwords.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, frozen=True, extra="ignore", hide_input_in_errors=True
    )

    broker: str = Field(
        default="kafka://127.0.0.1:9092",
        description="Kafka bootstrap servers: host:port[,host:port] or kafka://host:port[;…].",
    )
    app_id: str = Field(
        default="stream-adapter",
        description="The worker group's id; also names its internal topics and RocksDB folder.",
    )
    source: str = Field(
        default="kafka",
        description="Namespace of the ids derived from delivery ids (two sources never collide).",
    )
    topology: str = Field(
        default="topologies.demo",
        description="Python module whose `app` the worker runs and whose tools `tools` lists.",
    )
    calls_topic: str = Field(default="tool-calls", description="Topic agents produce calls to.")
    replies_topic: str = Field(default="tool-replies", description="Topic replies go to.")
    decisions_topic: str = Field(
        default="approval-decisions", description="Topic reviewers' decisions arrive on."
    )
    approvals_topic: str = Field(
        default="tool-approvals", description="Compacted changelog of the approvals table."
    )
    dlq_topic: str = Field(
        default="tool-calls-dlq", description="Dead letters: calls and decisions that failed."
    )
    partitions: int = Field(default=8, ge=1, description="Partitions of every topic created.")
    replication_factor: int = Field(default=1, ge=1, description="Replicas of every topic created.")
    min_insync_replicas: int | None = Field(
        default=None,
        ge=1,
        description="min.insync.replicas of every topic created (default: 2 from replication 3 "
        "up, else the broker's).",
    )
    max_in_flight: int = Field(
        default=64, ge=1, description="Tools that run at once in one worker."
    )
    processing_guarantee: Literal["at_least_once", "exactly_once"] = Field(
        default="at_least_once",
        description="exactly_once writes replies and offsets in Kafka transactions.",
    )
    data_dir: Path = Field(
        default=Path(".data"), description="Folder of the worker's RocksDB tables."
    )
    decision_keys: str = Field(
        default="",
        repr=False,
        description="Secret. key_id:secret[,key_id:secret]: decisions must be signed with one "
        "(the last signs).",
    )
    decision_keys_file: Path | None = Field(
        default=None,
        description="A file holding the decision keys (read when DECISION_KEYS is empty).",
    )
    allow_unsigned_decisions: bool = Field(
        default=False,
        description="Accept decisions without a signature (development only; warned at start).",
    )
    retry_attempts: int = Field(
        default=3, ge=1, description="Attempts per call for retryable failures (1: no retry)."
    )
    retry_backoff_s: float = Field(
        default=0.2,
        ge=0,
        description="Backoff before the first retry, in seconds (doubling, jittered).",
    )
    session_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds after which a silent worker's partitions move to another.",
    )
    max_run_s: float = Field(
        default=600.0,
        gt=0,
        description="Seconds one attempt of an approved call's tool without a timeout may take: "
        "its run's deadline, before which 'it did not run' is refused.",
    )
    unknown_outcome_age_limit_s: float = Field(
        default=900.0,
        gt=0,
        description="Seconds an approved call's unknown outcome may wait for a person before "
        "the alert rule fires (exported as a metric).",
    )
    loop_stall_s: float = Field(
        default=0.5,
        gt=0,
        description="Seconds the event loop may be held before the tool holding it is logged.",
    )
    partition_stall_s: float = Field(
        default=300.0,
        gt=0,
        description="Seconds an input partition may have work and no commit progress before "
        "it is reported stalled.",
    )
    web_port: int = Field(
        default=6066, ge=0, le=65535, description="Port of the worker's /metrics (0: off)."
    )
    web_host: str = Field(
        default="127.0.0.1",
        description="Address the worker's /metrics binds (0.0.0.0: every interface).",
    )
    otel_enabled: bool = Field(default=False, description="Export OpenTelemetry traces.")
    review_host: str = Field(default="127.0.0.1", description="Address the review service binds.")
    review_port: int = Field(
        default=8080, ge=0, le=65535, description="Port of the review service."
    )
    reviewers_file: Path = Field(
        default=Path("reviewers.json"), description="Reviewers' names and hashed tokens."
    )
    session_secret: str = Field(
        default="",
        repr=False,
        description="Secret. Signs review sessions (empty: a random one per process).",
    )
    session_ttl_s: int = Field(
        default=8 * 3600, ge=60, description="Seconds a review session lasts."
    )
    settled_retention_s: float = Field(
        default=DEFAULT_SETTLED_RETENTION_S,
        gt=0,
        description="Seconds a settled approval (done, denied, expired) is kept, then removed; "
        "longer than the calls and decisions topics' retention.ms, so a redelivery finds it.",
    )
    pending_expiry_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds an approval may wait for a decision before it expires and its "
        "agent gets ApprovalExpired (unset: pending approvals never expire).",
    )
    max_pending_per_source: int = Field(
        default=10_000,
        ge=0,
        description="Pending approvals one source may have; a call past it is refused with "
        "TooManyPending (429, retryable). A worker counts its own partitions' (0: no cap).",
    )
    approvals_sweep_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds between a worker's sweeps of its approvals table for expired "
        "approvals and settled ones past their retention.",
    )
    pending_approval_age_limit_s: float = Field(
        default=3600.0,
        gt=0,
        description="Seconds a call may wait for a reviewer before the approval-age alert "
        "fires (exported as stream_adapter_pending_approval_age_limit_seconds).",
    )
    review_secure_cookies: bool | None = Field(
        default=None,
        description="Mark the review service's cookies Secure, so browsers send them over HTTPS "
        "only (unset: on unless REVIEW_HOST is a loopback address).",
    )
    review_trust_forwarded: bool = Field(
        default=False,
        description="Take review clients' addresses from X-Forwarded-For (behind a proxy only).",
    )
    review_tool_roles: str = Field(
        default="",
        description="tool=role[,tool=role]: a listed tool's calls are decided and resolved only "
        "by reviewers with one of its roles (`reviewers add NAME --role ROLE`); others by any.",
    )
    review_auth_failures: int = Field(
        default=10, ge=1, description="Failed review tokens per address before it gets 429."
    )
    review_auth_window_s: float = Field(
        default=60.0, gt=0, description="Seconds over which failed review tokens are counted."
    )
    log_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="info", description="Least severe log level written."
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="text for people, json for log collectors."
    )
    # Connecting to a real cluster (docs/connect.md); kafka_clients.py is their one reader.
    compression: Compression = Field(
        default="lz4",
        description="Codec of what the project's producers write (every codec is read).",
    )
    security_protocol: SecurityProtocol = Field(
        default="PLAINTEXT", description="How clients talk to the brokers: TLS and/or SASL."
    )
    sasl_mechanism: SaslMechanism = Field(
        default="SCRAM-SHA-512", description="SASL mechanism (SASL_* protocols)."
    )
    sasl_username: str = Field(default="", description="SASL user (SASL_* protocols).")
    sasl_password: SecretStr = Field(
        default=SecretStr(""), description=f"Secret. The SASL user's password; {_SECRET_HELP}."
    )
    ssl_cafile: str = Field(
        default="", description="PEM CAs of the brokers' certificates (default: the system's)."
    )
    ssl_certfile: str = Field(default="", description="PEM client certificate, for mutual TLS.")
    ssl_keyfile: str = Field(default="", description="PEM key of SSL_CERTFILE, if apart.")
    ssl_key_password: SecretStr = Field(
        default=SecretStr(""), description=f"Secret. SSL_KEYFILE's password; {_SECRET_HELP}."
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments first, then the secrets `export` kept in memory, then the environment."""
        return (
            init_settings,
            _ExportedSecrets(settings_cls),
            env_settings,
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="before")
    @classmethod
    def _honour_kafka_bootstrap(cls, data: Any) -> Any:
        """`KAFKA_BOOTSTRAP_SERVERS` names the broker unless `STREAM_ADAPTER_BROKER` does."""
        servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
        if (
            servers
            and isinstance(data, dict)
            and "broker" not in data
            and f"{ENV_PREFIX}BROKER" not in os.environ
        ):
            data = {**data, "broker": servers}
        return data

    @model_validator(mode="after")
    def _min_insync_fits(self) -> Settings:
        """A topic cannot require more in-sync replicas than it has: every write would fail."""
        if self.min_insync_replicas is not None and (
            self.min_insync_replicas > self.replication_factor
        ):
            raise ValueError(
                f"min_insync_replicas ({self.min_insync_replicas}) exceeds "
                f"replication_factor ({self.replication_factor})"
            )
        return self

    @property
    def topic_min_insync(self) -> int | None:
        """The `min.insync.replicas` our topics get: the setting, else 2 from replication 3 up
        (one replica may be down without refusing writes, none acknowledged on one copy)."""
        if self.min_insync_replicas is not None:
            return self.min_insync_replicas
        return 2 if self.replication_factor >= 3 else None

    @field_validator("broker")
    @classmethod
    def _broker_url(cls, value: str) -> str:
        """Accept `host:port[,host:port]` or `kafka://host:port[;host:port]`; store the URL form."""
        value = value.strip()
        if not value:
            raise ValueError("broker must name at least one host:port")
        if "://" not in value:
            value = "kafka://" + value.replace(",", ";")
        return value

    @model_validator(mode="after")
    def _security_consistent(self) -> Settings:
        """Credentials and TLS files only where the protocol uses them, never half of a pair."""
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and not (self.sasl_username and self.sasl_password.get_secret_value()):
            raise ValueError(f"{self.security_protocol} needs sasl_username and sasl_password")
        if not sasl and self.sasl_username:
            raise ValueError(f"sasl_username is set but {self.security_protocol} has no SASL")
        tls_files = [
            name for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if getattr(self, name)
        ]
        if tls_files and self.security_protocol not in _TLS_PROTOCOLS:
            raise ValueError(f"{tls_files[0]} is set but {self.security_protocol} has no TLS")
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ValueError("ssl_keyfile is set without ssl_certfile")
        return self

    @field_validator("session_secret")
    @classmethod
    def _session_secret_long_enough(cls, value: str) -> str:
        """An empty secret means a random one; a set one must not be guessable."""
        if value and len(value) < MIN_SECRET_CHARS:
            raise ValueError(f"session_secret must be at least {MIN_SECRET_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _decision_keys_long_enough(self) -> Settings:
        """Every decision key secret (of DECISION_KEYS, else of the DECISION_KEYS_FILE) is at
        least MIN_SECRET_CHARS long: a short one lets anyone who guesses it decide. A file
        that cannot be read is left to the reader of the keys, which says why."""
        spec = self.decision_keys
        if not spec and self.decision_keys_file is not None:
            try:
                spec = Path(self.decision_keys_file).read_text()
            except OSError:
                return self
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key_id, _, secret = item.partition(":")
            if secret and len(secret) < MIN_SECRET_CHARS:
                raise ValueError(
                    f"decision key {key_id[:64]!r} is shorter than {MIN_SECRET_CHARS} characters"
                )
        return self

    @field_validator("review_tool_roles")
    @classmethod
    def _tool_roles_readable(cls, value: str) -> str:
        parse_tool_roles(value)
        return value

    @property
    def tool_roles(self) -> dict[str, frozenset[str]]:
        """REVIEW_TOOL_ROLES by tool: the roles one of which its reviewers must have."""
        return parse_tool_roles(self.review_tool_roles)

    @property
    def review_cookies_secure(self) -> bool:
        """Whether the review service's cookies are Secure: the setting, else on unless the
        service binds a loopback address (where the browser is on the same machine)."""
        if self.review_secure_cookies is not None:
            return self.review_secure_cookies
        return not _loopback(self.review_host)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in _TLS_PROTOCOLS

    @property
    def tables_dir(self) -> Path:
        """Where a worker keeps its tables: DATA_DIR/<app id>/<approvals topic>, so apps (or
        one app pointed at another approvals topic) sharing DATA_DIR never share a store."""
        return self.data_dir / _path_part(self.app_id) / _path_part(self.approvals_topic)

    @property
    def bootstrap_servers(self) -> str:
        """The broker list as aiokafka wants it: `host:port,host:port`."""
        return ",".join(url.split("://", 1)[-1] for url in self.broker.split(";"))

    @classmethod
    def for_app(cls, app_id: str, **changes: Any) -> Settings:
        """Settings whose topic names all derive from app_id: isolated runs, tests, benchmarks."""
        topics = {f"{role}_topic": f"{app_id}-{role}" for role in _TOPIC_ROLES}
        return cls.model_validate({**cls().model_dump(), "app_id": app_id, **topics, **changes})

    def to_env(self, *, secrets: bool = True) -> dict[str, str]:
        """These settings as STREAM_ADAPTER_* variables, for a child process to read back.

        Secrets are revealed here (a child needs them): never log what this returns. Unset
        optional fields (None) are left out: the variable's absence is their value. Without
        `secrets`, the SECRET_FIELDS are left out too.
        """
        env = {
            f"{ENV_PREFIX}{name.upper()}": str(value)
            for name, value in self.model_dump(mode="json").items()
            if value is not None  # unset optional settings stay unset in the child
        } | {
            f"{ENV_PREFIX}{name.upper()}": value.get_secret_value()
            for name, value in self
            if isinstance(value, SecretStr)
        }
        if not secrets:
            for name in SECRET_FIELDS:
                env.pop(f"{ENV_PREFIX}{name.upper()}", None)
        return env

    def export(self) -> None:
        """Make these settings what a later `Settings()` in this process reads (a topology
        module reads its own so): the others through os.environ, the secrets in memory only,
        so the processes tools start (which inherit os.environ) never get them."""
        os.environ.update(self.to_env(secrets=False))
        _IN_PROCESS.clear()
        for name in SECRET_FIELDS:
            value = getattr(self, name)
            secret = value.get_secret_value() if isinstance(value, SecretStr) else value
            _IN_PROCESS[name] = (secret, os.environ.get(f"{ENV_PREFIX}{name.upper()}"))

    def with_changes(self, **changes: Any) -> Settings:
        """A copy with some fields replaced (CLI options over the environment), validated again."""
        return type(self).model_validate({**self.model_dump(), **changes})


def parse_tool_roles(spec: str) -> dict[str, frozenset[str]]:
    """`tool=role[,tool=role]` by tool (a tool listed twice takes either role); ValueError
    when malformed."""
    roles: dict[str, set[str]] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        tool, sep, role = (text.strip() for text in item.partition("="))
        if not sep or not tool or not role:
            raise ValueError("review_tool_roles looks like tool=role[,tool=role]")
        roles.setdefault(tool, set()).add(role)
    return {tool: frozenset(names) for tool, names in roles.items()}


class _ExportedSecrets(PydanticBaseSettingsSource):
    """The secrets `Settings.export` kept for this process (below arguments, above the
    environment)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {
            name: secret
            for name, (secret, env) in _IN_PROCESS.items()
            if os.environ.get(f"{ENV_PREFIX}{name.upper()}") == env  # unchanged since export
        }


def _loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.strip().lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _path_part(name: str) -> str:
    """name as one folder name: other characters than letters, digits, `.`, `_` and `-` are
    %-escaped, so two names never map to one folder."""
    text = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else f"%{ord(ch):02x}"
                   for ch in name)  # fmt: skip
    return text if text not in ("", ".", "..") else f"%{text}"
