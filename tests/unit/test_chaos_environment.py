"""A chaos or bench run's settings: an app id of its own, every topic named after it, the
run's changes over the defaults, and decisions that must be signed."""

from __future__ import annotations

from pathlib import Path

from stream_adapter_dev.chaos.environment import run_settings


def test_each_run_has_its_own_app_id_and_topics(tmp_path: Path) -> None:
    one = run_settings("127.0.0.1:1", tmp_path, "chaos", partitions=3, log_level="debug")
    two = run_settings("127.0.0.1:1", tmp_path, "chaos")
    assert one.app_id != two.app_id and one.app_id.startswith("chaos-")
    roles = ("calls", "replies", "decisions", "approvals", "dlq")
    topics = tuple(getattr(one, f"{role}_topic") for role in roles)
    assert topics == tuple(f"{one.app_id}-{role}" for role in roles)
    assert one.bootstrap_servers == "127.0.0.1:1" and one.data_dir == tmp_path / "data"
    assert one.partitions == 3 and one.log_level == "debug" and two.log_level == "info"
    assert one.decision_keys is not None and one.web_port != two.web_port
