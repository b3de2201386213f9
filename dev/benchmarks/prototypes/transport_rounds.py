"""The transport prototypes measured beside the worker, in interleaved rounds, by the bench's
own machinery (`stream_adapter_dev.bench.run`: backlog throughput, then paced latency at
fractions of the worker's rate; medians with min-max; ratios within a round).

Contenders, every round in this order:
- `worker`: the worker as it is (aiokafka, Faust, the engine);
- `worker-fastpath`: the same worker with option (c)'s prototype patches
  (dev/benchmarks/prototypes/aiokafka_savings.py);
- `lane-aiokafka`: the inline lane's per-call work in a plain aiokafka loop (the control);
- `lane-librdkafka`: the same on confluent-kafka (option (b)'s hot path, lane_loop.py);
- `librdkafka-loop`: the bench's librdkafka loop (the ceiling).

Run from the repository root:
``python -m benchmarks.prototypes.transport_rounds --calls 50000 --rounds 3 --own-broker`` in dev/.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from stream_adapter_dev.bench import run as bench_run
from stream_adapter_dev.bench.config import BenchConfig
from stream_adapter_dev.broker import local

PAIRS = [
    ("worker-fastpath", "worker"),
    ("lane-aiokafka", "worker"),
    ("lane-librdkafka", "worker"),
    ("lane-librdkafka", "lane-aiokafka"),
    ("worker", "librdkafka-loop"),
    ("worker-fastpath", "librdkafka-loop"),
    ("lane-librdkafka", "librdkafka-loop"),
]


def plan(
    cfg: BenchConfig, run_id: str, round_no: int, echo: list[bytes]
) -> list[bench_run.Planned]:
    tag = f"{run_id}-{round_no}"
    once = bench_run.AT_LEAST_ONCE
    out = [bench_run.Planned(bench_run._worker(cfg, "worker", tag), echo, once)]
    if "fastpath" not in cfg.skip:
        fast = bench_run._worker(cfg, "worker-fastpath", tag)
        fast.cmd[:] = [sys.executable, "-m", "benchmarks.prototypes.aiokafka_savings"]
        out.append(bench_run.Planned(fast, echo, once))
    for client in ("aiokafka", "librdkafka"):
        name = f"lane-{client}"
        if name in cfg.skip:
            continue
        module = "benchmarks.prototypes.lane_loop"
        lane = bench_run._module(cfg, name, tag, module, extra={"BENCH_CLIENT": client})
        out.append(bench_run.Planned(lane, echo, once))
    if "librdkafka-loop" not in cfg.skip:
        module = "stream_adapter_dev.bench.librdkafka_loop"
        out.append(
            bench_run.Planned(bench_run._module(cfg, "librdkafka-loop", tag, module), echo, once)
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=15.0)
    parser.add_argument("--warm-paced-s", type=float, default=30.0)
    parser.add_argument("--paced-s", type=float, default=5.0)
    parser.add_argument("--skip", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("prototype-results"))
    parser.add_argument("--bootstrap", default="", help="a broker (default: a fresh local one)")
    args = parser.parse_args()
    bench_run.plan = plan  # type: ignore[assignment]
    bench_run.throughput_pairs = lambda cfg: PAIRS
    bench_run.p99_pairs = lambda cfg: PAIRS
    with tempfile.TemporaryDirectory(prefix="sa-proto-") as home:
        config = None
        bootstrap = args.bootstrap
        if not bootstrap:
            config = local.BrokerConfig(
                home=Path(home),
                port=local.free_port(),
                controller_port=local.free_port(),
                heap_mb=1024,
                jvm_flags=("-XX:TieredStopAtLevel=1",),
                jars_dir=Path(".kafka/libs"),
            )
            bootstrap = local.start(config)
        try:
            cfg = BenchConfig(
                bootstrap=bootstrap,
                calls=args.calls,
                out=args.out,
                skip=frozenset(args.skip),
                rounds=args.rounds,
                paced_s=args.paced_s,
                warm_paced_s=args.warm_paced_s,
                settle_s=args.settle_s,
            )
            results = asyncio.run(bench_run.run_bench(cfg))
        finally:
            if config is not None:
                local.stop(config)
    bench_run.print_table(cfg, results)
    bench_run.write_outputs(cfg, results)


if __name__ == "__main__":
    main()
