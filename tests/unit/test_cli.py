"""`stream-adapter` as a user meets it before any broker is involved: help, options, errors,
exit codes, the tools list, output formats, and what `-h` imports.

Every test runs the real command in a subprocess (tests/cli_support.py).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from stream_adapter.cli import LAZY
from stream_adapter.commands.exits import ExitCode
from stream_adapter.commands.lazy import first_line
from stream_adapter.settings import Settings
from stream_adapter_dev.broker.local import free_port
from stream_adapter_dev.progress import live_status
from tests.cli_support import clean_env, run
from tests.harness import ROOT

NOISE = ("Traceback", "Unclosed", "pydantic", "validation error")


def one_error_line(err: str) -> str:
    """The one line a failed command wrote to stderr (nothing else there)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert not any(word in err for word in NOISE), err
    return lines[0]


def test_help_shows_every_setting_typed_with_default_and_variable() -> None:
    ran = run("-h")
    assert ran.code == 0, ran.err
    text = re.sub(r"\s+", " ", ran.out)
    for name, info in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        assert info.description, f"{name} has no description"
        assert flag in text
        assert f"STREAM_ADAPTER_{name.upper()}" in text
        assert f"({name})" not in text  # no placeholder help
    assert "--partitions N Partitions of every topic created." in text
    assert "default: 8; x>=1" in text
    assert "--web-port PORT" in text and "0<=x<=65535" in text
    assert "STREAM_ADAPTER_BROKER, KAFKA_BOOTSTRAP_SERVERS" in text
    assert "--processing-guarantee [at_least_once|exactly_once]" in text
    assert "TEXT (broker)" not in text
    for code in ExitCode:  # the exit-code table is in the epilog
        assert f"{int(code)} {code.meaning}" in text


def test_version() -> None:
    ran = run("--version")
    assert ran.code == 0 and re.fullmatch(r"stream-adapter \d+\.\d+\.\d+\S*\n", ran.out), ran


def test_bad_values_are_one_clear_line() -> None:
    on_line = run("--partitions", "x", "tools")
    assert on_line.code == ExitCode.USAGE
    assert "Error: Invalid value for '--partitions': 'x' is not a valid integer." in on_line.err
    assert not any(word in on_line.err for word in NOISE), on_line.err

    after = run("tools", "--web-port", "70000")
    assert after.code == ExitCode.USAGE
    assert "Invalid value for '--web-port': 70000 is not in the range 0<=x<=65535" in after.err

    from_env = run("tools", env=clean_env(STREAM_ADAPTER_PARTITIONS="x"))
    assert from_env.code == ExitCode.CONFIG
    assert one_error_line(from_env.err) == (
        "Error: STREAM_ADAPTER_PARTITIONS: 'x' is not a valid integer."
    )
    level = run("tools", env=clean_env(STREAM_ADAPTER_LOG_LEVEL="loud"))
    assert level.code == ExitCode.CONFIG and "STREAM_ADAPTER_LOG_LEVEL" in level.err


def test_settings_are_accepted_after_the_command_and_win(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    env = clean_env(STREAM_ADAPTER_REVIEWERS_FILE=str(tmp_path / "env.json"))
    added = run("reviewers", "add", "ann", "--token-only", "--reviewers-file", str(after), env=env)
    assert added.code == 0, added.err
    assert after.exists() and not (tmp_path / "env.json").exists()
    # Before the command, after it: the one after wins.
    both = run("--reviewers-file", str(before), "reviewers", "list", "--reviewers-file", str(after))
    assert both.code == 0, both.err
    assert [row["name"] for row in both.tsv()] == ["ann"]
    listed = run("reviewers", "list", "--json", env=clean_env(), cwd=tmp_path)
    assert listed.code == 0 and listed.json_lines() == []  # ./reviewers.json: none
    # Each subcommand names the global options in its help.
    assert "global options" in run("topics", "describe", "-h").out


def test_unknown_reviewer_exits_5(tmp_path: Path) -> None:
    ran = run("reviewers", "remove", "bob", "--reviewers-file", str(tmp_path / "r.json"))
    assert ran.code == ExitCode.NOT_PENDING
    assert one_error_line(ran.err).startswith("Error (NotPending): no reviewer 'bob'")


def test_tools_lists_the_topology_tools() -> None:
    ran = run("tools", "--json")
    assert ran.code == 0, ran.err
    tools = {row["tool"]: row for row in ran.json_lines()}
    assert set(tools) == {"echo", "add", "sleep", "flaky", "boom", "send_invoice", "wire_funds"}
    add = tools["add"]
    assert add["description"] == "a + b; non-integers are a 422."
    assert add["arguments_schema"]["properties"] == {
        "a": {"type": "integer"},
        "b": {"type": "integer"},
    }
    assert add["arguments_schema"]["required"] == ["a", "b"]
    assert add["confirm"] is False and add["timeout_s"] is None and add["retry_on"] == []
    assert tools["send_invoice"]["confirm"] is True and tools["send_invoice"]["idempotent"] is True
    assert tools["wire_funds"]["confirm"] is True and tools["wire_funds"]["idempotent"] is False
    assert tools["sleep"]["timeout_s"] == 2.0 and tools["sleep"]["retry_on"] == ["ToolTimeout"]
    assert tools["flaky"]["retry_on"] == ["FlakyError"]
    assert tools["flaky"]["retry_attempts"] == 3 and tools["flaky"]["retry_backoff_s"] == 0.2
    assert tools["echo"]["arguments_schema"]["additionalProperties"] is True
    assert "admin_reset" not in tools  # registered, but outside the allow-list

    table = run("tools", "--retry-attempts", "5")
    assert table.code == 0, table.err
    rows = {row["tool"]: row for row in table.tsv()}
    assert rows["flaky"]["retry"] == "5 attempts on FlakyError"
    assert rows["add"]["arguments"] == "a: integer, b: integer"
    assert "7 tool(s) in topologies.demo" in table.err

    own = run("tools", "--topology", "tests.topologies.busy", "--json")
    assert [row["tool"] for row in own.json_lines()] == ["spin"], own.err


@pytest.mark.parametrize("command", ["tools", "worker"])
def test_a_topology_that_cannot_load_is_a_config_error(command: str) -> None:
    ran = run(command, "--topology", "no.such.module")
    assert ran.code == ExitCode.CONFIG
    line = one_error_line(ran.err)
    assert line.startswith("Error (ConfigError): cannot import topology 'no.such.module'")


def test_a_topology_without_an_app_is_a_config_error_not_a_broker_one() -> None:
    """The worker refuses a topology it cannot run before it asks any broker (none listens)."""
    nobody = f"127.0.0.1:{free_port()}"
    ran = run("worker", "--topology", "tests.topologies", "--broker", nobody)
    assert ran.code == ExitCode.CONFIG, ran
    line = one_error_line(ran.err)
    assert line == "Error (ConfigError): topology 'tests.topologies' has no `app`", line


@pytest.mark.parametrize(
    "command",
    [
        ("call", "add", '{"a": 1, "b": 2}'),
        ("dlq", "list"),
        ("dlq", "replay"),
        ("approvals", "list"),
        ("approvals", "decide", "appr_x", "--approve", "--reviewer", "ann"),
        ("topics", "describe"),
        ("topics", "create"),
        ("worker",),
    ],
)
def test_an_unreachable_broker_is_one_line_and_exit_7(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    nobody = f"127.0.0.1:{free_port()}"  # nothing listens there
    ran = run(*command, "--broker", nobody, cwd=tmp_path)
    assert ran.code == ExitCode.BROKER, ran
    line = one_error_line(ran.err)
    assert line.startswith("Error (BrokerError): cannot "), line
    assert ran.out == ""


def test_kafka_status_says_no_broker_answers(tmp_path: Path) -> None:
    port = free_port()
    ran = run("kafka", "status", "--port", str(port), "--json", cwd=tmp_path)
    assert ran.code == ExitCode.BROKER
    assert ran.json_lines() == [
        {"bootstrap": f"127.0.0.1:{port}", "answers": False, "pid": None, "home": ".kafka"}
    ]


def test_call_arguments_must_be_a_json_object() -> None:
    for text, says in (("[1, 2]", "must be a JSON object"), ("{nope", "not JSON")):
        ran = run("call", "echo", text)
        assert ran.code == ExitCode.USAGE and says in ran.err, ran
    from_stdin = run("call", "echo", "-", stdin="[3]")
    assert from_stdin.code == ExitCode.USAGE and "must be a JSON object" in from_stdin.err


def test_help_imports_no_dev_tooling_nor_kafka_clients() -> None:
    ran = run("-h", env=clean_env(PYTHONPROFILEIMPORTTIME="1"))
    assert ran.code == 0
    imported = {m.group(1) for m in re.finditer(r"\|\s+(\S+)$", ran.err, re.MULTILINE)}
    assert "stream_adapter.cli" in imported
    heavy = ("stream_adapter_dev.bench", "stream_adapter_dev.chaos", "stream_adapter_dev.broker")
    heavy += ("stream_adapter.stream", "aiokafka", "faust", "rich", "matplotlib", "quixstreams")
    assert not {m for m in imported if m.startswith(heavy)}


def test_lazy_commands_help_matches_their_own() -> None:
    for name, lazy in LAZY.items():
        command = lazy.load()
        assert command.name == name
        assert first_line(command) == lazy.short_help, name


def test_exit_codes_are_documented() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} | {code.meaning} |" in docs
    assert "docs/cli.md" in (ROOT / "README.md").read_text()


async def test_progress_is_written_now_and_then_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = [0]

    def describe(elapsed_s: float) -> str:
        return f"step {steps[0]} after {elapsed_s:.2f} s"

    seen = ""
    async with live_status(describe, every_s=0.01):
        for _ in range(500):  # 5 s at most
            steps[0] += 1
            seen += capsys.readouterr().err
            if seen.count("step") >= 2:
                break
            await asyncio.sleep(0.01)
    assert len(re.findall(r"^step \d+ after \d+\.\d\d s$", seen, re.MULTILINE)) >= 2, seen


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "say --ran or --not-run"),
        (("--ran", "--result", "{not json"), "not JSON"),
        (("--not-run", "--result", "1"), "--result goes with --ran"),
    ],
)
def test_approvals_resolve_checks_its_options_before_any_broker(
    args: tuple[str, ...], says: str
) -> None:
    port = free_port()  # nothing listens there: usage errors come first
    ran = run(
        "--broker", f"127.0.0.1:{port}", "approvals", "resolve", "a1", "--reviewer", "r", *args
    )
    assert ran.code == ExitCode.USAGE, ran.err
    assert says in ran.err
