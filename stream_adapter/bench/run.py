"""The whole benchmark: every contender against one broker, then a table, JSON and a chart."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from stream_adapter.bench.config import BenchConfig
from stream_adapter.bench.measure import (
    Contender,
    Result,
    create_topics,
    echo_envelope,
    measure,
    sleep_envelope,
)
from stream_adapter.settings import Settings

SLEEP_S = 0.05
TARGET_P99_MS = 25.0
"""The benchmark's latency target (p99 at half the worker's throughput), drawn on the chart."""


def _worker(cfg: BenchConfig, name: str, run_id: str, **settings: Any) -> Contender:
    app_id = f"bench-{name}-{run_id}"
    values = Settings.for_app(
        app_id,
        broker=cfg.bootstrap,
        partitions=cfg.partitions,
        data_dir=str(cfg.out / "data" / app_id),
        log_level="warning",
        **settings,
    )
    env = {**os.environ, **values.to_env(), "BENCH_LOG": str(cfg.out / f"{name}.log")}
    return Contender(
        name,
        [sys.executable, "-m", "stream_adapter", "worker"],
        env,
        values.calls_topic,
        values.replies_topic,
        read_committed=values.processing_guarantee == "exactly_once",
    )


def _module(cfg: BenchConfig, name: str, run_id: str, module: str) -> Contender:
    prefix = f"bench-{name}-{run_id}"
    env = {
        **os.environ,
        "BENCH_BOOTSTRAP": cfg.bootstrap,
        "BENCH_CALLS": f"{prefix}-calls",
        "BENCH_REPLIES": f"{prefix}-replies",
        "BENCH_GROUP": prefix,
        "BENCH_STATE_DIR": str(cfg.out / "data" / prefix),
        "BENCH_LOG": str(cfg.out / f"{name}.log"),
    }
    return Contender(
        name, [sys.executable, "-m", module], env, f"{prefix}-calls", f"{prefix}-replies"
    )


async def run_bench(cfg: BenchConfig, say: Callable[[str], None] = print) -> list[Result]:
    """Run every contender one after another; return their results in table order."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:6]
    echo = [echo_envelope(i) for i in range(cfg.calls)]
    results: list[Result] = []

    async def one(contender: Contender, backlog: list[bytes], **kw: Any) -> Result:
        await create_topics(
            cfg.bootstrap, [contender.calls_topic, contender.replies_topic], cfg.partitions
        )
        say(f"running {contender.name} ({len(backlog)} calls)")
        result = await measure(contender, cfg.bootstrap, backlog, paced_s=cfg.paced_s, **kw)
        say(f"  {result.calls_per_s:,.0f} calls/s")
        results.append(result)
        return result

    def own_rates(per_s: float) -> list[float]:
        """The paced rates for a contender: fractions of its own measured throughput."""
        return [per_s * f for f in cfg.paced_fractions]

    # A fresh broker's JVM is cold, for a backlog's big requests and for the paced phase's
    # small ones alike: the first contender would pay for its warm-up.
    warm = _module(cfg, "warm-up", run_id, "stream_adapter.bench.baseline")
    await create_topics(cfg.bootstrap, [warm.calls_topic, warm.replies_topic], cfg.partitions)
    say(f"warming the broker up (the aiokafka loop, a backlog and {cfg.warm_paced_s:.0f} s paced)")
    await measure(
        warm,
        cfg.bootstrap,
        echo,
        paced_rates=lambda r: [r * max(cfg.paced_fractions, default=0.5)],
        paced_s=cfg.warm_paced_s,
    )
    worker = await one(_worker(cfg, "worker", run_id), echo, paced_rates=own_rates)
    rates = [latency.rate for latency in worker.latency]
    if "baseline" not in cfg.skip:
        baseline = _module(cfg, "aiokafka-loop", run_id, "stream_adapter.bench.baseline")
        await one(baseline, echo, paced_rates=rates)
        results.insert(0, results.pop())
    if "eos" not in cfg.skip:
        await one(
            _worker(cfg, "worker-eos", run_id, processing_guarantee="exactly_once"),
            echo,
            # Its own rates: at the worker's, far above its throughput, the latency would
            # only say how fast its backlog grows.
            paced_rates=own_rates,
        )
    if "quix" not in cfg.skip:
        await one(
            _module(cfg, "quix-streams", run_id, "stream_adapter.bench.quix"),
            echo,
            paced_rates=rates,
        )
    if "sleep" not in cfg.skip:
        for limit in (64, 256):
            n = limit * cfg.sleep_calls_per_slot
            await one(
                _worker(cfg, f"sleep-{limit}", run_id, max_in_flight=limit),
                [sleep_envelope(i, SLEEP_S) for i in range(n)],
                distinct_keys=True,
                ideal_per_s=limit / SLEEP_S,
            )
    return results


def ratios(results: list[Result]) -> dict[str, float]:
    """The ratios the issue asks for, where both sides were measured."""
    by = {r.name: r for r in results}
    out: dict[str, float] = {}
    if "worker" in by and "aiokafka-loop" in by:
        out["worker / aiokafka-loop"] = by["worker"].calls_per_s / by["aiokafka-loop"].calls_per_s
    if "worker" in by and "quix-streams" in by:
        out["worker / quix-streams"] = by["worker"].calls_per_s / by["quix-streams"].calls_per_s
    for r in results:
        if r.ideal_per_s:
            out[f"{r.name} / ideal"] = r.calls_per_s / r.ideal_per_s
    return out


def write_outputs(cfg: BenchConfig, results: list[Result]) -> tuple[Path, Path]:
    """bench.json and bench.png in the output folder."""
    data = {
        "results": [r.to_json() for r in results],
        "ratios": ratios(results),
        "calls": cfg.calls,
        "partitions": cfg.partitions,
        "cpus": os.cpu_count(),
    }
    json_path = cfg.out / "bench.json"
    json_path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    png_path = cfg.out / "bench.png"
    _chart(results, png_path)
    return json_path, png_path


def _chart(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r.name for r in results]
    left.barh(names, [r.calls_per_s for r in results], color="#4c72b0")
    for r in results:
        if r.ideal_per_s:
            left.plot([r.ideal_per_s], [r.name], marker="|", markersize=18, color="#c44e52")
    left.set_xlabel("calls per second (red mark: ideal for sleep runs)")
    left.invert_yaxis()
    for r in results:
        if r.latency:
            rates = [lat.rate for lat in r.latency]
            right.plot(rates, [lat.p99_ms for lat in r.latency], marker="o", label=r.name)
    right.axhline(TARGET_P99_MS, color="#c44e52", linestyle="--", linewidth=1)
    right.set_yscale("log")
    right.set_xlabel("paced calls/s")
    right.set_ylabel(f"p99 call-to-reply latency, ms (dashed: {TARGET_P99_MS:.0f} ms)")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(results: list[Result], say: Callable[[str], None] = print) -> None:
    """The figures as a rich table, then the ratios."""
    from rich.console import Console
    from rich.table import Table

    table = Table(
        "contender",
        "calls/s",
        "ideal",
        "p50 ms",
        "p99 ms",
        "max ms",
        "paced at",
        "peak RSS MB",
        title="stream-adapter bench",
    )
    for r in results:
        head = r.headline
        table.add_row(
            r.name,
            f"{r.calls_per_s:,.0f}",
            f"{r.ideal_per_s:,.0f}" if r.ideal_per_s else "",
            _ms(head.p50_ms if head else None),
            _ms(head.p99_ms if head else None),
            _ms(head.max_ms if head else None),
            f"{head.rate:,.0f}/s" if head else "",
            f"{r.peak_rss_mb:.0f}",
        )
    console = Console(width=120)
    console.print(table)
    if any(len(r.latency) > 1 for r in results):
        curve = Table(
            "contender", "paced at", "p50 ms", "p99 ms", "max ms", title="latency by rate"
        )
        for r in results:
            for lat in r.latency:
                curve.add_row(
                    r.name, f"{lat.rate:,.0f}/s", _ms(lat.p50_ms), _ms(lat.p99_ms), _ms(lat.max_ms)
                )
        console.print(curve)
    for name, value in ratios(results).items():
        say(f"{name}: {value:.2f}")


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"
