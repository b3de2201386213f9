"""A real single-node Apache Kafka (KRaft) run from Maven Central jars, for development and tests.

The broker runs as a detached `java` process; its state lives under one home folder:
`libs/<version>/` (the jars, shared between homes through `jars_dir`), `data/` (formatted once,
kept between stops so topics and committed offsets survive), `logs/server.log`, `broker.pid`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from stream_adapter.core.errors import BrokerError

KAFKA_VERSION = "4.4.0"
DEFAULT_HOME = Path(".kafka")
_POLL_S = 0.2
PORT_RANGE_ENV = "STREAM_ADAPTER_FREE_PORTS"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Where and how the local broker runs."""

    home: Path = DEFAULT_HOME
    port: int = 9092
    controller_port: int | None = None
    heap_mb: int = 768
    jvm_flags: tuple[str, ...] = ()
    """Added to the JVM's command line (the bench's broker compiles with C1 only)."""
    jars_dir: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)
    format_args: tuple[str, ...] = ()
    """Added to the storage format command (e.g. `--add-scram` users)."""
    probe_options: dict[str, Any] = field(default_factory=dict)
    """aiokafka options of the readiness probe (how a client authenticates, if it must)."""
    slot_listeners: tuple[tuple[int, int], ...] = ()
    """Extra plaintext listeners, one per (port, advertised port): `S0`, `S1`, ... A client
    that bootstraps at the advertised port (a proxy in front of the listener's port) is told
    to reach the broker there again, so all its traffic crosses that proxy (the chaos run's
    network partitions). None by default: `kafka start` has one listener."""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def ctrl_port(self) -> int:
        return self.controller_port or self.port + 1

    @property
    def libs(self) -> Path:
        return (self.jars_dir or self.home / "libs") / KAFKA_VERSION

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def pidfile(self) -> Path:
        return self.home / "broker.pid"


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """What `kafka status` reports."""

    running: bool
    pid: int | None
    bootstrap: str
    answers: bool


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses right now, below the ephemeral range.

    A port the kernel hands out for bind(0) can be handed out again moments later as the
    source port of some client's connection, and a broker can then not bind it (CI saw it).
    Processes that pick ports side by side can each be given a range of their own in
    `STREAM_ADAPTER_FREE_PORTS` ("LOW-HIGH", HIGH excluded), so that none picks another's.
    """
    candidates = list(_port_range())
    random.shuffle(candidates)
    for port in candidates[:200]:
        if port not in _handed_out and not _port_taken(port):
            _handed_out.add(port)
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_handed_out: set[int] = set()  # two calls in a row must not pick the same port


def _port_range() -> range:
    spec = os.environ.get(PORT_RANGE_ENV, "")
    if spec:
        low, _, high = spec.partition("-")
        return range(int(low), int(high))
    low_ephemeral = _ephemeral_low()
    return range(max(1024, low_ephemeral - 12_000), low_ephemeral)


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def ensure_jars(config: BrokerConfig) -> Path:
    """Fetch the broker's jars into `config.libs` with Maven on first use; return the folder.

    Commands started side by side share the folder: one fetches while the others wait on a
    lock file beside it, then find the jars there."""
    libs = config.libs
    marker = jars_marker()
    if _fetched(libs, marker):
        return libs
    libs.mkdir(parents=True, exist_ok=True)
    with (libs.parent / f".{libs.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not _fetched(libs, marker):
            _fetch(libs)
            (libs / ".complete").write_text(marker)
    return libs


def _pom() -> Any:
    return resources.files("stream_adapter_dev.broker") / "pom.xml"


def jars_marker() -> str:
    """What a finished fetch writes to `libs/.complete`: the Kafka version and the pom it was
    fetched for, so a pom that gained a jar fetches again."""
    return f"{KAFKA_VERSION} {hashlib.sha256(_pom().read_bytes()).hexdigest()[:16]}"


def _fetched(libs: Path, marker: str) -> bool:
    done = libs / ".complete"
    return done.exists() and done.read_text() == marker


def _fetch(libs: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) is not on PATH: it fetches the Kafka jars on first use")
    with resources.as_file(_pom()) as pom_path:
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom_path),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={libs.resolve()}",
            "-DincludeScope=runtime",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr)[-3000:]
        raise BrokerError(f"mvn could not fetch the Kafka {KAFKA_VERSION} jars:\n{tail}")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise BrokerError("Java 17+ is not on PATH (nor in JAVA_HOME): Kafka needs it")
    return java


def _slot_listeners(config: BrokerConfig) -> tuple[str, str, str]:
    """The slot listeners' entries of listeners, advertised.listeners and the protocol map
    (each starting with a comma; empty without slots)."""
    slots = list(enumerate(config.slot_listeners))
    listeners = "".join(f",S{i}://127.0.0.1:{port}" for i, (port, _) in slots)
    advertised = "".join(f",S{i}://127.0.0.1:{adv}" for i, (_, adv) in slots)
    protocols = "".join(f",S{i}:PLAINTEXT" for i, _ in slots)
    return listeners, advertised, protocols


def _properties(config: BrokerConfig) -> str:
    listeners, advertised, protocols = _slot_listeners(config)
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{config.ctrl_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{config.port},CONTROLLER://127.0.0.1:{config.ctrl_port}"
        + listeners,
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{config.port}" + advertised,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT" + protocols,
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(config.data.resolve()),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "8",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "8",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        # Compaction runs soon enough that tests and demos can see it.
        "log.cleaner.backoff.ms": "1000",
    }
    props.update(config.extra)
    return "".join(f"{key}={value}\n" for key, value in props.items())


def _read_pid(config: BrokerConfig) -> int | None:
    try:
        pid = int(config.pidfile.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child (exited, not yet reaped) still answers kill(0).
    with contextlib.suppress(FileNotFoundError, OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def log_tail(config: BrokerConfig, lines: int = 40) -> str:
    """The last lines of the broker's log and console output, for error messages."""
    out = []
    for name in ("console.log", "server.log"):
        path = config.logs / name
        if path.exists():
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path} ---\n" + "\n".join(text))
    return "\n".join(out) or "(no log written)"


def answers(bootstrap: str, timeout_s: float = 3.0, **options: Any) -> bool:
    """True when the broker at `bootstrap` answers a metadata request (not just a TCP connect).

    `options` are the probe's aiokafka options (SASL, TLS) for a secured listener.
    """
    from aiokafka.admin import AIOKafkaAdminClient

    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a refused connection is the expected answer here

    async def probe() -> bool:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=2000, **options)
        try:
            await asyncio.wait_for(admin.start(), timeout_s)
            await asyncio.wait_for(admin.describe_cluster(), timeout_s)
            return True
        except Exception:
            return False
        finally:
            with contextlib.suppress(Exception):
                await admin.close()

    try:
        return run_blocking(probe)
    finally:
        quiet.setLevel(level)


def run_blocking(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """asyncio.run(work()), on a helper thread when the caller already runs a loop (the broker
    commands are synchronous, and chaos and tests call them from inside one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work())
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work()).result()


def _format(config: BrokerConfig, java: str, classpath: str, props: Path) -> None:
    if (config.data / "meta.properties").exists():
        return
    config.data.mkdir(parents=True, exist_ok=True)
    cmd = [
        java,
        "-cp",
        classpath,
        "kafka.tools.StorageTool",
        "format",
        "--standalone",
        "-t",
        _cluster_id(),
        "-c",
        str(props),
        *config.format_args,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BrokerError(
            f"formatting {config.data} failed:\n{(done.stdout + done.stderr)[-3000:]}"
        )


def _cluster_id() -> str:
    """A random cluster id (URL-safe base64 of a UUID) that does not read as an option."""
    import base64

    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):  # the storage tool took "-t -abc…" for two options
            return cluster_id


def start(config: BrokerConfig, *, timeout_s: float = 90.0) -> str:
    """Start the broker (formatting storage on first start) and wait until it answers.

    Returns the bootstrap address. Idempotent: a broker already running from this home is reused.
    """
    if _read_pid(config) is not None:
        if answers(config.bootstrap, **config.probe_options):
            return config.bootstrap
        raise BrokerError(f"a broker process from {config.home} runs but does not answer")
    java = _java()
    for port in (config.port, config.ctrl_port):
        if _port_taken(port):
            raise BrokerError(f"port {port} on 127.0.0.1 is taken: pick another with --port")
    libs = ensure_jars(config)
    config.logs.mkdir(parents=True, exist_ok=True)
    props = config.home / "server.properties"
    props.write_text(_properties(config))
    classpath = f"{libs.resolve()}/*"
    _format(config, java, classpath, props)
    log4j = resources.files("stream_adapter_dev.broker") / "log4j2.xml"
    cmd = [
        java,
        f"-Xmx{config.heap_mb}m",
        f"-Xms{min(config.heap_mb, 256)}m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        *config.jvm_flags,
        "-Djava.awt.headless=true",
        f"-Dkafka.logs.dir={config.logs.resolve()}",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath,
        "kafka.Kafka",
        str(props.resolve()),
    ]
    with open(config.logs / "console.log", "ab") as console:
        proc = subprocess.Popen(
            cmd,
            stdout=console,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    config.pidfile.write_text(str(proc.pid))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            config.pidfile.unlink(missing_ok=True)
            raise BrokerError(
                f"the broker exited with code {proc.returncode} during start\n{log_tail(config)}"
            )
        if answers(config.bootstrap, timeout_s=2.0, **config.probe_options):
            return config.bootstrap
        time.sleep(_POLL_S)
    stop(config, kill=True)
    raise BrokerError(f"the broker did not answer within {timeout_s:.0f}s\n{log_tail(config)}")


def stop(config: BrokerConfig, *, kill: bool = False, timeout_s: float = 30.0) -> bool:
    """Stop the broker (SIGTERM, or SIGKILL when `kill`); False when none was running."""
    pid = _read_pid(config)
    if pid is None:
        config.pidfile.unlink(missing_ok=True)
        return False
    os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    # A zombie leader can still hold the listening sockets while the JVM's other threads
    # exit, so "stopped" also means both ports are free again.
    while _alive(pid) or _port_taken(config.port) or _port_taken(config.ctrl_port):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            if not _alive(pid):
                break  # the ports belong to someone else now
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout_s
        time.sleep(_POLL_S)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    config.pidfile.unlink(missing_ok=True)
    return True


def status(config: BrokerConfig) -> BrokerStatus:
    """Whether a broker answers metadata requests on the configured port (whoever started it),
    and whether this home's broker process runs."""
    pid = _read_pid(config)
    return BrokerStatus(
        running=pid is not None,
        pid=pid,
        bootstrap=config.bootstrap,
        answers=answers(config.bootstrap, **config.probe_options),
    )
