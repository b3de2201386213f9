"""`stream-adapter chaos`, `fuzz` and `bench` through the real command, small, on the session's
broker named with `--broker`: the option reaches the run, progress goes to stderr, and each run
ends with its summary line.

(The CI-sized chaos runs on a broker of their own, which the chaos run kills: test_chaos.py.)
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from tests.cli_support import run

pytestmark = pytest.mark.timeout(600)


async def test_chaos_takes_broker_and_ends_with_a_summary(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    figures = tmp_path / "chaos.json"
    args = ("--calls", "20", "--rate", "20", "--kills", "0", "--no-kill-while-running")
    args += ("--pauses", "0", "--no-pause-while-running")
    args += ("--partitions", "2")
    args += ("--session-timeout", "6", "--max-seconds", "240", "--json", str(figures))
    ran = await asyncio.to_thread(
        run, "chaos", *args, "--broker", kafka_bootstrap, cwd=tmp_path, timeout_s=400
    )
    assert ran.code == 0, ran
    assert f"using the broker at {kafka_bootstrap} (it is not restarted)" in ran.err
    assert "the run skips the broker faults" in ran.err
    assert "starting a local Kafka broker" not in ran.err
    assert ran.out.splitlines()[-1].startswith("chaos PASSED (at_least_once): 20 calls in "), (
        ran.out
    )
    assert "0 broker fault(s); 0 without a final reply" in ran.out
    data = json.loads(figures.read_text())
    assert data["figures"]["passed"] is True and data["figures"]["broker"].startswith("given")


async def test_fuzz_takes_broker_and_ends_with_a_summary(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    figures = tmp_path / "fuzz.json"
    args = ("--calls", "30", "--decisions", "5", "--max-seconds", "180", "--json", str(figures))
    ran = await asyncio.to_thread(
        run, "fuzz", *args, "--broker", kafka_bootstrap, cwd=tmp_path, timeout_s=400
    )
    assert ran.code == 0, ran
    assert f"using the broker at {kafka_bootstrap}" in ran.err
    assert ran.out.splitlines()[-1].startswith(
        "fuzz PASSED: 30 malformed calls, 5 malformed decisions, "
    ), ran.out
    assert json.loads(figures.read_text())["figures"]["passed"] is True


async def test_bench_takes_broker_shows_its_steps_and_ends_with_a_summary(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench"
    args = ("--calls", "200", "--partitions", "2", "--out", str(out), "--paced-s", "1")
    args += ("--paced-fraction", "0.5", "--warm-paced-s", "0.5", "--settle-s", "0", "--rounds", "1")
    args += ("--skip", "baseline", "--skip", "eos", "--skip", "quix", "--skip", "sleep")
    args += ("--skip", "librdkafka-loop")
    ran = await asyncio.to_thread(
        run, "bench", *args, "--broker", kafka_bootstrap, cwd=tmp_path, timeout_s=400
    )
    assert ran.code == 0, ran
    # aiokafka's own warning when a fresh topic's leader is still being elected is not ours.
    steps = [line for line in ran.err.splitlines() if not line.startswith("Got error produce")]
    assert steps[0] == f"[00:00] using the broker at {kafka_bootstrap}", ran.err
    assert all(re.match(r"\[\d\d:\d\d\] ", step) for step in steps), ran.err
    assert any(step.endswith("running worker (200 calls)") for step in steps), ran.err
    summary = ran.out.splitlines()[-1]
    assert re.fullmatch(
        r"bench done: 1 contender\(s\), \d+ round\(s\) in [\d.]+ min; "
        r"medians: worker [\d,]+ calls/s, p99 [\d.]+ ms "
        rf"at [\d,]+/s; wrote {re.escape(str(out / 'bench.json'))} and .*bench\.png",
        summary,
    ), summary
    assert list(json.loads((out / "bench.json").read_text())["throughput"]) == ["worker"]
