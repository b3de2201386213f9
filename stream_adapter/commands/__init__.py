"""What every `stream-adapter` command shares: exit codes and error lines, the settings as
typed options, output for people and for scripts, and lazily imported commands."""

from stream_adapter.commands.exits import ExitCode
from stream_adapter.commands.lazy import Lazy, LazyGroup
from stream_adapter.commands.options import SettingsSource, pass_settings, source_of
from stream_adapter.commands.output import Column, emit, emit_one, note
from stream_adapter.commands.runs import run_client
from stream_adapter.core.errors import ConfigError, NotPending, TopicMissing

__all__ = [
    "Column",
    "ConfigError",
    "ExitCode",
    "Lazy",
    "LazyGroup",
    "NotPending",
    "SettingsSource",
    "TopicMissing",
    "emit",
    "emit_one",
    "note",
    "pass_settings",
    "run_client",
    "source_of",
]
