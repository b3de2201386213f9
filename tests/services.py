"""Session fixtures: a redis-server, a PostgreSQL cluster and a DynamoDB emulator on free ports.

Redis and PostgreSQL come from Debian's packages (`scripts/services.sh install`); the DynamoDB
emulator is moto's standalone server (the `moto[server]` test dependency). Without the binaries
the tests that need them skip with the reason, except under CI=true, where they fail instead.
PostgreSQL refuses to run as root, so as root its cluster runs as the `postgres` user.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stream_adapter_dev.broker.local import free_port

START_TIMEOUT_S = 30.0


def _free_port() -> int:
    return free_port()


def _missing(what: str) -> None:
    reason = f"{what} not installed (run: bash scripts/services.sh install)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    """Poll ready() until it holds, the process dies, or START_TIMEOUT_S passes."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start within {START_TIMEOUT_S} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """A throwaway redis-server (no persistence); yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        _missing("redis-server")
    assert binary is not None
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="sa-redis-")
    proc = subprocess.Popen(
        [
            *(binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir),
            *("--save", "", "--appendonly", "no", "--maxclients", "2000"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until(lambda: _answers_ping(port), proc, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A throwaway PostgreSQL cluster (trust auth, fsync off); yields a DSN without a db name."""
    bindir = _pg_bin()
    if bindir is None:
        _missing("PostgreSQL")
    assert bindir is not None
    root = Path(tempfile.mkdtemp(prefix="sa-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    subprocess.run(
        _as_postgres(
            [
                *(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"),
                *("--no-sync", "-E", "UTF8"),
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=root,
    )
    port = free_port()
    proc = subprocess.Popen(
        _as_postgres(
            [
                *(str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(root)),
                *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
                *("-c", "synchronous_commit=off", "-c", "full_page_writes=off"),
                *("-c", "max_connections=400"),
            ]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=root,
    )
    try:
        _wait_until(lambda: _accepts(port) and _pg_ready(bindir, port), proc, "postgres")
        yield f"postgresql+asyncpg://postgres@127.0.0.1:{port}"
    finally:
        _stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def _pg_ready(bindir: Path, port: int) -> bool:
    result = subprocess.run(
        [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-q"], check=False
    )
    return result.returncode == 0


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh database in the session's cluster, unique to this test."""
    import asyncpg

    name = "t_" + uuid.uuid4().hex[:16]
    dsn = postgres_server.replace("postgresql+asyncpg", "postgresql")

    async def create() -> None:
        conn = await asyncpg.connect(dsn + "/postgres")
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    return f"{postgres_server}/{name}"


@pytest.fixture
def redis_namespace() -> str:
    """A key namespace unique to this test."""
    return "t-" + uuid.uuid4().hex[:16]


DYNAMODB_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
}
"""What the emulator is given: it accepts any credentials; these never reach a real account."""


_MOTO_ONE_AT_A_TIME = """
import sys
from moto.server import DomainDispatcherApplication, create_backend_app
from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug.serving import run_simple
run_simple("127.0.0.1", int(sys.argv[1]), DomainDispatcherApplication(create_backend_app),
           threaded=False, request_handler=MotoRequestHandler)
"""
"""moto's server, answering one request at a time. Under its threaded default, racing
conditional writes to one item were seen to succeed together on a busy machine, which DynamoDB
itself never lets happen; one at a time, each condition is checked against the last write."""


@pytest.fixture(scope="session")
def dynamodb_server() -> Iterator[str]:
    """moto's standalone server (a DynamoDB emulator, not DynamoDB); yields its endpoint URL.

    Sets fake AWS credentials in this process's environment (child processes inherit them).
    """
    if shutil.which("moto_server", path=os.path.dirname(sys.executable)) is None:
        _missing("moto_server (pip install 'moto[server]')")
    saved = {name: os.environ.get(name) for name in DYNAMODB_CREDENTIALS}
    os.environ.update(DYNAMODB_CREDENTIALS)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _MOTO_ONE_AT_A_TIME, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until(lambda: _accepts(port), proc, "moto_server")
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def sqs_server(dynamodb_server: str) -> str:
    """An SQS emulator's endpoint URL (not SQS): moto's standalone server serves every AWS API
    it emulates, so it is the DynamoDB emulator's server."""
    return dynamodb_server
