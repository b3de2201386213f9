"""The whole benchmark: every contender against one broker in interleaved rounds, then the
medians of their per-round figures and ratios as a table, JSON and a chart."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from stream_adapter.settings import Settings
from stream_adapter_dev.bench import summary
from stream_adapter_dev.bench.config import BenchConfig
from stream_adapter_dev.bench.measure import (
    Contender,
    Result,
    create_topics,
    echo_envelope,
    measure,
    sleep_envelope,
)

SLEEP_S = 0.05
TARGET_P99_MS = 25.0
"""The at-least-once latency target, drawn on the chart."""
EOS_TARGET_P99_MS = 200.0
"""The exactly-once latency target (at half its own rate), drawn on the chart."""

LIBRDKAFKA_LOOP = "librdkafka-loop"

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"


def quix_eos_name(interval_s: float) -> str:
    return f"quix-eos-{interval_s:g}s"


def throughput_pairs(cfg: BenchConfig) -> list[tuple[str, str]]:
    """The throughput ratios reported, numerator first."""
    pairs = [
        ("worker", "aiokafka-loop"),
        ("worker", "quix-streams"),
        ("worker-eos", "worker"),
    ]
    pairs += [("worker-eos", quix_eos_name(s)) for s in cfg.quix_eos_intervals_s]
    # The librdkafka loop is the ceiling every contender is also quoted against.
    against = ["worker", "worker-eos", "aiokafka-loop", "quix-streams"]
    against += [quix_eos_name(s) for s in cfg.quix_eos_intervals_s]
    return pairs + [(name, LIBRDKAFKA_LOOP) for name in against]


def p99_pairs(cfg: BenchConfig) -> list[tuple[str, str]]:
    """The p99 ratios reported, at each rate both sides were paced at."""
    pairs = [("worker", "aiokafka-loop"), ("worker", "quix-streams")]
    pairs += [("worker-eos", quix_eos_name(s)) for s in cfg.quix_eos_intervals_s]
    against = ["worker", "aiokafka-loop", "quix-streams"]
    return pairs + [(name, LIBRDKAFKA_LOOP) for name in against]


@dataclass(frozen=True, slots=True)
class Planned:
    """One contender of a round: what runs, on which backlog, paced with which group."""

    contender: Contender
    backlog: list[bytes]
    pace: str | None = None
    """Contenders of one group are paced at the same rates: fractions of the first one's
    throughput in the first round (the worker, or the worker at exactly once)."""
    distinct_keys: bool = False
    ideal_per_s: float | None = None


def _worker(cfg: BenchConfig, name: str, tag: str, **settings: Any) -> Contender:
    app_id = f"bench-{name}-{tag}"
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


def _module(
    cfg: BenchConfig, name: str, tag: str, module: str, *, extra: dict[str, str] | None = None
) -> Contender:
    prefix = f"bench-{name}-{tag}"
    env = {
        **os.environ,
        "BENCH_BOOTSTRAP": cfg.bootstrap,
        "BENCH_CALLS": f"{prefix}-calls",
        "BENCH_REPLIES": f"{prefix}-replies",
        "BENCH_GROUP": prefix,
        "BENCH_STATE_DIR": str(cfg.out / "data" / prefix),
        "BENCH_LOG": str(cfg.out / f"{name}.log"),
        **(extra or {}),
    }
    return Contender(
        name,
        [sys.executable, "-m", module],
        env,
        f"{prefix}-calls",
        f"{prefix}-replies",
        read_committed=(extra or {}).get("BENCH_GUARANTEE") == EXACTLY_ONCE,
    )


def plan(cfg: BenchConfig, run_id: str, round_no: int, echo: list[bytes]) -> list[Planned]:
    """One round's contenders, in the order every round runs them."""
    tag = f"{run_id}-{round_no}"
    out = [Planned(_worker(cfg, "worker", tag), echo, AT_LEAST_ONCE)]
    if "baseline" not in cfg.skip:
        loop = _module(cfg, "aiokafka-loop", tag, "stream_adapter_dev.bench.baseline")
        out.append(Planned(loop, echo, AT_LEAST_ONCE))
    if LIBRDKAFKA_LOOP not in cfg.skip:
        module = "stream_adapter_dev.bench.librdkafka_loop"
        out.append(Planned(_module(cfg, LIBRDKAFKA_LOOP, tag, module), echo, AT_LEAST_ONCE))
    if "quix" not in cfg.skip:
        quix = _module(cfg, "quix-streams", tag, "stream_adapter_dev.bench.quix")
        out.append(Planned(quix, echo, AT_LEAST_ONCE))
    if "eos" not in cfg.skip:
        eos = _worker(cfg, "worker-eos", tag, processing_guarantee="exactly_once")
        out.append(Planned(eos, echo, EXACTLY_ONCE))
    if "quix" not in cfg.skip and "quix-eos" not in cfg.skip:
        for interval_s in cfg.quix_eos_intervals_s:
            name = quix_eos_name(interval_s)
            extra = {"BENCH_GUARANTEE": EXACTLY_ONCE, "BENCH_COMMIT_INTERVAL_S": str(interval_s)}
            contender = _module(cfg, name, tag, "stream_adapter_dev.bench.quix", extra=extra)
            out.append(Planned(contender, echo, EXACTLY_ONCE))
    if "sleep" not in cfg.skip:
        for limit in (64, 256):
            n = limit * cfg.sleep_calls_per_slot
            out.append(
                Planned(
                    _worker(cfg, f"sleep-{limit}", tag, max_in_flight=limit),
                    [sleep_envelope(i, SLEEP_S) for i in range(n)],
                    distinct_keys=True,
                    ideal_per_s=limit / SLEEP_S,
                )
            )
    return out


Rounds = list[list[Result]]


async def run_bench(cfg: BenchConfig, say: Callable[[str], None] = print) -> Rounds:
    """Run every contender once per round, the rounds one after another; return each
    round's results in the order they ran."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:6]
    echo = [echo_envelope(i) for i in range(cfg.calls)]
    rates: dict[str, list[float]] = {}  # by pacing group, fixed by the first round

    async def one(planned: Planned, round_no: int) -> Result:
        contender = planned.contender
        await create_topics(
            cfg.bootstrap,
            [contender.calls_topic, contender.replies_topic],
            cfg.partitions,
            appended=frozenset({contender.replies_topic}),
        )
        if cfg.settle_s > 0:
            say(f"round {round_no}: {cfg.settle_s:.0f} s idle before {contender.name}")
            await asyncio.sleep(cfg.settle_s)
        say(f"round {round_no}: running {contender.name} ({len(planned.backlog)} calls)")
        group = planned.pace
        paced: Any = ()
        if group is not None:
            paced = rates.get(group) or (lambda per_s: [per_s * f for f in cfg.paced_fractions])
        result = await measure(
            contender,
            cfg.bootstrap,
            planned.backlog,
            distinct_keys=planned.distinct_keys,
            paced_rates=paced,
            paced_s=cfg.paced_s,
            ideal_per_s=planned.ideal_per_s,
        )
        if group is not None and group not in rates:
            rates[group] = [lat.rate for lat in result.latency]
        say(f"  {result.calls_per_s:,.0f} calls/s")
        return result

    # A fresh broker's JVM is cold, for a backlog's big requests and for the paced phase's
    # small ones alike: the first contender would pay for its warm-up.
    warm = _module(cfg, "warm-up", run_id, "stream_adapter_dev.bench.baseline")
    await create_topics(cfg.bootstrap, [warm.calls_topic, warm.replies_topic], cfg.partitions)
    say(f"warming the broker up (the aiokafka loop, a backlog and {cfg.warm_paced_s:.0f} s paced)")
    await measure(
        warm,
        cfg.bootstrap,
        echo,
        paced_rates=lambda r: [r * max(cfg.paced_fractions, default=0.5)],
        paced_s=cfg.warm_paced_s,
    )
    rounds: Rounds = []
    for round_no in range(1, cfg.rounds + 1):
        rounds.append([await one(p, round_no) for p in plan(cfg, run_id, round_no, echo)])
    return rounds


def figures(cfg: BenchConfig, rounds: Rounds) -> dict[str, Any]:
    """The run's summary: medians with min and max over the rounds."""
    return {
        "throughput": summary.throughput(rounds),
        "ratios": summary.ratios(rounds, throughput_pairs(cfg)),
        "latency": summary.latency(rounds),
        "p99_ratios": summary.p99_ratios(rounds, p99_pairs(cfg)),
    }


def _plain(value: Any) -> Any:
    if isinstance(value, summary.Spread | summary.RateSpread):
        return asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write_outputs(cfg: BenchConfig, rounds: Rounds) -> tuple[Path, Path]:
    """bench.json and bench.png in the output folder."""
    data = {
        "rounds": [[r.to_json() for r in one] for one in rounds],
        **_plain(figures(cfg, rounds)),
        "calls": cfg.calls,
        "partitions": cfg.partitions,
        "cpus": os.cpu_count(),
    }
    json_path = cfg.out / "bench.json"
    json_path.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    png_path = cfg.out / "bench.png"
    _chart(rounds, png_path)
    return json_path, png_path


def _chart(rounds: Rounds, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    speed = summary.throughput(rounds)
    names = list(speed)
    medians = [speed[n].median for n in names]
    errors = [
        [speed[n].median - speed[n].low for n in names],
        [speed[n].high - speed[n].median for n in names],
    ]
    left.barh(names, medians, xerr=errors, color="#4c72b0", capsize=3)
    ideals = {r.name: r.ideal_per_s for one in rounds for r in one if r.ideal_per_s}
    for name, ideal in ideals.items():
        left.plot([ideal], [name], marker="|", markersize=18, color="#c44e52")
    left.set_xlabel("calls per second, median of rounds, min-max (red mark: ideal)")
    left.invert_yaxis()
    for name, points in summary.latency(rounds).items():
        right.errorbar(
            [p.rate for p in points],
            [p.p99_ms.median for p in points],
            yerr=[
                [p.p99_ms.median - p.p99_ms.low for p in points],
                [p.p99_ms.high - p.p99_ms.median for p in points],
            ],
            marker="o",
            capsize=3,
            label=name,
        )
    for target in (TARGET_P99_MS, EOS_TARGET_P99_MS):
        right.axhline(target, color="#c44e52", linestyle="--", linewidth=1)
    right.set_yscale("log")
    right.set_xscale("log")
    right.set_xlabel("paced calls/s")
    right.set_ylabel(
        f"p99 call-to-reply ms, median of rounds (dashed: {TARGET_P99_MS:.0f}, "
        f"{EOS_TARGET_P99_MS:.0f} ms)"
    )
    right.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(cfg: BenchConfig, rounds: Rounds, say: Callable[[str], None] = print) -> None:
    """The medians (min-max) as rich tables, then the ratios."""
    from rich.console import Console
    from rich.table import Table

    got = figures(cfg, rounds)
    speed: dict[str, summary.Spread] = got["throughput"]
    curves: dict[str, list[summary.RateSpread]] = got["latency"]
    rss = {r.name: 0.0 for one in rounds for r in one}
    ideal: dict[str, float] = {}
    for one in rounds:
        for r in one:
            rss[r.name] = max(rss[r.name], r.peak_rss_mb)
            if r.ideal_per_s:
                ideal[r.name] = r.ideal_per_s
    table = Table(
        "contender",
        "calls/s",
        "ideal",
        "p50 ms",
        "p99 ms",
        "paced at",
        "peak RSS MB",
        title=f"stream-adapter bench: medians (min-max) of {len(rounds)} interleaved rounds",
    )
    for name, spread in speed.items():
        head = curves[name][-1] if name in curves else None
        table.add_row(
            name,
            spread.show(),
            f"{ideal[name]:,.0f}" if name in ideal else "",
            head.p50_ms.show(".1f") if head else "",
            head.p99_ms.show(".1f") if head else "",
            f"{head.rate:,.0f}/s" if head else "",
            f"{rss[name]:.0f}",
        )
    console = Console(width=140)
    console.print(table)
    if any(len(points) > 1 for points in curves.values()):
        curve = Table(
            "contender", "paced at", "p50 ms", "p99 ms", "max ms", title="latency by rate"
        )
        for name, points in curves.items():
            for p in points:
                curve.add_row(
                    name,
                    f"{p.rate:,.0f}/s",
                    p.p50_ms.show(".1f"),
                    p.p99_ms.show(".1f"),
                    p.max_ms.show(".1f"),
                )
        console.print(curve)
    loads = [r.load_1m for one in rounds for r in one]
    if loads:
        say(f"machine load (1 min) after each backlog: {min(loads):.1f}-{max(loads):.1f}")
    for name, spread in got["ratios"].items():
        say(f"{name}: {spread.show('.2f')}")
    for name, rows in got["p99_ratios"].items():
        shown = "; ".join(f"{spread.show('.2f')} at {rate:,.0f}/s" for rate, spread in rows)
        say(f"p99 {name}: {shown}")
