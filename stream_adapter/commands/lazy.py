"""A click group whose commands are imported only when one of them runs (or shows its help).

`stream-adapter -h` then imports neither the dev tooling (bench, chaos, the local broker) nor
the Kafka clients: each command's one-line help is kept beside its import path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click


@dataclass(frozen=True, slots=True)
class Lazy:
    """A command still to import: `module:attribute`, and its one-line help."""

    target: str
    short_help: str

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is not a click command")
        return command


def first_line(command: click.Command) -> str:
    """The command's one-line help: its short_help, else its help's first line, uncut."""
    if command.short_help:
        return command.short_help
    lines = (command.help or "").strip().splitlines()
    return lines[0].strip() if lines else ""


class LazyGroup(click.Group):
    """A group of eager commands and lazy ones; `prepare` runs on each command once found."""

    def __init__(
        self,
        *args: Any,
        lazy: Mapping[str, Lazy] | None = None,
        prepare: Callable[[click.Command], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.prepare = prepare

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in self.lazy:
            command = self.lazy[cmd_name].load()
            self.add_command(command, cmd_name)
        if command is not None and self.prepare is not None:
            self.prepare(command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list, with lazy commands' help from the registry (nothing imported)."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                command = self.commands[name]
                if not command.hidden:
                    rows.append((name, first_line(command)))
            else:
                rows.append((name, self.lazy[name].short_help))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
