"""The runtime and the developer tooling are two distributions: the runtime depends on no
test or benchmark tool, and finds the tooling's commands through its entry point."""

from __future__ import annotations

import tomllib

import click
import pytest
from click.testing import CliRunner
from packaging.requirements import Requirement

from stream_adapter import cli
from tests.harness import ROOT

DEV_ONLY = {"cryptography", "quixstreams", "confluent-kafka", "matplotlib", "pytest", "hypothesis"}


def _names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name for r in requirements}


def test_the_runtime_depends_on_no_dev_tool_and_the_tooling_brings_its_own() -> None:
    runtime = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dev = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text())["project"]
    assert _names(runtime["dependencies"]) & DEV_ONLY == set()
    assert {"cryptography", "quixstreams", "confluent-kafka"} <= _names(dev["dependencies"])
    assert "stream-adapter" in _names(dev["dependencies"])


def test_the_tooling_s_commands_come_through_the_entry_point() -> None:
    added = cli.added_commands()
    assert set(added) == set(cli.DEV_TOOLING)
    assert all(lazy.target.startswith("stream_adapter_dev.") for lazy in added.values())
    assert not set(cli.LAZY) & set(cli.DEV_TOOLING)  # the runtime names none of them itself


def test_without_the_tooling_its_commands_say_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cli.cli, "lazy", dict(cli.LAZY))
    monkeypatch.setattr(cli.cli, "added", {})  # looked up, and nothing found
    result = CliRunner().invoke(cli.cli, ["kafka", "start"])
    assert result.exit_code == 2
    assert "install stream-adapter-dev" in result.output
    listed = cli.cli.list_commands(click.Context(cli.cli))
    assert "worker" in listed and not set(listed) & set(cli.DEV_TOOLING)


def test_a_runtime_command_starts_without_reading_every_distribution(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reading all entry points costs about as much as the rest of a start: only a name the
    runtime does not know (or the command list) looks them up."""
    looked_up: list[bool] = []

    def added() -> dict[str, cli.Lazy]:
        looked_up.append(True)
        return {"kafka": cli.Lazy("stream_adapter_dev.kafka:kafka", "A local Kafka.")}

    monkeypatch.setattr(cli, "added_commands", added)
    monkeypatch.setattr(cli.cli, "lazy", dict(cli.LAZY))
    monkeypatch.setattr(cli.cli, "added", None)
    ctx = click.Context(cli.cli)
    assert cli.cli.get_command(ctx, "topics") is not None
    assert cli.cli.get_command(ctx, "dlq") is not None
    assert looked_up == []
    assert cli.cli.get_command(ctx, "kafka") is not None
    assert cli.cli.get_command(ctx, "nothing") is None
    assert looked_up == [True]
