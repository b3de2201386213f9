"""The one frozen configuration: `STREAM_ADAPTER_*` environment variables, or CLI options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "STREAM_ADAPTER_"
_TOPIC_ROLES = ("calls", "replies", "decisions", "approvals", "dlq")


class Settings(BaseSettings):
    """Everything a worker, the CLI and the review service are configured by (SPEC §12)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    broker: str = "kafka://127.0.0.1:9092"
    app_id: str = "stream-adapter"
    source: str = "kafka"
    topology: str = "topologies.demo"
    calls_topic: str = "tool-calls"
    replies_topic: str = "tool-replies"
    decisions_topic: str = "approval-decisions"
    approvals_topic: str = "tool-approvals"
    dlq_topic: str = "tool-calls-dlq"
    partitions: int = Field(default=8, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    max_in_flight: int = Field(default=64, ge=1)
    processing_guarantee: Literal["at_least_once", "exactly_once"] = "at_least_once"
    data_dir: Path = Path(".data")
    decision_keys: str = ""
    retry_attempts: int = Field(default=3, ge=1)
    retry_backoff_s: float = Field(default=0.2, ge=0)
    session_timeout_s: float = Field(default=10.0, gt=0)
    web_port: int = Field(default=6066, ge=0, le=65535)
    web_host: str = "0.0.0.0"
    otel_enabled: bool = False
    review_host: str = "127.0.0.1"
    review_port: int = Field(default=8080, ge=0, le=65535)
    reviewers_file: Path = Path("reviewers.json")
    session_secret: str = ""
    session_ttl_s: int = Field(default=8 * 3600, ge=60)
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    log_format: Literal["text", "json"] = "text"

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

    @property
    def bootstrap_servers(self) -> str:
        """The broker list as aiokafka wants it: `host:port,host:port`."""
        return ",".join(url.split("://", 1)[-1] for url in self.broker.split(";"))

    @classmethod
    def for_app(cls, app_id: str, **changes: Any) -> Settings:
        """Settings whose topic names all derive from app_id: isolated runs, tests, benchmarks."""
        topics = {f"{role}_topic": f"{app_id}-{role}" for role in _TOPIC_ROLES}
        return cls.model_validate({**cls().model_dump(), "app_id": app_id, **topics, **changes})

    def to_env(self) -> dict[str, str]:
        """These settings as STREAM_ADAPTER_* variables, for a child process to read back."""
        return {
            f"{ENV_PREFIX}{name.upper()}": str(value)
            for name, value in self.model_dump(mode="json").items()
        }

    def with_changes(self, **changes: Any) -> Settings:
        """A copy with some fields replaced (CLI options over the environment), validated again."""
        return type(self).model_validate({**self.model_dump(), **changes})
