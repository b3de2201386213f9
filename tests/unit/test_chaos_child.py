"""A chaos worker dies with the run that started it, even when the run is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

PARENT = """
import subprocess, sys, time
child = subprocess.Popen(
    [sys.executable, "-c", "import os, time; from stream_adapter_dev.chaos.child import "
     "die_with_parent; die_with_parent(os.getppid()); print('armed', flush=True); time.sleep(600)"],
    start_new_session=True, stdout=subprocess.PIPE,
)
assert child.stdout.readline().strip() == b"armed"
print(child.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie left to init is gone as a worker
        return stat.read().rpartition(")")[2].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_in_its_own_session_dies_when_its_run_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)  # armed, and sleeping in a session of its own
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(10)
        if child and _alive(child):  # the mechanism failed: leave no sleeper behind
            os.kill(child, signal.SIGKILL)


def test_a_worker_whose_run_is_gone_already_exits_at_once() -> None:
    code = "from stream_adapter_dev.chaos.child import die_with_parent; die_with_parent(1)"
    done = subprocess.run([sys.executable, "-c", code], timeout=30)
    assert done.returncode == 1
