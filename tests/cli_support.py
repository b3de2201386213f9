"""Running `stream-adapter` as a user does: the real command in a subprocess, or in a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stream_adapter.settings import ENV_PREFIX
from tests.harness import ROOT


@dataclass
class Ran:
    """A finished command: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.out.splitlines() if line.startswith("{")]

    def tsv(self) -> list[dict[str, str]]:
        """stdout as rows of its tab-separated table (the first line names the columns)."""
        header, *lines = self.out.splitlines()
        keys = header.split("\t")
        return [dict(zip(keys, line.split("\t"), strict=True)) for line in lines]


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without any setting (so only the test's own apply), plus extra."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(ENV_PREFIX) and k != "KAFKA_BOOTSTRAP_SERVERS"
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def run(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    stdin: str | None = None,
    timeout_s: float = 120.0,
) -> Ran:
    """`stream-adapter ARGS` (as `python -m stream_adapter`), stdout not a terminal."""
    done = subprocess.run(
        [sys.executable, "-m", "stream_adapter", *args],
        env=env if env is not None else clean_env(),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def run_in_terminal(*args: str, env: dict[str, str], columns: int, timeout_s: float = 60.0) -> str:
    """`stream-adapter ARGS` with stdout and stderr on a pseudo-terminal this wide; its output."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stream_adapter", *args],
        env={**env, "COLUMNS": str(columns), "TERM": "xterm"},
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command exited and closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    proc.wait(timeout_s)
    return b"".join(chunks).decode(errors="replace")
