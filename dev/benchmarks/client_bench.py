"""Round trip of ToolClient against a hand-written aiokafka request/reply, and the MCP layer's cost.

Starts a worker of the demo topology (its own topics, on the broker given) and times `echo`
calls from call to final reply:

- `client`: `ToolClient.call`, many concurrent calls over one producer and one reply reader;
- `aiokafka`: what an agent writes by hand: one producer, one consumer assigned to every
  partition of the replies topic from its end, a future per call_id;
- `stdio`, `http`: `tools/call` through `stream-adapter mcp` (a process) with the MCP SDK's
  client, one call at a time, alternating call by call with `client` one call at a time.
  The `http` client keeps its connection, as a client reading each response to its end does;
  `http-reconnect` is the Python SDK's client as it is: it closes each event stream before
  the end, so its HTTP client drops the connection and opens a new one for the next call.
- `stdio-floor`, `http-floor`: the same SDK client against `mcp_floor.py`, a bare JSON-RPC
  responder in front of ToolClient: what the client and its transport cost with no MCP server
  work at all. The real server's own share is its path's figure less its floor's.

The paths alternate within each round (their order rotating from round to round); the figures
are the median over rounds of each round's p50, p99 and calls/s.

Run: ``python dev/benchmarks/client_bench.py [--broker 127.0.0.1:9092] [--rounds 5]
[--calls 200] [--concurrency 1,10,100] [--mcp stdio,http,stdio-floor,http-floor]
[--mcp-calls 100]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
import httpx2
import orjson
from aiokafka.structs import TopicPartition

from stream_adapter.client import ToolClient
from stream_adapter.kafka import clients as kafka_clients
from stream_adapter.kafka.partitions import topic_partitions
from stream_adapter.settings import Settings
from stream_adapter.stream.topics import create_topics
from stream_adapter_dev.broker.local import free_port

ROOT = Path(__file__).resolve().parents[2]
FLOOR = Path(__file__).with_name("mcp_floor.py")
FLOOR_READY = "mcp floor listening"  # mcp_floor.READY
Call = Callable[[int], Awaitable[Any]]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class HandWritten:
    """A hand-written aiokafka request/reply: the baseline an agent developer writes today."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def start(self) -> None:
        self.producer = kafka_clients.producer(self.settings, linger_ms=1)
        await self.producer.start()
        self.consumer = kafka_clients.consumer(self.settings, isolation_level="read_committed")
        await self.consumer.start()
        topic = self.settings.replies_topic
        tps = [TopicPartition(topic, p) for p in await topic_partitions(self.consumer, topic)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        for tp in tps:
            await self.consumer.position(tp)
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=100)
            for records in batches.values():
                for record in records:
                    reply = orjson.loads(record.value)
                    future = self.waiting.pop(reply.get("call_id"), None)
                    if future is not None and not future.done():
                        future.set_result(reply)

    async def call(self, n: int) -> dict[str, Any]:
        call_id, run_id = f"call_{uuid.uuid4().hex}", f"run_{uuid.uuid4().hex}"
        future = asyncio.get_running_loop().create_future()
        self.waiting[call_id] = future
        body = {"tool": "echo", "arguments": {"n": n}, "run_id": run_id, "call_id": call_id}
        await self.producer.send_and_wait(
            self.settings.calls_topic, orjson.dumps(body), key=run_id.encode()
        )
        return await future

    async def stop(self) -> None:
        self.reader.cancel()
        await self.producer.stop()
        await self.consumer.stop()


async def timed(call: Call, calls: int, concurrency: int) -> tuple[list[float], float]:
    """Latencies (ms) of `calls` calls, `concurrency` at a time, and calls per second."""
    latencies: list[float] = []
    numbers = iter(range(calls))

    async def lane() -> None:
        for n in numbers:
            start = time.perf_counter()
            await call(n)
            latencies.append((time.perf_counter() - start) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return latencies, calls / (time.perf_counter() - began)


async def alternating(calls: dict[str, Call], n: int) -> dict[str, tuple[list[float], float]]:
    """n calls of each path, one at a time, the paths taking turns call by call: a moment of
    load on the machine falls on all of them alike. Latencies (ms) and calls/s of each."""
    latencies: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(n):
        for name, call in calls.items():
            start = time.perf_counter()
            await call(i)
            latencies[name].append((time.perf_counter() - start) * 1000)
    return {name: (lat, 1000 * n / sum(lat)) for name, lat in latencies.items()}


class Drained(httpx2.AsyncByteStream):
    """A response body read to its end before it is closed, so its connection is kept."""

    def __init__(self, stream: httpx2.AsyncByteStream) -> None:
        self.stream = stream
        self.ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            yield chunk
        self.ended = True

    async def aclose(self) -> None:
        if not self.ended:
            with anyio.move_on_after(1):  # the server ends a call's event stream after its result
                async for _ in self.stream:
                    pass
        await self.stream.aclose()


class KeepAlive(httpx2.AsyncBaseTransport):
    """HTTP keeping its connections across calls, as a client reading responses to the end."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        response.stream = Drained(response.stream)  # type: ignore[arg-type]
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class McpSession:
    """One MCP client session with `stream-adapter mcp` over stdio or streamable HTTP."""

    def __init__(self, settings: Settings, transport: str, workdir: Path) -> None:
        self.settings, self.transport, self.workdir = settings, transport, workdir
        self.env = {**os.environ, **settings.to_env(), "PYTHONPATH": str(ROOT)}

    async def __aenter__(self) -> McpSession:
        from contextlib import AsyncExitStack

        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        self.stack = AsyncExitStack()
        if self.transport in ("stdio", "stdio-floor"):
            floor = self.transport == "stdio-floor"
            args = [str(FLOOR), "stdio"] if floor else ["-m", "stream_adapter", "mcp"]
            params = StdioServerParameters(command=sys.executable, args=args, env=self.env)
            read, write = await self.stack.enter_async_context(stdio_client(params))
        elif self.transport == "http-floor":
            read, write = await self._floor_http()
        else:
            read, write = await self._http()
        self.session = await self.stack.enter_async_context(ClientSession(read, write))
        await self.session.initialize()
        return self

    async def _http(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        from stream_adapter.review.auth import ReviewersFile

        callers = self.workdir / "callers.json"
        token = ReviewersFile(callers).add(f"bench-{uuid.uuid4().hex[:6]}")
        port = free_port()
        args = ["--transport", "http", "--port", str(port), "--callers-file", str(callers)]
        self.process = spawn(["mcp", *args], self.env, self.workdir / "mcp-http.log")
        self.stack.callback(self.process.kill)
        await wait_for_line(self.workdir / "mcp-http.log", "mcp server listening on", self.process)
        headers = {"Authorization": f"Bearer {token}"}
        if self.transport == "http-reconnect":
            http = create_mcp_http_client(headers=headers)
        else:
            timeout = httpx2.Timeout(30, read=300)  # the SDK client's
            http = httpx2.AsyncClient(headers=headers, timeout=timeout, transport=KeepAlive())
        await self.stack.enter_async_context(http)
        url = f"http://127.0.0.1:{port}/mcp"
        return await self.stack.enter_async_context(streamable_http_client(url, http_client=http))

    async def _floor_http(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        port = free_port()
        log = self.workdir / f"mcp-floor-{port}.log"
        argv = [sys.executable, str(FLOOR), "http", "--port", str(port)]
        self.process = spawn(argv, self.env, log, module=False)
        self.stack.callback(self.process.kill)
        await wait_for_line(log, FLOOR_READY, self.process)
        timeout = httpx2.Timeout(30, read=300)
        http = httpx2.AsyncClient(timeout=timeout, transport=KeepAlive())
        await self.stack.enter_async_context(http)
        url = f"http://127.0.0.1:{port}/mcp"
        return await self.stack.enter_async_context(streamable_http_client(url, http_client=http))

    async def call(self, n: int) -> Any:
        result = await self.session.call_tool("echo", {"n": n})
        assert not result.is_error and result.structured_content == {"n": n}, result
        return result

    async def __aexit__(self, *exc: object) -> None:
        await self.stack.aclose()


def spawn(
    args: list[str], env: dict[str, str], log: Path, *, module: bool = True
) -> subprocess.Popen[bytes]:
    """`stream-adapter ARGS` (or, not module, the command ARGS) in the background, output to log."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "stream_adapter", *args] if module else args,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
        )


def said(path: Path, line: str) -> bool:
    return path.exists() and line in path.read_text(errors="replace")


async def wait_for_line(path: Path, line: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not said(path, line):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{path.name}: never said {line!r}")
        await asyncio.sleep(0.1)


def summary(rounds: list[tuple[list[float], float]]) -> tuple[float, float, float]:
    """Median over rounds of (p50 ms, p99 ms, calls/s)."""
    return (
        statistics.median(percentile(lat, 0.5) for lat, _ in rounds),
        statistics.median(percentile(lat, 0.99) for lat, _ in rounds),
        statistics.median(rate for _, rate in rounds),
    )


def spread(rounds: list[tuple[list[float], float]], q: float) -> str:
    """The q-quantile's median over rounds and its min-max, as `median [min-max]`."""
    values = [percentile(lat, q) for lat, _ in rounds]
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


async def main(args: argparse.Namespace) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="client-bench-"))
    settings = Settings.for_app(
        f"client-bench-{uuid.uuid4().hex[:8]}",
        broker=args.broker,
        partitions=8,
        processing_guarantee=args.guarantee,
        data_dir=str(workdir / "data"),
        web_port=free_port(),
    )
    await create_topics(settings)
    env = {**os.environ, **settings.to_env(), "PYTHONPATH": str(ROOT)}
    log = workdir / "worker.log"
    worker = spawn(["worker"], env, log)
    try:
        await wait_for_line(log, "Worker ready", worker)
        await run_rounds(args, settings, workdir)
    finally:
        worker.kill()


async def run_rounds(args: argparse.Namespace, settings: Settings, workdir: Path) -> None:
    levels = [int(c) for c in args.concurrency.split(",")]
    results: dict[tuple[str, int], list[tuple[list[float], float]]] = {}
    client = await ToolClient(settings).start()
    hand = HandWritten(settings)
    await hand.start()
    paths: dict[str, Call] = {
        "client": lambda n: client.call("echo", {"n": n}, timeout_s=60),
        "aiokafka": hand.call,
    }
    mcp: dict[str, McpSession] = {}
    try:
        for transport in args.mcp.split(",") if args.mcp else ():
            mcp[transport] = await McpSession(settings, transport, workdir).__aenter__()
        for call in [*paths.values(), *(s.call for s in mcp.values())]:
            await timed(call, 20, 1)  # warm up: connections, metadata, the worker's first calls
        for r in range(args.rounds):
            for level in levels:
                names = list(paths)
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    results.setdefault((name, level), []).append(
                        await timed(paths[name], args.calls, level)
                    )
            if mcp:
                order = ["client", *mcp]
                order = order[r % len(order) :] + order[: r % len(order)]
                calls = {n: paths["client"] if n == "client" else mcp[n].call for n in order}
                for name, timing in (await alternating(calls, args.mcp_calls)).items():
                    results.setdefault((f"1-by-1 {name}", 1), []).append(timing)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for session in reversed(mcp.values()):  # anyio: the last entered leaves first
            await session.__aexit__(None, None, None)
        await client.close()
        await hand.stop()
    report(results, levels, args)


def report(
    results: dict[tuple[str, int], list[tuple[list[float], float]]],
    levels: list[int],
    args: argparse.Namespace,
) -> None:
    print(f"echo round trips, {args.guarantee}, median of {args.rounds} rounds")
    print("median [min-max] over rounds")
    head = f"{'path':<22}{'concurrency':>12}{'p50 ms':>22}{'p99 ms':>24}{'calls/s':>10}"
    print(head)
    for level in levels:
        for name in ("client", "aiokafka"):
            rounds = results[(name, level)]
            rate = summary(rounds)[2]
            p50, p99 = spread(rounds, 0.5), spread(rounds, 0.99)
            print(f"{name:<22}{level:>12}{p50:>22}{p99:>24}{rate:>10.0f}")
        c99 = summary(results[("client", level)])[1]
        a99 = summary(results[("aiokafka", level)])[1]
        print(f"{'client / aiokafka p99':<22}{level:>12}{c99 / a99:>10.2f}")
    base = results.get(("1-by-1 client", 1))
    if base is None:
        return
    print(f"MCP layer, one call at a time, {args.mcp_calls} calls a round")
    per_round = {name: rounds for (name, _), rounds in results.items() if name.startswith("1-by")}
    for name, rounds in per_round.items():
        rate = summary(rounds)[2]
        p50, p99 = spread(rounds, 0.5), spread(rounds, 0.99)
        print(f"{name:<22}{1:>12}{p50:>22}{p99:>24}{rate:>10.0f}")
    paths = {name.removeprefix("1-by-1 "): rounds for name, rounds in per_round.items()}
    for path, rounds in paths.items():
        if path != "client":
            print(f"{path} p50 over the client: {p50_over(rounds, base)}")
    for path, rounds in paths.items():
        if (floor := paths.get(f"{path}-floor")) is not None:
            print(f"{path} p50 over its floor (the server's own share): {p50_over(rounds, floor)}")


def p50_over(
    rounds: list[tuple[list[float], float]], others: list[tuple[list[float], float]]
) -> str:
    """How much higher rounds' p50 is than others' in the same round: median [min to max]."""
    overs = [
        percentile(mine, 0.5) - percentile(theirs, 0.5)
        for (mine, _), (theirs, _) in zip(rounds, others, strict=True)
    ]
    return f"{statistics.median(overs):+.2f} ms [{min(overs):+.2f} to {max(overs):+.2f}]"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--broker", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200, help="calls per path per round")
    parser.add_argument("--concurrency", default="1,10,100")
    parser.add_argument(
        "--mcp",
        default="stdio,http,stdio-floor,http-floor",
        help="MCP paths of stdio,http,http-reconnect,stdio-floor,http-floor ('' none)",
    )
    parser.add_argument("--mcp-calls", type=int, default=100)
    parser.add_argument(
        "--guarantee", default="at_least_once", choices=["at_least_once", "exactly_once"]
    )
    asyncio.run(main(parser.parse_args()))
