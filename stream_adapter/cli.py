"""The `stream-adapter` command: a local broker, topics, the worker, tools and operator commands.

Every setting is also an option (stream_adapter/commands/options.py), accepted before and
after the command. Commands in `LAZY` are imported only when they run, so `-h` stays quick.
Failures print one `Error:` line and exit with the code of their kind (commands/exits.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import click

from stream_adapter.commands import (
    Column,
    ConfigError,
    ExitCode,
    Lazy,
    LazyGroup,
    SettingsSource,
    emit,
    emit_one,
    exits,
    note,
    pass_settings,
    run_client,
)
from stream_adapter.commands.options import (
    accept_after,
    collect,
    section,
    settings_params,
)
from stream_adapter.settings import Settings

F = TypeVar("F")

LAZY = {
    "acls": Lazy(
        "stream_adapter.ops.commands:acls",
        "Print the least-privilege ACLs of this deployment as `kafka-acls.sh` commands.",
    ),
    "approvals": Lazy(
        "stream_adapter.review.commands:approvals",
        "Approvals for operators: list them, approve or deny one, resolve an unknown outcome.",
    ),
    "bench": Lazy(
        "stream_adapter.bench.command:bench",
        "Measure the worker side by side with an aiokafka loop and Quix Streams apps.",
    ),
    "call": Lazy(
        "stream_adapter.ops.commands:call",
        "Produce one call of TOOL and print each reply as a JSON line.",
    ),
    "chaos": Lazy(
        "stream_adapter.chaos.commands:chaos",
        "Calls under SIGKILLs, broker faults and scaling; exit 1 unless nothing was lost.",
    ),
    "dlq": Lazy(
        "stream_adapter.ops.commands:dlq",
        "Dead letters: list them, replay them as the same calls.",
    ),
    "fuzz": Lazy(
        "stream_adapter.chaos.commands:fuzz",
        "Malformed calls and decisions among valid ones; exit 1 unless each got its answer.",
    ),
    "mcp": Lazy(
        "stream_adapter.ops.mcp:mcp",
        "Serve the topology's tools to MCP clients; each call goes to the worker over Kafka.",
    ),
    "review": Lazy(
        "stream_adapter.review.commands:review",
        "Run the review web service (page and JSON API) until SIGTERM or Ctrl-C.",
    ),
    "reviewers": Lazy(
        "stream_adapter.review.commands:reviewers",
        "The reviewers file (names and hashed tokens).",
    ),
}
"""Commands imported when they run: where each lives, and its help's first line."""


class Root(LazyGroup):
    """The root group: settings options in sections; any failure as one line and its code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, BrokenPipeError):
            raise  # click prints these (a closed pipe: quietly)
        except (Exception, KeyboardInterrupt, asyncio.CancelledError) as exc:
            source = ctx.find_object(SettingsSource) or SettingsSource()
            raise exits.fail(exc, broker=_bootstrap(source), debug=source.debug) from None

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            setting = getattr(param, "setting", "")
            title = f"Settings: {section(setting)}" if setting else "Options"
            sections.setdefault(title, []).append(record)
        for title, records in sections.items():
            with formatter.section(title):
                formatter.write_dl(records)
        self.format_commands(ctx, formatter)


def _bootstrap(source: SettingsSource) -> str:
    try:
        return source.settings().bootstrap_servers
    except Exception:
        return ""


@click.group(
    cls=Root,
    lazy=LAZY,
    prepare=accept_after,
    params=settings_params(),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=exits.epilog(),
)
@click.version_option(package_name="stream-adapter", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, /, **options: Any) -> None:
    """Run AI-agent tool calls from Kafka.

    Settings come from these options (before or after the command), else from their
    environment variables, else their defaults.
    """
    ctx.obj = collect(ctx, options)


# -- kafka ------------------------------------------------------------------------------------


@cli.group()
def kafka() -> None:
    """A local Apache Kafka (KRaft) for development and tests: one broker, or a cluster."""


def _broker_options(func: Any) -> Any:
    func = click.option(
        "--home",
        type=click.Path(path_type=Path),
        default=Path(".kafka"),
        show_default=True,
        help="Folder for jars, data and logs (a cluster's nodes under HOME/cluster/).",
    )(func)
    func = click.option(
        "--jars-dir",
        type=click.Path(path_type=Path),
        default=None,
        help="Where the jars are cached (default: HOME/libs).",
    )(func)
    func = click.option(
        "--port",
        type=click.IntRange(1, 65535),
        default=9092,
        show_default=True,
        help="The broker's port on 127.0.0.1 (its controller uses the next one); a cluster's "
        "nodes use PORT, PORT+2, … and the port above each for its controller.",
    )(func)
    func = click.option(
        "--secure",
        is_flag=True,
        help="SASL_SSL (SCRAM users, a CA made for the broker), mTLS on PORT+2, and ACLs.",
    )(func)
    func = click.option(
        "--brokers",
        type=click.IntRange(1, 5),
        default=1,
        show_default=True,
        help="1: a single broker; 3: a cluster replicating every topic 3 ways, min ISR 2.",
    )(func)
    return click.option(
        "--heap-mb",
        type=click.IntRange(128),
        default=None,
        help="The JVM's maximum heap per broker (default: 768 for one broker, 384 per node "
        "of a cluster).",
    )(func)


def _broker_config(
    home: Path,
    port: int,
    heap_mb: int | None,
    jars_dir: Path | None,
    secure: bool = False,
    brokers: int = 1,
) -> Any:
    """A local.BrokerConfig for one broker, a cluster.ClusterConfig for more."""
    from stream_adapter.broker import cluster, local

    if secure and brokers > 1:
        raise click.UsageError("--secure runs a single broker: leave out --brokers")
    if secure:
        return _secure_broker(home, port, heap_mb or 768, jars_dir).config()
    if brokers == 1:
        return local.BrokerConfig(home=home, port=port, heap_mb=heap_mb or 768, jars_dir=jars_dir)
    return cluster.ClusterConfig.from_port(
        home, port, brokers, heap_mb=heap_mb or cluster.HEAP_MB, jars_dir=jars_dir
    )


def _driver(config: Any) -> Any:
    """The module that starts, stops and reports on config's kind of broker."""
    from stream_adapter.broker import cluster, local

    return cluster if isinstance(config, cluster.ClusterConfig) else local


def _secure_broker(home: Path, port: int, heap_mb: int, jars_dir: Path | None) -> Any:
    from stream_adapter.broker import secure

    return secure.SecureBroker(home=home, port=port, heap_mb=heap_mb, jars_dir=jars_dir)


@kafka.command("start")
@_broker_options
def kafka_start(
    home: Path, port: int, heap_mb: int | None, jars_dir: Path | None, secure: bool, brokers: int
) -> None:
    """Start the broker or cluster (fetching jars and formatting storage on first use)."""
    from stream_adapter.broker import local

    config = _broker_config(home, port, heap_mb, jars_dir, secure, brokers)
    if secure:
        from stream_adapter.broker.secure import start as start_secure

        broker = _secure_broker(home, port, heap_mb or 768, jars_dir)
        note(f"starting a secured Kafka {local.KAFKA_VERSION} on {broker.bootstrap} (home {home})")
        click.echo(start_secure(broker))
        creds = broker.secure_dir / "credentials.json"
        note(f"SASL_SSL {broker.bootstrap} (SCRAM-SHA-256/512, PLAIN)")
        note(f"SSL with client certificates {broker.mtls_bootstrap}")
        note(f"CA: {broker.ca_file}; passwords: {creds}")
        note("users: admin (super user), agents, adapter, review; ACLs as in docs/operations.md")
        return
    note(f"starting Kafka {local.KAFKA_VERSION} on {config.bootstrap} (home {home})")
    click.echo(_driver(config).start(config))


@kafka.command("stop")
@_broker_options
@click.option("--kill", is_flag=True, help="SIGKILL instead of a clean stop.")
def kafka_stop(
    home: Path,
    port: int,
    heap_mb: int | None,
    jars_dir: Path | None,
    secure: bool,
    brokers: int,
    kill: bool,
) -> None:
    """Stop the broker or cluster started from HOME; its data stays for the next start."""
    config = _broker_config(home, port, heap_mb, jars_dir, secure, brokers)
    stopped = _driver(config).stop(config, kill=kill)
    click.echo("stopped" if stopped else f"not running (no broker started from {home})")


@kafka.command("status")
@_broker_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def kafka_status(
    home: Path,
    port: int,
    heap_mb: int | None,
    jars_dir: Path | None,
    secure: bool,
    brokers: int,
    as_json: bool,
) -> None:
    """Say whether a broker answers on --port (from any folder), and if HOME started it;
    with --brokers 3, each node and the brokers the cluster has registered.

    Exit 0 when a broker answers (with --brokers 3: every node, all registered), 7 when not.
    """
    from stream_adapter.broker import cluster, local

    config = _broker_config(home, port, heap_mb, jars_dir, secure, brokers)
    if brokers > 1:
        if not _cluster_status(cluster.status(config), home, as_json):
            raise click.exceptions.Exit(int(ExitCode.BROKER))
        return
    state = local.status(config)
    if as_json:
        row = {"bootstrap": state.bootstrap, "answers": state.answers, "pid": state.pid}
        emit_one({**row, "home": str(home)}, as_json=True)
    else:
        click.echo(_node_words(state, home))
    if not state.answers:
        raise click.exceptions.Exit(int(ExitCode.BROKER))


def _node_words(state: Any, home: Path) -> str:
    if state.pid is not None:
        word = "answers" if state.answers else "does not answer"
        return f"running (pid {state.pid}, home {home}) on {state.bootstrap}, {word}"
    if state.answers:
        return f"a broker answers on {state.bootstrap} (not started from {home})"
    return f"no broker answers on {state.bootstrap}"


def _cluster_status(states: Any, home: Path, as_json: bool) -> bool:
    """Print each node and the registered brokers; True when the cluster is healthy."""
    if as_json:
        nodes = [
            {"node": n, "bootstrap": s.bootstrap, "answers": s.answers, "pid": s.pid}
            for n, s in states.nodes
        ]
        row = {"nodes": nodes, "registered": states.registered, "home": str(home)}
        emit_one({**row, "healthy": states.healthy}, as_json=True)
    else:
        for node_id, state in states.nodes:
            click.echo(f"node {node_id}: {_node_words(state, home)}")
        registered = ", ".join(str(n) for n in states.registered) or "none"
        click.echo(f"registered brokers: {registered}")
    return bool(states.healthy)


# -- topics -----------------------------------------------------------------------------------


@cli.group()
def topics() -> None:
    """The topology's topics."""


TOPIC_COLUMNS = (
    Column("topic", whole=True),
    Column("role"),
    Column("partitions"),
    Column("config"),
    Column("state"),
)


def _topics(states: list[Any], as_json: bool) -> None:
    """Print the topics; exit 6 when one is missing or differs from its spec."""
    rows = [
        {
            "topic": s.spec.name,
            "role": s.spec.role,
            "partitions": s.partitions,
            "wanted_partitions": s.spec.partitions,
            "config": ", ".join(f"{k}={v}" for k, v in s.spec.config.items()),
            "state": "; ".join((["created"] if s.created else []) + s.problems + list(s.warnings))
            or "ok",
            "drift": s.problems,
            "warnings": list(s.warnings),
        }
        for s in states
    ]
    emit(rows, TOPIC_COLUMNS, as_json=as_json)
    for row in rows:
        for warning in row["warnings"]:
            note(f"warning: {row['topic']}: {warning}")
    drifted = [row["topic"] for row in rows if row["drift"]]
    if drifted:
        note(f"{len(drifted)} topic(s) missing or not as specified: {', '.join(drifted)}")
        raise click.exceptions.Exit(int(ExitCode.TOPICS))


_json_option = click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")


@topics.command("create")
@_json_option
@pass_settings
def topics_create(settings: Settings, as_json: bool) -> None:
    """Create missing topics (idempotent); exit 6 when an existing one has drifted."""
    from stream_adapter.stream.topics import create_topics

    _topics(run_client(create_topics(settings)), as_json)


@topics.command("describe")
@_json_option
@pass_settings
def topics_describe(settings: Settings, as_json: bool) -> None:
    """Show the topics as the broker has them; exit 6 on drift, a missing topic or an
    under-replicated partition."""
    from stream_adapter.stream.topics import describe_topics

    _topics(run_client(describe_topics(settings)), as_json)


# -- worker and tools ---------------------------------------------------------------------------


def load_topology(settings: Settings) -> ModuleType:
    """Import the settings' topology module (which reads the settings from the environment).

    The one loader of `worker`, `tools` and `mcp`: a topology that cannot be imported is a
    configuration fault, ConfigError (exit 8), never a broker one.
    """
    import importlib

    settings.export()  # secrets stay out of os.environ, where tools would inherit them
    try:
        return importlib.import_module(settings.topology)
    except ImportError as exc:
        raise ConfigError(f"cannot import topology {settings.topology!r}: {exc}") from None


@cli.command()
@pass_settings
def worker(settings: Settings) -> None:
    """Run the Faust worker of the configured topology until SIGTERM or Ctrl-C.

    Exit 8 when a codec or the topology cannot be loaded, 7 when the broker does not answer
    at start, 9 when it refuses the credentials, 10 on a TLS failure.
    """
    from stream_adapter.codecs import check_codecs
    from stream_adapter.ops.topic import reachable
    from stream_adapter.stream.worker import run_worker

    check_codecs()  # before the topology's imports: the install as it is
    app = getattr(load_topology(settings), "app", None)
    if app is None:
        raise ConfigError(f"topology {settings.topology!r} has no `app`")
    run_client(reachable(settings))  # credentials and TLS: each failure one line, its own code
    run_worker(settings, app)


TOOL_COLUMNS = (
    Column("tool", whole=True),
    Column("confirm"),
    Column("idempotent"),
    Column("timeout_s"),
    Column("retry"),
    Column("arguments"),
    Column("description", first_line=True),
)


@cli.command()
@_json_option
@click.option(
    "--format",
    "framework",
    type=click.Choice(["openai", "anthropic", "mcp"]),
    help="Print the tool definitions an agent framework takes (JSON), instead of the table.",
)
@pass_settings
def tools(settings: Settings, as_json: bool, framework: str | None) -> None:
    """List the topology's tools: description, arguments, confirm, timeout and retries.

    --json gives each argument's JSON schema; --format openai|anthropic|mcp prints the
    framework's own tool definitions.
    """
    from stream_adapter.commands.tools import describe_tools, topology_tools

    if framework is not None:
        import json

        from stream_adapter.frameworks import Format, tool_definitions

        kind: Format = framework  # type: ignore[assignment]  # click.Choice checked it
        definitions = tool_definitions(topology_tools(load_topology(settings)), kind)
        click.echo(json.dumps(definitions, indent=2, ensure_ascii=False))
        return
    rows = describe_tools(load_topology(settings), settings)
    emit(rows, TOOL_COLUMNS, as_json=as_json)
    note(f"{len(rows)} tool(s) in {settings.topology}")


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="stream-adapter")
