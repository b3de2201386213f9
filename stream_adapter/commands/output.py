"""How read commands print rows: a table on a terminal, tab-separated lines in a pipe, JSON lines.

Ids and names are never cut or wrapped: a table that cannot fit them is printed wider than
the terminal (which wraps the line, but not the id), so any id can be copied and pasted
into the next command. Remarks (counts, hints) go to stderr, so stdout stays data only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import click
import orjson


@dataclass(frozen=True, slots=True)
class Column:
    """One column: the row key it shows and how."""

    key: str
    whole: bool = False
    """An id or name: printed in full, on one line."""
    first_line: bool = False
    """Prose: only its first line in a table or TSV (JSON has all of it)."""

    def cell(self, row: Mapping[str, Any]) -> str:
        text = plain(row.get(self.key), keep_lines=self.first_line)
        return text.split("\n", 1)[0] if self.first_line else text


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def emit(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, as_json: bool) -> None:
    """Print rows: JSON lines (every key, typed) with as_json, else a table or TSV."""
    if as_json:
        for row in rows:
            click.echo(orjson.dumps(row, default=str).decode())
    elif stdout_is_terminal():
        _table(rows, columns)
    else:
        click.echo("\t".join(c.key for c in columns))
        for row in rows:
            click.echo("\t".join(c.cell(row) for c in columns))


def emit_one(row: Mapping[str, Any], *, as_json: bool) -> None:
    """Print one record: a JSON object with as_json, else `key<TAB>value` lines."""
    if as_json:
        click.echo(orjson.dumps(row, default=str).decode())
        return
    for key, value in row.items():
        click.echo(f"{key}\t{plain(value)}")


def plain(value: Any, *, keep_lines: bool = False) -> str:
    """A cell as text: empty for None, true/false for booleans, one line (unless keep_lines)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    text = str(value).replace("\t", " ").replace("\r", " ")
    return text if keep_lines else text.replace("\n", " ")


def note(text: str) -> None:
    """A remark for the person at the terminal (stderr: never mixed into the data)."""
    click.echo(text, err=True)


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> None:
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column.key, no_wrap=column.whole, overflow="fold")
    for row in rows:
        table.add_row(*(Text(c.cell(row)) for c in columns))
    terminal = Console().width
    wide = Console(width=100_000)
    needed = Measurement.get(wide, wide.options, table).minimum
    Console(width=max(terminal, needed), highlight=False).print(table)
