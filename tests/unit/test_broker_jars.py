"""Fetching the broker's jars: commands started side by side share one jars folder."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from stream_adapter.core.errors import BrokerError
from stream_adapter_dev.broker import local


def _blocked_on(path: Path) -> bool:
    """Whether some flock on path's inode is waiting (Linux lists waiters with `->`)."""
    inode = f":{os.stat(path).st_ino} "
    lines = Path("/proc/locks").read_text().splitlines()
    return any("->" in line and inode in line for line in lines)


def test_a_second_fetch_waits_for_the_first_and_then_finds_the_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "")  # a fetch of its own would fail: Maven is not on PATH
    config = local.BrokerConfig(home=tmp_path / "home", jars_dir=tmp_path / "libs")
    with pytest.raises(BrokerError, match="not on PATH"):
        local.ensure_jars(config)
    lock_path = config.libs.parent / f".{config.libs.name}.lock"
    outcome: list[object] = []

    def second() -> None:
        try:
            outcome.append(local.ensure_jars(config))
        except BrokerError as exc:
            outcome.append(exc)

    with lock_path.open("w") as first:  # the first command, fetching
        fcntl.flock(first, fcntl.LOCK_EX)
        waiter = threading.Thread(target=second)
        waiter.start()
        deadline = time.monotonic() + 10
        while not _blocked_on(lock_path):
            assert time.monotonic() < deadline, "the second fetch never waited on the lock"
            time.sleep(0.01)
        assert outcome == []
        (config.libs / ".complete").write_text(local.jars_marker())  # the first is done
    waiter.join(10)
    assert outcome == [config.libs]
