"""The processes a chaos run controls: a broker it may kill and restart, and worker processes.

Workers are real `stream-adapter worker` processes (their own session, so SIGKILL takes the
whole process group, exactly like `kill -9` by an operator). A worker slot keeps its RocksDB
folder across restarts, as a restarted pod or unit would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from stream_adapter.core.errors import BrokerError
from stream_adapter.settings import ENV_PREFIX, Settings
from stream_adapter_dev.broker import local

READY_LINE = b"Worker ready"
SLOTS = ("w1", "w2")
"""The run's worker slots: the first, and the one scaling up adds."""


def chaos_broker_config(
    home: Path, jars_dir: Path | None, heap_mb: int = 768
) -> local.BrokerConfig:
    """A single-node broker on free ports with one extra listener per worker slot, advertised
    at the port of the slot's proxy (proxy.py), so a network partition can cut one worker off."""
    return local.BrokerConfig(
        home=home,
        port=local.free_port(),
        controller_port=local.free_port(),
        jars_dir=jars_dir,
        heap_mb=heap_mb,
        slot_listeners=tuple((local.free_port(), local.free_port()) for _ in SLOTS),
    )


@dataclass
class BrokerControl:
    """The run's broker; `config` is None for a given bootstrap, which cannot be restarted."""

    bootstrap: str
    config: local.BrokerConfig | None = None

    @classmethod
    async def start_local(
        cls, home: Path, jars_dir: Path | None, heap_mb: int = 768
    ) -> BrokerControl:
        """A fresh single-node broker on free ports under home, with a listener per worker
        slot (`chaos_broker_config`)."""
        config = chaos_broker_config(home, jars_dir, heap_mb)
        bootstrap = await asyncio.to_thread(local.start, config)
        return cls(bootstrap, config)

    @property
    def slot_listeners(self) -> dict[str, tuple[int, int]]:
        """Per worker slot (SLOTS), the (listener port, advertised proxy port) a partition
        fault cuts; empty for a given broker."""
        if self.config is None:
            return {}
        return dict(zip(SLOTS, self.config.slot_listeners, strict=False))

    @property
    def restartable(self) -> bool:
        return self.config is not None

    async def kill(self) -> None:
        """SIGKILL the broker (its data stays, as after a power cut of the process)."""
        if self.config is None:
            raise BrokerError("a broker given by --broker cannot be killed by this run")
        await asyncio.to_thread(local.stop, self.config, kill=True)

    async def start_again(self, timeout_s: float = 300.0) -> None:
        """Start the killed broker on the same ports and data; returns once it answers.

        It may take minutes on a busy machine (the JVM's start and the log recovery after a
        SIGKILL), and a supervisor would keep waiting too.
        """
        if self.config is None:
            raise BrokerError("a broker given by --broker cannot be restarted by this run")
        await asyncio.to_thread(local.start, self.config, timeout_s=timeout_s)

    async def stop(self) -> None:
        if self.config is not None:
            await asyncio.to_thread(local.stop, self.config)


def worker_env(settings: Settings, extra: dict[str, str]) -> dict[str, str]:
    """The environment of a worker process: the settings as STREAM_ADAPTER_* plus extra."""
    env = dict(os.environ)
    for name in Settings.model_fields:  # an unset field must not come from this environment
        env.pop(f"{ENV_PREFIX}{name.upper()}", None)
    env.update(settings.to_env())
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Worker:
    """One worker slot: a process started, killed and started again under one name."""

    name: str
    workdir: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    lives: list[tuple[int, int]] = field(default_factory=list)
    """(process id, offset in the log where its lines start) of each start, in order."""
    _log_start: int = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def start(self) -> None:
        """Start the process (its RocksDB folder is the slot's, kept across restarts)."""
        if self.alive:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**self.env, "STREAM_ADAPTER_DATA_DIR": str(self.workdir / f"{self.name}-data")}
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                # The worker, set to die with this process (chaos/child.py).
                [sys.executable, "-m", "stream_adapter_dev.chaos.child", str(os.getpid())],
                cwd=self.workdir,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.starts += 1
        self.lives.append((self.proc.pid, self._log_start))

    def log_since_start(self) -> bytes:
        if not self.log_path.exists():
            return b""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            return log.read()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_since_start()[-chars:].decode(errors="replace")

    async def ready(self, timeout_s: float = 90.0) -> None:
        """Wait until this start has joined the group and recovered its tables."""
        deadline = time.monotonic() + timeout_s
        while READY_LINE not in self.log_since_start():
            if not self.alive:
                raise BrokerError(f"worker {self.name} exited during start:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise BrokerError(f"worker {self.name} not ready after {timeout_s:.0f}s")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the whole process group: the crash the guarantees are about."""
        if self.proc is not None and self.proc.poll() is None:
            # A stop's waiting thread may reap it meanwhile (poll answers None while it waits).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    async def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait for the clean exit (SIGKILL past timeout_s); the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.proc.returncode)


@dataclass
class WorkerPool:
    """The run's worker slots. Slots the run did not stop but that exited are unplanned exits."""

    settings: Settings
    workdir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: dict[str, Worker] = field(default_factory=dict)
    unplanned_exits: list[str] = field(default_factory=list)
    slot_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per slot name, environment of its own (its bootstrap, behind its proxy)."""
    ready_timeout_s: float = 300.0
    """How long a (re)started slot may take to be ready: an exactly-once takeover on a busy
    machine waits for the dead owner's transactions to be aborted, and a supervisor would
    not give up either."""
    _wanted: set[str] = field(default_factory=set)

    def slot(self, name: str) -> Worker:
        if name not in self.workers:
            env = worker_env(self.settings, self.extra_env) | self.slot_env.get(name, {})
            if "STREAM_ADAPTER_WEB_PORT" not in self.extra_env:
                # Its own metrics port: slots sharing the settings' one could not all bind it.
                env["STREAM_ADAPTER_WEB_PORT"] = str(local.free_port())
            self.workers[name] = Worker(name, self.workdir, env)
        return self.workers[name]

    async def start(self, name: str) -> Worker:
        """Start slot name and wait until it is ready."""
        worker = self.slot(name)
        self._wanted.add(name)
        worker.start()
        await worker.ready(self.ready_timeout_s)
        return worker

    def live(self) -> list[Worker]:
        return [w for name, w in sorted(self.workers.items()) if name in self._wanted and w.alive]

    def kill(self, worker: Worker) -> None:
        """SIGKILL worker; the run starts it again itself, so this is not an unplanned exit."""
        self._wanted.discard(worker.name)
        worker.kill()

    async def stop(self, worker: Worker) -> int:
        """Scale down: SIGTERM, so in-flight calls finish and offsets are committed."""
        self._wanted.discard(worker.name)
        return await worker.terminate()

    async def supervise(self) -> list[str]:
        """Restart wanted workers that exited on their own (what a supervisor would do)."""
        restarted = []
        for name in sorted(self._wanted):
            worker = self.workers[name]
            if not worker.alive:
                self.unplanned_exits.append(name)
                restarted.append(name)
                await self.start(name)
        return restarted

    async def stop_all(self) -> None:
        """SIGTERM every slot and wait for its clean exit; any still running afterwards, or
        when this stop is cancelled or fails, is SIGKILLed, so a run never leaves workers."""
        try:
            for worker in list(self.workers.values()):
                self._wanted.discard(worker.name)
                await worker.terminate(timeout_s=30)
        finally:
            self.kill_all()

    def kill_all(self) -> None:
        """SIGKILL every slot still running (no await: safe in any `finally`)."""
        self._wanted.clear()
        for worker in self.workers.values():
            worker.kill()
