"""`stream-adapter bench` end to end on a small backlog: it measures, prints, writes and draws.

No figure is asserted (speed is for the benchmark, not for tests); the run must complete
with every contender answering every call, and its outputs must be well formed.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from stream_adapter.bench.run import BenchConfig, print_table, run_bench, write_outputs


async def test_small_bench_runs_every_contender(kafka_bootstrap: str, tmp_path: Path) -> None:
    cfg = BenchConfig(
        bootstrap=kafka_bootstrap,
        calls=300,
        partitions=4,
        out=tmp_path,
        skip=frozenset({"eos"}),
        paced_s=1.0,
        paced_fractions=(0.25, 0.5),
        warm_paced_s=0.5,
        sleep_calls_per_slot=2,
    )
    results = await run_bench(cfg, say=lambda _: None)
    names = [r.name for r in results]
    assert names == ["aiokafka-loop", "worker", "quix-streams", "sleep-64", "sleep-256"]
    for result in results:
        assert result.calls_per_s > 0 and result.peak_rss_mb > 0
    timed = {r.name: r for r in results if r.latency}
    assert set(timed) == {"aiokafka-loop", "worker", "quix-streams"}
    worker_rates = [lat.rate for lat in timed["worker"].latency]
    assert worker_rates == sorted(worker_rates) and len(worker_rates) == 2
    assert worker_rates[1] == 2 * worker_rates[0]  # both fractions of one measured rate
    for result in timed.values():  # every contender at the worker's rates
        assert [lat.rate for lat in result.latency] == worker_rates
        assert all(0 < lat.p50_ms <= lat.p99_ms <= lat.max_ms for lat in result.latency)
    lines: list[str] = []
    print_table(results, say=lines.append)
    assert any(line.startswith("worker / aiokafka-loop: ") for line in lines)
    json_path, png_path = write_outputs(cfg, results)
    data = orjson.loads(json_path.read_bytes())
    assert [r["name"] for r in data["results"]] == names
    assert [len(r["latency"]) for r in data["results"]] == [2, 2, 2, 0, 0]
    assert set(data["ratios"]) >= {
        "worker / aiokafka-loop",
        "worker / quix-streams",
        "sleep-64 / ideal",
        "sleep-256 / ideal",
    }
    assert png_path.read_bytes().startswith(b"\x89PNG")
