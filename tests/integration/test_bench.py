"""`stream-adapter bench` end to end on a small backlog: it measures, prints, writes and draws.

No figure is asserted (speed is for the benchmark, not for tests); the run must complete
with every contender answering every call in every round, and its outputs must be well formed.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from stream_adapter_dev.bench.run import BenchConfig, print_table, run_bench, write_outputs


async def test_small_bench_runs_every_contender_in_rounds(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    cfg = BenchConfig(
        bootstrap=kafka_bootstrap,
        calls=300,
        partitions=4,
        out=tmp_path,
        skip=frozenset({"eos"}),
        paced_s=1.0,
        paced_fractions=(0.25, 0.5),
        warm_paced_s=0.5,
        settle_s=0.1,
        sleep_calls_per_slot=2,
        rounds=2,
        quix_eos_intervals_s=(0.5,),
    )
    rounds = await run_bench(cfg, say=lambda _: None)
    names = [
        "worker",
        "aiokafka-loop",
        "librdkafka-loop",
        "quix-streams",
        "quix-eos-0.5s",
        "sleep-64",
        "sleep-256",
    ]
    assert [[r.name for r in one] for one in rounds] == [names, names]
    for one in rounds:
        for result in one:
            assert result.calls_per_s > 0 and result.peak_rss_mb > 0
    first = {r.name: r for r in rounds[0]}
    worker_rates = [lat.rate for lat in first["worker"].latency]
    assert worker_rates == sorted(worker_rates) and len(worker_rates) == 2
    assert worker_rates[1] == 2 * worker_rates[0]  # both fractions of one measured rate
    eos_rates = [lat.rate for lat in first["quix-eos-0.5s"].latency]
    assert eos_rates[1] == 2 * eos_rates[0]  # its own rates: no worker-eos ran
    for one in rounds:  # the same rates in every round
        by = {r.name: r for r in one}
        for name in ("worker", "aiokafka-loop", "librdkafka-loop", "quix-streams"):
            assert [lat.rate for lat in by[name].latency] == worker_rates
            assert all(0 < lat.p50_ms <= lat.p99_ms <= lat.max_ms for lat in by[name].latency)
        assert [lat.rate for lat in by["quix-eos-0.5s"].latency] == eos_rates
    lines: list[str] = []
    print_table(cfg, rounds, say=lines.append)
    assert any(line.startswith("worker / aiokafka-loop: ") for line in lines)
    assert any(line.startswith("p99 worker / aiokafka-loop: ") for line in lines)
    assert any(line.startswith("worker / librdkafka-loop: ") for line in lines)
    assert any(line.startswith("p99 worker / librdkafka-loop: ") for line in lines)
    json_path, png_path = write_outputs(cfg, rounds)
    data = orjson.loads(json_path.read_bytes())
    assert [[r["name"] for r in one] for one in data["rounds"]] == [names, names]
    assert data["throughput"]["worker"]["rounds"] == 2
    assert set(data["ratios"]) >= {
        "worker / aiokafka-loop",
        "worker / quix-streams",
        "worker / librdkafka-loop",
        "aiokafka-loop / librdkafka-loop",
        "sleep-64 / ideal",
        "sleep-256 / ideal",
    }
    assert [len(data["latency"][n]) for n in names[:5]] == [2, 2, 2, 2, 2]
    assert png_path.read_bytes().startswith(b"\x89PNG")
