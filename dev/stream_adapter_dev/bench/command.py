"""`stream-adapter bench`: run the benchmark (its steps on stderr), then print, write and draw
its figures and end with a summary."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import click

from stream_adapter.commands import note, source_of
from stream_adapter.settings import Settings
from stream_adapter_dev.bench.config import BenchConfig, default


@click.command("bench")
@click.option(
    "--calls",
    type=int,
    default=default("calls"),
    show_default=True,
    help="Pre-produced echo envelopes per contender.",
)
@click.option("--partitions", type=int, default=default("partitions"), show_default=True)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=default("out"),
    show_default=True,
    help="Folder for bench.json, bench.png and logs.",
)
@click.option(
    "--skip",
    multiple=True,
    type=click.Choice(["baseline", "librdkafka-loop", "eos", "quix", "quix-eos", "sleep"]),
    help="Leave a contender out (repeatable; baseline: the aiokafka loop; quix-eos: Quix "
    "Streams exactly once only).",
)
@click.option(
    "--rounds",
    type=click.IntRange(1),
    default=default("rounds"),
    show_default=True,
    help="Interleaved rounds: every contender once per round; figures are medians.",
)
@click.option(
    "--paced-s",
    type=float,
    default=default("paced_s"),
    show_default=True,
    help="Length of each latency run.",
)
@click.option(
    "--paced-fraction",
    "paced_fractions",
    type=click.FloatRange(0.01, 1.0),
    multiple=True,
    default=default("paced_fractions"),
    show_default=True,
    help="Latency runs produce at these fractions of the worker's measured throughput "
    "(repeatable; the highest is the table's headline).",
)
@click.option(
    "--warm-paced-s",
    type=float,
    default=default("warm_paced_s"),
    show_default=True,
    help="Paced part of the uncounted warm-up, so the broker is warm for small requests too.",
)
@click.option(
    "--settle-s",
    type=click.FloatRange(0.0),
    default=default("settle_s"),
    show_default=True,
    help="Idle time before each contender, so none inherits the one before's after-effects.",
)
@click.option(
    "--own-broker/--configured-broker",
    default=None,
    help="A fresh local broker for the run, or the settings' broker "
    "(default: the settings' broker when --broker or its variable names one).",
)
@click.option(
    "--scale-out",
    is_flag=True,
    help="Instead: 1, 2 and 3 workers on a three-node cluster (throughput, CPU per call, "
    "join pauses; dev/stream_adapter_dev/bench/scale.py). Try --calls 20000.",
)
@click.option(
    "--state",
    "state_sizes",
    type=click.IntRange(1),
    multiple=True,
    help="Instead: N parked approvals (repeatable, e.g. 10000 100000 1000000); time a fresh "
    "worker's first answers and a two-worker failover, with RSS and disk "
    "(dev/stream_adapter_dev/bench/state.py). --rounds interleaves the sizes.",
)
@click.option(
    "--state-guarantee",
    "state_guarantees",
    type=click.Choice(["at_least_once", "exactly_once"]),
    multiple=True,
    help="Processing guarantee of the --state workers (repeatable; default at_least_once).",
)
@click.pass_context
def bench(
    ctx: click.Context,
    calls: int,
    partitions: int,
    out: Path,
    skip: tuple[str, ...],
    rounds: int,
    paced_s: float,
    paced_fractions: tuple[float, ...],
    warm_paced_s: float,
    settle_s: float,
    own_broker: bool | None,
    scale_out: bool,
    state_sizes: tuple[int, ...],
    state_guarantees: tuple[str, ...],
) -> None:
    """Measure the worker side by side with an aiokafka loop and Quix Streams apps.

    The same loop on librdkafka runs too, the ceiling every ratio is also quoted against.

    Every contender runs once per round, the rounds interleaved; figures are medians."""
    from stream_adapter_dev.bench import summary
    from stream_adapter_dev.bench.run import print_table, run_bench, write_outputs
    from stream_adapter_dev.broker import local

    source = source_of(ctx)
    settings: Settings = source.settings()
    if own_broker is None:
        own_broker = not source.is_given("broker")
    started = time.monotonic()

    def step(text: str) -> None:
        minutes, seconds = divmod(int(time.monotonic() - started), 60)
        note(f"[{minutes:02d}:{seconds:02d}] {text}")

    if scale_out:
        from stream_adapter_dev.bench.scale import scale_out_command

        scale_out_command(
            settings.bootstrap_servers,
            calls=calls,
            partitions=partitions,
            out=out,
            own_broker=own_broker,
            jars_dir=Path(".kafka/libs"),
            say=step,
            table=click.echo,
        )
        return

    if state_sizes:
        from stream_adapter_dev.bench.state import state_command

        state_command(
            settings.bootstrap_servers,
            sizes=state_sizes,
            guarantees=state_guarantees or ("at_least_once",),
            rounds=rounds,
            out=out,
            own_broker=own_broker,
            jars_dir=Path(".kafka/libs"),
            say=step,
            table=click.echo,
        )
        return

    with tempfile.TemporaryDirectory(prefix="sa-bench-") as home:
        config = None
        bootstrap = settings.bootstrap_servers
        if own_broker:
            config = local.BrokerConfig(
                home=Path(home),
                port=local.free_port(),
                controller_port=local.free_port(),
                heap_mb=1024,
                # C1 only: on two cores, C2 compiling the broker's hot paths took more CPU
                # than any request thread for minutes, and the first contender measured
                # paid for it in latency (docs/bench.md).
                jvm_flags=("-XX:TieredStopAtLevel=1",),
                jars_dir=Path(".kafka/libs"),
            )
            step(f"starting a local broker on {config.bootstrap}")
            bootstrap = local.start(config)
        else:
            step(f"using the broker at {bootstrap}")
        try:
            cfg = BenchConfig(
                bootstrap=bootstrap,
                calls=calls,
                partitions=partitions,
                out=out,
                skip=frozenset(skip),
                rounds=rounds,
                paced_s=paced_s,
                paced_fractions=paced_fractions,
                warm_paced_s=warm_paced_s,
                settle_s=settle_s,
            )
            results = asyncio.run(run_bench(cfg, say=step))
        finally:
            if config is not None:
                local.stop(config)
    print_table(cfg, results, say=click.echo)
    json_path, png_path = write_outputs(cfg, results)
    minutes = (time.monotonic() - started) / 60
    speed = summary.throughput(results)
    curves = summary.latency(results)
    worker = speed.get("worker")
    headline = curves["worker"][-1] if "worker" in curves else None
    figure = (
        f"worker {worker.median:,.0f} calls/s"
        + (f", p99 {headline.p99_ms.median:.1f} ms at {headline.rate:,.0f}/s" if headline else "")
        if worker is not None
        else "no worker figure"
    )
    click.echo(
        f"bench done: {len(speed)} contender(s), {len(results)} round(s) in {minutes:.1f} min; "
        f"medians: {figure}; "
        f"wrote {json_path} and {png_path}"
    )
