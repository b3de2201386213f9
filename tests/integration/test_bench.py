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
        warm_paced_s=0.5,
        sleep_calls_per_slot=2,
    )
    results = await run_bench(cfg, say=lambda _: None)
    names = [r.name for r in results]
    assert names == ["aiokafka-loop", "worker", "quix-streams", "sleep-64", "sleep-256"]
    for result in results:
        assert result.calls_per_s > 0 and result.peak_rss_mb > 0
    timed = [r for r in results if r.p99_ms is not None]
    assert {r.name for r in timed} == {"aiokafka-loop", "worker", "quix-streams"}
    lines: list[str] = []
    print_table(results, say=lines.append)
    assert any(line.startswith("worker / aiokafka-loop: ") for line in lines)
    json_path, png_path = write_outputs(cfg, results)
    data = orjson.loads(json_path.read_bytes())
    assert [r["name"] for r in data["results"]] == names
    assert set(data["ratios"]) >= {
        "worker / aiokafka-loop",
        "worker / quix-streams",
        "sleep-64 / ideal",
        "sleep-256 / ideal",
    }
    assert png_path.read_bytes().startswith(b"\x89PNG")
