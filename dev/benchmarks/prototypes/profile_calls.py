"""Where the worker's CPU goes per call on the bench's echo backlog: py-spy samples by stage.

Starts one at-least-once worker (the bench's settings), warms it with a few thousand calls,
then attaches `py-spy record --nonblocking` and produces a backlog of echo envelopes while
the worker answers them. The worker's CPU time over the window (utime + stime of all its
threads, /proc) divided by the calls answered is the CPU per call; py-spy's active samples,
grouped by stage (`STAGES`: the innermost frame that matches decides), split it.

Run (py-spy in the venv or on PATH; a broker at --bootstrap):
``python dev/benchmarks/prototypes/profile_calls.py --bootstrap 127.0.0.1:19092 --calls 200000``.
``--worker-cmd`` runs another module instead of the worker (a prototype of the same work).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from stream_adapter.settings import Settings
from stream_adapter_dev.bench.measure import Replies, create_topics, echo_envelope, produce

STAGES: list[tuple[str, tuple[str, ...]]] = [
    # (stage, substrings of a frame "function (file:line)"); the first stage any frame matches,
    # from the innermost frame out, takes the sample. Order matters only within one frame.
    ("compression (lz4)", ("lz4", "compression.py", "codec.py")),
    ("decode (orjson.loads)", ("_decode (stream_adapter/core/envelope.py",)),
    ("ids / scopes", ("ids.py", "scopes.py", "message_id_of", "kafka_message_id")),
    ("envelope parse/validate", ("envelope.py",)),
    ("executor + tool", ("executor.py", "tools.py", "topologies/demo.py")),
    ("reply build + encode", ("replies.py", "take (stream_adapter/stream/inline.py:18")),
    ("metrics", ("metrics.py", "prometheus_client")),
    (
        "produce: batches, partitioner, sender",
        (
            "partitions.py",
            "murmurhash",
            "aiokafka/producer",
            "aiokafka/record/default_records",
            "_append (stream_adapter/stream/inline.py",
            "engine/producer.py",
        ),
    ),
    ("commit", ("engine/commits", "commit", "coordinator")),
    (
        "fetch + record decode (aiokafka)",
        ("aiokafka/consumer/fetcher", "aiokafka/record", "aiokafka/consumer"),
    ),
    ("network I/O (aiokafka conn, sockets)", ("aiokafka/conn", "aiokafka/protocol", "selector")),
    ("inline lane bookkeeping", ("stream/inline.py",)),
    ("engine: consumer dispatch, routes, keyed", ("stream/engine/",)),
    ("Faust / mode", ("faust/", "mode/")),
    ("asyncio loop", ("asyncio/",)),
    ("gc", ("gc",)),
]


def stage_of(stack: list[str]) -> str:
    """The stage of one sample (stack: outermost frame first)."""
    for frame in reversed(stack):
        for stage, needles in STAGES:
            if any(n in frame for n in needles):
                return stage
    return "other"


def read_raw(path: Path) -> collections.Counter[str]:
    """py-spy's raw (collapsed) output: samples by stage."""
    by_stage: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        by_stage[stage_of(stack.split(";"))] += int(count)
    return by_stage


def cpu_s(pid: int) -> float:
    """utime + stime of the process and its threads so far (s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spawn(cmd: list[str], env: dict[str, str] | None, log: Path | None) -> subprocess.Popen[bytes]:
    """Start cmd, its output in log (or nowhere)."""
    with open(log or os.devnull, "ab") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def worker_env(bootstrap: str, workdir: Path, app_id: str) -> tuple[dict[str, str], Settings]:
    settings = Settings.for_app(
        app_id, broker=bootstrap, partitions=8, data_dir=str(workdir / "data"), log_level="warning"
    )
    return {**os.environ, **settings.to_env()}, settings


async def run(args: argparse.Namespace, workdir: Path) -> None:
    app_id = f"profile-{uuid.uuid4().hex[:6]}"
    env, settings = worker_env(args.bootstrap, workdir, app_id)
    calls, replies = settings.calls_topic, settings.replies_topic
    if args.worker_cmd:
        env.update(
            BENCH_BOOTSTRAP=args.bootstrap,
            BENCH_CALLS=calls,
            BENCH_REPLIES=replies,
            BENCH_GROUP=app_id,
        )
    await create_topics(args.bootstrap, [calls, replies], 8, appended=frozenset({replies}))
    cmd = (
        args.worker_cmd.split()
        if args.worker_cmd
        else [sys.executable, "-m", "stream_adapter", "worker"]
    )
    proc = spawn(cmd, env, workdir / "worker.log")
    spy: subprocess.Popen[bytes] | None = None
    raw = Path(args.out)
    try:
        async with Replies(args.bootstrap, replies, read_committed=False) as got:
            warm = [echo_envelope(i) for i in range(args.warm)]
            await produce(args.bootstrap, calls, warm, distinct_keys=False)
            await got.until(len(warm), 180)
            if args.rate:
                pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
                spy_cmd = [pyspy, "record", "--pid", str(proc.pid), "--nonblocking"]
                spy_cmd += ["-r", str(args.rate), "-f", "raw", "-o", str(raw)]
                spy = spawn(spy_cmd, None, None)
                await asyncio.sleep(1.0)  # py-spy attached
            before, began = cpu_s(proc.pid), time.monotonic()
            start_count = got.count
            backlog = [echo_envelope(i) for i in range(args.calls)]
            await asyncio.gather(
                produce(args.bootstrap, calls, backlog, distinct_keys=False),
                got.until(start_count + args.calls, 600),
            )
            used = cpu_s(proc.pid) - before
            wall = time.monotonic() - began
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    per_call_us = used / args.calls * 1e6
    print(
        f"CPU {args.label or ' '.join(cmd[-2:])}: {per_call_us:.2f} us/call, {args.calls:,} calls "
        f"in {wall:.1f} s, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    if spy is None:
        return
    by_stage = read_raw(raw)
    total = sum(by_stage.values())
    print(
        f"{args.calls:,} calls in {wall:.1f} s wall; worker CPU {used:.2f} s = "
        f"{per_call_us:.1f} us/call; {total:,} active samples; load {os.getloadavg()[0]:.1f}"
    )
    print("| stage | share of samples | us per call |")
    print("|---|---:|---:|")
    for stage, n in by_stage.most_common():
        print(f"| {stage} | {n / total:.1%} | {per_call_us * n / total:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--warm", type=int, default=5_000)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples/s (0: no py-spy)")
    parser.add_argument("--label", default="", help="the contender's name in the CPU line")
    parser.add_argument("--out", default="profile-calls.txt", help="py-spy raw output")
    parser.add_argument("--worker-cmd", default="", help="another command in place of the worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sa-profile-") as home:
        asyncio.run(run(args, Path(home)))


if __name__ == "__main__":
    main()
