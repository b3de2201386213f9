"""`stream-adapter bench --scale-out` on a small load: every group size measured, every call
answered. No figure is asserted beyond being measured (speed is for the benchmark)."""

from __future__ import annotations

from pathlib import Path

import orjson

from stream_adapter_dev.bench.scale import MAX_WORKERS, print_scale, run_scale, write_scale


async def test_scale_out_measures_each_group_size(kafka_bootstrap: str, tmp_path: Path) -> None:
    results = await run_scale(
        kafka_bootstrap,
        tmp_path / "run",
        calls=500,
        partitions=6,
        replication=1,
        rounds=1,
        settle_s=1.0,
        say=lambda _: None,
    )
    groups = [(b.workers, b.partitions) for b in results.bursts]
    assert groups == [(1, 6), (2, 6), (3, 6), (1, 1)]
    # CPU is counted in clock ticks (10 ms): a burst this small may round to none.
    assert all(b.calls_per_s > 0 and b.cpu_ms_per_call >= 0 for b in results.bursts)
    assert [j.workers_after for j in results.joins] == list(range(2, MAX_WORKERS + 1))
    assert all(j.pause_s > 0 and j.ready_s > 0 for j in results.joins)
    lines: list[str] = []
    print_scale(results, lines.append)
    assert len(lines) == 1 + 4
    written = orjson.loads(write_scale(results, tmp_path / "out").read_bytes())
    assert [row["workers"] for row in written["summary"]] == [1, 1, 2, 3]
