"""The settings as options: typed, with help, default and environment variable, from `Settings`.

Each field of `Settings` is one option, so names are defined once. The options are accepted
before the command (`stream-adapter --broker HOST:PORT topics describe`) and after it
(`topics describe --broker HOST:PORT`), as the Kafka tools take `--bootstrap-server` on every
command. The options before the command also read the environment (`STREAM_ADAPTER_*`); a
value given on the command line wins over it, and one after the command wins over both.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import update_wrapper
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
import click
from click.core import ParameterSource
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from stream_adapter.commands.exits import ExitCode, validation_text
from stream_adapter.core.errors import ConfigError
from stream_adapter.settings import ENV_PREFIX, Settings

F = TypeVar("F", bound=Callable[..., Any])

EXTRA_ENVVARS: dict[str, tuple[str, ...]] = {"broker": ("KAFKA_BOOTSTRAP_SERVERS",)}
"""Further variables a setting is read from, after its own."""

SECTIONS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("Topics", lambda name: name.endswith("_topic")),
    ("Review service", lambda name: name.startswith(("review", "session_secret", "session_ttl"))),
    ("Logging", lambda name: name.startswith("log_")),
    (
        "Worker",
        lambda name: (
            name.startswith(("topology", "max_in", "processing", "data_dir", "retry"))
            or name.startswith(("session_timeout", "web_", "otel"))
        ),
    ),
    ("Kafka", lambda name: True),
)
"""Headings of the root command's help: the first whose test a setting passes."""


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def envvars(name: str) -> list[str]:
    return [f"{ENV_PREFIX}{name.upper()}", *EXTRA_ENVVARS.get(name, ())]


def section(name: str) -> str:
    return next(title for title, test in SECTIONS if test(name))


@dataclass
class SettingsSource:
    """The settings given so far (environment, options before and after the command)."""

    given: dict[str, Any] = field(default_factory=dict)
    from_env: set[str] = field(default_factory=set)
    _settings: Settings | None = None

    def set(self, name: str, value: Any, *, from_env: bool = False) -> None:
        self.given[name] = value
        (self.from_env.add if from_env else self.from_env.discard)(name)
        self._settings = None

    def is_given(self, name: str) -> bool:
        """Whether the user chose this setting (command line or environment)."""
        return name in self.given

    @property
    def debug(self) -> bool:
        return bool(self.given.get("log_level") == "debug")

    def settings(self) -> Settings:
        """The validated settings; ConfigError (environment) or a usage error (options)."""
        if self._settings is None:
            try:
                self._settings = Settings(**self.given)
            except ValidationError as exc:
                fields = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
                text = f"invalid settings: {validation_text(exc)}"
                if fields and not fields & self.from_env and fields <= set(self.given):
                    raise click.UsageError(text) from None
                raise ConfigError(text) from None
        return self._settings


def source_of(ctx: click.Context) -> SettingsSource:
    found = ctx.find_object(SettingsSource)
    if found is None:  # a command invoked on its own (tests): the environment alone
        found = ctx.ensure_object(SettingsSource)
    return found


def pass_settings(func: F) -> F:
    """Call func with the validated Settings as its first argument."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(source_of(click.get_current_context()).settings(), *args, **kwargs)

    return update_wrapper(wrapper, func)  # type: ignore[return-value]


class BadEnvironment(click.ClickException):
    """A setting's environment variable holds a value its option refuses."""

    exit_code = int(ExitCode.CONFIG)


class SettingOption(click.Option):
    """A settings option; a bad value from the environment is a configuration error."""

    setting: str = ""

    def handle_parse_result(
        self, ctx: click.Context, opts: Any, args: list[str]
    ) -> tuple[Any, list[str]]:
        try:
            return super().handle_parse_result(ctx, opts, args)
        except click.BadParameter as exc:
            if self.name and ctx.get_parameter_source(self.name) is ParameterSource.ENVIRONMENT:
                var = next(v for v in envvars(self.setting) if os.environ.get(v))
                raise BadEnvironment(f"{var}: {exc.message}") from None
            exc.param_hint = f"'{flag(self.setting)}'"  # click would name the variables too
            raise


def option_for(name: str, info: FieldInfo, *, after_command: bool) -> click.Option:
    """The option of one setting; after a command it is hidden and reads no environment."""
    kind, bounds = _annotation(info)
    common: dict[str, Any] = {"help": info.description or "", "metavar": _metavar(name, kind)}
    if after_command:
        common.update(default=None, hidden=True, expose_value=False, callback=_record(name))
        param = f"setting_{name}"
    else:
        # The default is shown, not used: collect() keeps only values the user gave.
        shown = info.default not in ("", None)
        common.update(default=info.default if shown else None, show_default=shown)
        common.update(envvar=envvars(name), show_envvar=True)
        param = name
    if kind is bool:
        decls = [f"{flag(name)}/--no-{flag(name)[2:]}", param]
        option = SettingOption(decls, **{**common, "metavar": None})
    else:
        option = SettingOption([flag(name), param], type=_click_type(kind, bounds), **common)
    option.setting = name
    return option


def settings_params() -> list[click.Parameter]:
    """One option per setting, for the root command."""
    return [option_for(n, i, after_command=False) for n, i in Settings.model_fields.items()]


def collect(ctx: click.Context, options: dict[str, Any]) -> SettingsSource:
    """The root command's settings source from its parsed options."""
    source = SettingsSource()
    for name, value in options.items():
        given = ctx.get_parameter_source(name)
        if value is not None and given in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        ):
            source.set(name, value, from_env=given is ParameterSource.ENVIRONMENT)
    return source


def accept_after(command: click.Command) -> None:
    """Let command (and its subcommands) take the settings options after their name too."""
    if getattr(command, "_settings_after", False):
        return
    taken = {opt for param in command.params for opt in param.opts} | {
        param.name for param in command.params
    }
    for name, info in Settings.model_fields.items():
        if flag(name) not in taken and name not in taken:
            command.params.append(option_for(name, info, after_command=True))
    note = "The global options are accepted here too; they and the exit codes: stream-adapter -h."
    command.epilog = f"{command.epilog}\n\n{note}" if command.epilog else note
    command._settings_after = True  # type: ignore[attr-defined]
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_after(sub)


def _record(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def record(ctx: click.Context, _: click.Parameter, value: Any) -> None:
        if value is not None:
            source_of(ctx).set(name, value)

    return record


def _annotation(info: FieldInfo) -> tuple[Any, dict[str, Any]]:
    """The field's type (Optional unwrapped) and its bounds as click range arguments."""
    kind = info.annotation
    if get_origin(kind) in (Union, types.UnionType):
        args = [a for a in get_args(kind) if a is not type(None)]
        kind = args[0] if len(args) == 1 else str
    bounds: dict[str, Any] = {}
    for meta in info.metadata:
        if isinstance(meta, annotated_types.Ge):
            bounds["min"] = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            bounds.update(min=meta.gt, min_open=True)
        elif isinstance(meta, annotated_types.Le):
            bounds["max"] = meta.le
        elif isinstance(meta, annotated_types.Lt):
            bounds.update(max=meta.lt, max_open=True)
    return kind, bounds


def _click_type(kind: Any, bounds: dict[str, Any]) -> click.ParamType:
    if get_origin(kind) is Literal:
        return click.Choice([str(arg) for arg in get_args(kind)])
    if kind is int and bounds:
        integer = click.IntRange(**bounds)
        integer.name = "integer"  # "'x' is not a valid integer", not "… integer range"
        return integer
    if kind is float and bounds:
        number = click.FloatRange(**bounds)
        number.name = "number"
        return number
    if kind is int:
        return click.INT
    if kind is float:
        return click.FLOAT
    if kind is Path:
        return click.Path(path_type=Path)
    return click.STRING


def _metavar(name: str, kind: Any) -> str | None:
    if get_origin(kind) is Literal:
        return None  # click shows the choices
    if name == "broker":
        return "HOST:PORT[,…]"
    if name.endswith("_topic"):
        return "TOPIC"
    if name.endswith("_port"):
        return "PORT"
    if name.endswith("_host"):
        return "HOST"
    if name.endswith("_s") and kind in (int, float):
        return "SECONDS"
    if name == "topology":
        return "MODULE"
    if kind is Path:
        return "PATH"
    return {int: "N", float: "NUMBER"}.get(kind, "TEXT")
