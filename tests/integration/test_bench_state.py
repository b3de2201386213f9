"""`stream-adapter bench --state` on a small table, at both guarantees: every step measured,
every probe call answered, and the failover's survivor restores only the tails of its
standby copies, never the dead worker's partitions from the start. No figure is asserted
beyond that (speed is for the benchmark)."""

from __future__ import annotations

from pathlib import Path

import orjson

from stream_adapter_dev.bench.state import run_state
from stream_adapter_dev.bench.state_report import print_state, write_state

RECORDS = 3000


async def test_state_bench_measures_a_fresh_worker_and_a_failover(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    results = await run_state(
        kafka_bootstrap,
        tmp_path / "run",
        sizes=(RECORDS,),
        guarantees=("at_least_once", "exactly_once"),
        rounds=1,
        timeout_s=180.0,
        say=lambda _: None,
    )
    assert [(p.guarantee, p.records) for p in results.points] == [
        ("at_least_once", RECORDS),
        ("exactly_once", RECORDS),
    ]
    for point in results.points:
        assert point.fresh_answer_s > 0 and point.failover_s > 0
        assert point.fresh_restored == RECORDS  # the whole table, through the bulk path
        assert point.fresh_rss_mb > 0 and point.fresh_disk_mb > 0 and point.survivor_disk_mb > 0
        # Half the table was the dead worker's: restoring it from the start would be ~1500.
        assert point.failover_restored < RECORDS // 10, point
    lines: list[str] = []
    print_state(results, lines.append)
    assert len(lines) == 1 + 2
    json_path, png_path = write_state(results, tmp_path / "out")
    assert [row["records"] for row in orjson.loads(json_path.read_bytes())["summary"]] == [
        RECORDS,
        RECORDS,
    ]
    assert png_path.stat().st_size > 0
