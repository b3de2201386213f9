"""The `stream-adapter` command: topics, the worker, tools and operator commands.

Every setting is also an option (stream_adapter/commands/options.py), accepted before and
after the command. Commands in `LAZY` are imported only when they run, so `-h` stays quick;
the developer tooling (a local broker, bench, chaos) adds its own through an entry point.
Failures print one `Error:` line and exit with the code of their kind (commands/exits.py).
"""

from __future__ import annotations

import asyncio
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
    "call": Lazy(
        "stream_adapter.ops.commands:call",
        "Produce one call of TOOL and print each reply as a JSON line.",
    ),
    "dlq": Lazy(
        "stream_adapter.ops.commands:dlq",
        "Dead letters: list them, replay them as the same calls.",
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

DEV_TOOLING = ("bench", "chaos", "fuzz", "kafka")
"""Commands of the developer tooling (`stream-adapter-dev`, dev/ in the repository)."""


def added_commands() -> dict[str, Lazy]:
    """Commands other distributions add through the `stream_adapter.commands` entry point: a
    mapping of names to `Lazy` commands (the developer tooling's `kafka`, `bench`, ...)."""
    from importlib.metadata import entry_points

    found: dict[str, Lazy] = {}
    for point in entry_points(group="stream_adapter.commands"):
        commands = point.load()
        found.update({name: lazy for name, lazy in commands.items() if name not in LAZY})
    return found


class Root(LazyGroup):
    """The root group: settings options in sections; any failure as one line and its code."""

    added: dict[str, Lazy] | None = None
    """The commands other distributions add, once looked up: only for a name the runtime does
    not know, or the command list, since reading every distribution's entry points costs about
    as much as the rest of a command's start."""

    def _add_others(self) -> None:
        if self.added is None:
            self.added = added_commands()
            self.lazy.update(self.added)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._add_others()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and self.added is None:
            self._add_others()
            command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in DEV_TOOLING:
            raise click.UsageError(
                f"`{cmd_name}` is developer tooling: install stream-adapter-dev "
                "(`pip install -e ./dev` in a clone of the repository)"
            )
        return command

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
    from stream_adapter.kafka.codecs import check_codecs
    from stream_adapter.kafka.topic import reachable
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

        from stream_adapter.core.frameworks import Format, tool_definitions

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
