"""Topic specs follow the replication settings; drift and under-replication are reported."""

from __future__ import annotations

import pytest

from stream_adapter.settings import Settings
from stream_adapter.stream.topics import TopicSpec, TopicState, topic_specs


@pytest.mark.parametrize(
    ("replication", "min_insync", "expected"),
    [(1, None, None), (2, None, None), (3, None, "2"), (5, None, "2"), (3, 3, "3"), (2, 1, "1")],
)
def test_min_insync_follows_the_replication_factor(
    replication: int, min_insync: int | None, expected: str | None
) -> None:
    settings = Settings.for_app(
        "specs", replication_factor=replication, min_insync_replicas=min_insync
    )
    specs = topic_specs(settings)
    assert len(specs) == 6
    for spec in specs:
        assert spec.replication_factor == replication
        assert spec.config.get("min.insync.replicas") == expected
    approvals = next(s for s in specs if s.name == settings.approvals_topic)
    assert approvals.config["cleanup.policy"] == "compact"


def test_min_insync_above_replication_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds replication_factor"):
        Settings.for_app("specs", replication_factor=2, min_insync_replicas=3)


def _state(**changes: object) -> TopicState:
    spec = TopicSpec("calls", 8, 3, {"min.insync.replicas": "2"})
    base: dict[str, object] = {
        "spec": spec,
        "exists": True,
        "partitions": 8,
        "config": {"min.insync.replicas": "2"},
        "replication_factor": 3,
    }
    return TopicState(**{**base, **changes})  # type: ignore[arg-type]


def test_replication_drift_and_under_replication_are_problems() -> None:
    assert _state().problems == []
    assert _state(replication_factor=1).drift == ["replication factor 1, needs 3"]
    assert _state(config={"min.insync.replicas": "1"}).drift == ["min.insync.replicas=1, needs 2"]
    short = _state(under_replicated=(0, 5))
    assert short.drift == []  # not a setting: a broker is down or catching up
    assert short.problems == ["under-replicated partitions: 0, 5"]


def test_settings_round_trip_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child process (worker, CLI) reads back what the parent's settings were, unset
    optional fields included."""
    for settings in (
        Settings.for_app("env", replication_factor=3),
        Settings.for_app("env", replication_factor=3, min_insync_replicas=3),
    ):
        with monkeypatch.context() as env:
            for name, value in settings.to_env().items():
                env.setenv(name, value)
            assert Settings() == settings
