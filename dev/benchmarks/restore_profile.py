"""Where a fresh worker's time goes while it restores N parked approvals: py-spy samples.

Fills a fresh app as `bench --state` does (N approval records on the changelog, their calls
committed), starts one worker with an empty data folder under `py-spy record`, sends one
echo call per partition, and stops the worker once all are answered. Prints the seconds to
the answers, then the functions with the most samples (inclusive: a function counted once
per stack; self: the innermost frame), as shares of all samples on the worker's CPU.

Run (py-spy from PyPI in the venv; a broker at --bootstrap):
``python dev/benchmarks/restore_profile.py --bootstrap localhost:9092 --records 200000``.
``--worker-pythonpath DIR`` runs the worker from another checkout (to profile a baseline).
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
from pathlib import Path

from stream_adapter_dev.bench.state import Probe, fill
from stream_adapter_dev.chaos.environment import create_run_topics, run_settings
from stream_adapter_dev.chaos.harness import worker_env


async def profile(args: argparse.Namespace, workdir: Path) -> Path:
    settings = run_settings(args.bootstrap, workdir, "profile", partitions=args.partitions)
    await create_run_topics(settings)
    began = time.monotonic()
    await fill(settings, args.records)
    print(f"filled {args.records:,} parked calls in {time.monotonic() - began:.1f} s")
    extra = {"STREAM_ADAPTER_DATA_DIR": str(workdir / "data")}
    if args.worker_pythonpath:
        extra["PYTHONPATH"] = args.worker_pythonpath
    env = worker_env(settings, extra)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    raw = workdir / "profile.txt"
    command = [spy, "record", "-f", "raw", "-r", str(args.rate), "-o", str(raw), "--"]
    command += [sys.executable, "-m", "stream_adapter", "worker"]
    started = time.monotonic()
    proc = _start(command, env, workdir)
    try:
        async with Probe(settings) as probe:
            answered = await probe.answer_all(args.timeout_s)
        print(f"answered on every partition {answered - started:.1f} s after the start")
    finally:
        for child in _children(proc.pid):
            os.kill(child, signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 120)
    return raw


def _start(command: list[str], env: dict[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    with open(workdir / "worker.log", "wb") as log:
        return subprocess.Popen(command, env=env, cwd=workdir, stdout=log, stderr=log)


def _children(pid: int) -> list[int]:
    found = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in found.read_text().split()] if found.exists() else []


def summarize(raw: Path, top: int) -> None:
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        total += count
        frames = [_short(frame) for frame in stack.split(";")]
        for name in set(frames):
            inclusive[name] += count
        own[frames[-1]] += count
    print(f"{total} samples")
    print("inclusive:")
    for name, count in inclusive.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("self:")
    for name, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {name}")


def _short(frame: str) -> str:
    """`function (path/to/module.py:line)` as `function (module.py)`."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    parts = Path(path).parts
    return f"{name} ({'/'.join(parts[-2:])})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rate", type=int, default=100, help="samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--worker-pythonpath", default="")
    parser.add_argument("--keep", type=Path, help="copy the raw profile here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sa-restore-profile-") as home:
        raw = asyncio.run(profile(args, Path(home)))
        if args.keep:
            shutil.copy(raw, args.keep)
        summarize(raw, args.top)


if __name__ == "__main__":
    main()
