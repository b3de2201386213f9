"""Broker connectivity as a state of its own: one line when it goes, one when it is back.

While a broker is down, the Kafka clients log every failed connect, metadata refresh, fetch
and coordinator request, some 70 lines a second. `BrokerWatch` turns that into states:

- `ClientNoise`, a `logging.Filter` on the clients' loggers, notices those lines (by their
  message template) and, once the first has passed, holds the rest back; they are counted and
  summarised ("suppressed 4,200 Kafka client lines like …") every ``summary_every_s`` and when
  the noise ends. A logger enabled for DEBUG gets every line, as before.
- A probe (a fresh connection to a bootstrap server and one metadata request, with the clients' own
  security settings) tells an outage from a blip: every ``check_every_s``, and every
  ``retry_every_s`` while the clients complain or the broker is unreachable. A failed probe
  makes the broker unreachable (one WARNING line with the bootstrap servers and the error
  kind); a probe that succeeds after the clients have been quiet for ``settle_s`` makes it
  reachable again (one INFO line with the outage's length).

`status()` is read by the worker's metrics and `/health`. One watch per process: the filter
is process-wide, on the clients' loggers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stream_adapter.core import logs

if TYPE_CHECKING:
    from stream_adapter.settings import Settings

__all__ = [
    "BrokerChange",
    "BrokerStatus",
    "BrokerWatch",
    "ClientNoise",
    "NoiseSummary",
    "describe",
    "log_change",
    "log_summary",
    "probe",
    "watching",
]

CLIENT_LOGGERS = ("aiokafka", "kafka")
"""Logger name prefixes of the Kafka clients whose reconnect noise is collapsed."""

NOISE = (
    "Unable connect to",
    "Unable to request metadata",
    "Unable to update metadata",
    "Error sending",
    "Marking the coordinator dead",
    "Group Coordinator Request failed",
    "Heartbeat session expired",
    "Heartbeat send request failed",
    "Heartbeat failed",
    "Failed fetch messages",
    "Failed fetch offsets",
    "FindCoordinator Request failed",
    "Cannot send",
    "Could not send",
    "Got error produce response",
    "OffsetCommit failed",
    "Auto offset commit failed",
    "Discovered coordinator",
)
"""How the clients' lines about unreachable brokers begin (their message templates). Those at
WARNING and above begin an episode; those at INFO (a coordinator found again, a commit to
retry) are held back only within one, as the clients find their way back."""

CHECK_EVERY_S = 15.0
RETRY_EVERY_S = 2.0
SETTLE_S = 3.0
QUIET_S = 10.0
SUMMARY_EVERY_S = 60.0
PROBE_TIMEOUT_S = 5.0
TICK_S = 0.5


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    """The broker as this process sees it now.

    since: when the current outage began (seconds since the epoch; None while reachable);
    outage_s: its length so far (0 while reachable); outages: how many began since start;
    suppressed: Kafka client lines held back since start.
    """

    servers: str
    reachable: bool = True
    since: float | None = None
    outage_s: float = 0.0
    outages: int = 0
    suppressed: int = 0
    error_kind: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerChange:
    """The broker became unreachable (error_kind says why) or reachable again (after
    outage_s seconds)."""

    servers: str
    reachable: bool
    outage_s: float = 0.0
    error_kind: str | None = None


@dataclass(frozen=True, slots=True)
class NoiseSummary:
    """Client lines held back since the last summary: how many, over how long, and the text
    of the commonest kind."""

    count: int
    over_s: float
    like: str


def describe(change: BrokerChange) -> str:
    """The state line as a sentence (for commands that print rather than log)."""
    if change.reachable:
        return f"broker reachable again after {round(change.outage_s)} s"
    return f"broker unreachable ({change.servers}: {change.error_kind}), retrying"


def log_change(change: BrokerChange) -> None:
    """The state line: WARNING when the broker becomes unreachable, INFO when it is back."""
    if change.reachable:
        seconds = round(change.outage_s)
        logs.event(
            logs.INFO,
            f"broker reachable again after {seconds} s",
            servers=change.servers,
            state="reachable",
            outage_s=seconds,
        )
    else:
        logs.event(
            logs.WARNING,
            "broker unreachable, retrying",
            servers=change.servers,
            state="unreachable",
            error_kind=change.error_kind,
        )


def log_summary(summary: NoiseSummary) -> None:
    """The summary line of client lines held back (INFO)."""
    logs.event(
        logs.INFO,
        f"suppressed {summary.count:,} Kafka client lines in {round(summary.over_s)} s "
        f"like: {summary.like}",
        suppressed=summary.count,
    )


class ClientNoise(logging.Filter):
    """Notices the clients' connectivity lines; passes the first of each episode and holds
    back the rest (all pass on a logger enabled for DEBUG)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self.first: float | None = None
        """When the current episode's first line came (None: no episode)."""
        self.last: float | None = None
        """When the latest line came."""
        self.suppressed = 0
        self._pending: Counter[object] = Counter()
        self._samples: dict[object, str] = {}
        self._pending_since: float | None = None
        self._loggers: list[logging.Logger] = []

    @staticmethod
    def is_noise(record: logging.LogRecord) -> bool:
        return (
            record.levelno >= logging.INFO
            and record.name.startswith(CLIENT_LOGGERS)
            and isinstance(record.msg, str)
            and record.msg.startswith(NOISE)
        )

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.is_noise(record):
            return True
        if self.first is None and record.levelno < logging.WARNING:
            return True  # outside an episode, the clients' INFO lines are theirs to say
        now = self._clock()
        self.last = now
        if self.first is None:
            self.first = now
            return True  # the episode's first line tells what the clients met
        if logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return True
        self.suppressed += 1
        key = record.msg
        self._pending[key] += 1
        if key not in self._samples:
            self._samples[key] = logs.escape(record.getMessage())
        if self._pending_since is None:
            self._pending_since = now
        return False

    @property
    def open(self) -> bool:
        """True from an episode's first line until `close`."""
        return self.first is not None

    @property
    def pending(self) -> int:
        return sum(self._pending.values())

    def summary(self) -> NoiseSummary | None:
        """What was held back since the last summary (None: nothing), and start anew."""
        if not self._pending:
            return None
        key, _ = self._pending.most_common(1)[0]
        since = self._pending_since if self._pending_since is not None else self._clock()
        out = NoiseSummary(self.pending, self._clock() - since, self._samples[key])
        self._pending.clear()
        self._pending_since = None
        return out

    def close(self) -> None:
        """End the episode: the next connectivity line passes again."""
        self.first = None
        self._samples.clear()

    def install(self) -> None:
        """Filter the clients' loggers: those imported by now, and their known names."""
        names = {
            name
            for name in logging.Logger.manager.loggerDict
            if name.split(".")[0] in CLIENT_LOGGERS
        }
        names.update(CLIENT_LOGGERS)
        for name in sorted(names):
            logger = logging.getLogger(name)
            logger.addFilter(self)
            self._loggers.append(logger)

    def remove(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers.clear()


class BrokerWatch:
    """Keeps the broker's reachability for one process: state lines, status, quiet clients."""

    def __init__(
        self,
        servers: str,
        probe: Callable[[], Awaitable[None]],
        *,
        report: Callable[[BrokerChange], None] = log_change,
        summarise: Callable[[NoiseSummary], None] = log_summary,
        check_every_s: float = CHECK_EVERY_S,
        retry_every_s: float = RETRY_EVERY_S,
        settle_s: float = SETTLE_S,
        quiet_s: float = QUIET_S,
        summary_every_s: float = SUMMARY_EVERY_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.servers = servers
        self._probe = probe
        self._report = report
        self._summarise = summarise
        self.check_every_s = check_every_s
        self.retry_every_s = retry_every_s
        self.settle_s = settle_s
        self.quiet_s = quiet_s
        self.summary_every_s = summary_every_s
        self.probe_timeout_s = probe_timeout_s
        self._clock = clock
        self._wall = wall
        self.noise = ClientNoise(clock)
        self.reachable = True
        self._down_since: float | None = None
        self._error_kind: str | None = None
        self._outages = 0
        self._probed_at: float | None = None
        self._summary_at = clock()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @classmethod
    def for_settings(cls, settings: Settings, **options: Any) -> BrokerWatch:
        """A watch of the settings' bootstrap servers, probed as the clients connect."""

        async def check() -> None:
            await probe(settings)

        return cls(settings.bootstrap_servers, check, **options)

    def status(self) -> BrokerStatus:
        now = self._clock()
        since = self._down_since
        return BrokerStatus(
            servers=self.servers,
            reachable=self.reachable,
            since=None if since is None else self._wall() - (now - since),
            outage_s=0.0 if since is None else now - since,
            outages=self._outages,
            suppressed=self.noise.suppressed,
            error_kind=self._error_kind,
        )

    async def start(self) -> None:
        """Filter the clients' loggers and check the broker until `stop`."""
        self.noise.install()
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            # The flag as well as the cancel: a cancel that lands as a probe ends can be lost
            # in the probe's timeout (Python 3.11), and the loop would run on, its stop with it.
            self._stopping = True
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.noise.remove()
        summary = self.noise.summary()
        if summary is not None:
            self._summarise(summary)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the watch end the process
                logs.event(logs.DEBUG, "broker watch check failed", error_kind=type(exc).__name__)
            await asyncio.sleep(TICK_S)

    async def check(self) -> None:
        """One round: probe when due, change state, summarise and end a quiet episode."""
        now = self._clock()
        troubled = not self.reachable or self.noise.open
        every = self.retry_every_s if troubled else self.check_every_s
        if self._probed_at is None or now - self._probed_at >= every:
            error = await self._probe_once()
            self._probed_at = now = self._clock()
            if error is not None:
                self._went_down(error, now)
            elif not self.reachable and self._quiet_for(now) >= self.settle_s:
                self._came_back(now)
        if self.noise.pending and now - self._summary_at >= self.summary_every_s:
            self._summary(now)
        if self.noise.open and self.reachable and self._quiet_for(now) >= self.quiet_s:
            self._summary(now)
            self.noise.close()

    async def _probe_once(self) -> str | None:
        """None when the broker answered, else the error's kind."""
        try:
            async with asyncio.timeout(self.probe_timeout_s):
                await self._probe()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _kind(exc)
        return None

    def _quiet_for(self, now: float) -> float:
        last = self.noise.last
        return float("inf") if last is None else now - last

    def _went_down(self, error_kind: str, now: float) -> None:
        self._error_kind = error_kind
        if not self.reachable:
            return
        self.reachable = False
        self._outages += 1
        first = self.noise.first
        self._down_since = first if first is not None and first <= now else now
        self._report(BrokerChange(self.servers, False, error_kind=error_kind))

    def _came_back(self, now: float) -> None:
        since = self._down_since if self._down_since is not None else now
        self.reachable = True
        self._down_since = None
        self._error_kind = None
        self._summary(now)
        self._report(BrokerChange(self.servers, True, outage_s=now - since))

    def _summary(self, now: float) -> None:
        self._summary_at = now
        summary = self.noise.summary()
        if summary is not None:
            self._summarise(summary)


def _kind(exc: BaseException) -> str:
    """The error's kind: the OS or TLS error beneath a client's wrapper, when there is one."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OSError) and not isinstance(exc, OSError):
        return type(cause).__name__
    return type(exc).__name__


async def probe(settings: Settings) -> None:
    """Connect to a bootstrap server as the clients do (TLS, SASL) and ask it for the
    cluster's brokers (no topics); raises the last server's error when none answers."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    from stream_adapter.kafka.clients import client_options

    options = client_options(settings)
    options.pop("bootstrap_servers", None)
    options.pop("client_id", None)
    last: BaseException | None = None
    for host, port in _hosts(settings.bootstrap_servers):
        try:
            conn = await create_conn(
                host, port, client_id="stream-adapter-probe", request_timeout_ms=5000, **options
            )
        except Exception as exc:
            last = exc
            continue
        try:
            await conn.send(MetadataRequest([]))  # the brokers, no topics
            return
        except Exception as exc:
            last = exc
        finally:
            conn.close()
    raise last if last is not None else OSError("no bootstrap server")


def _hosts(servers: str) -> list[tuple[str, int]]:
    out = []
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


@contextlib.asynccontextmanager
async def watching(settings: Settings, **options: Any) -> AsyncIterator[BrokerWatch]:
    """A started `BrokerWatch` of the settings' brokers for the block's length (for
    short-lived clients: `stream-adapter call`, the client library)."""
    watch = BrokerWatch.for_settings(settings, **options)
    await watch.start()
    try:
        yield watch
    finally:
        await watch.stop()
