"""`stream-adapter kafka`: a local Apache Kafka (KRaft) to develop and test against, one broker
or a cluster, started, stopped and reported on from its home folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from stream_adapter.commands import ExitCode, emit_one, note


@click.group()
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
    from stream_adapter_dev.broker import cluster, local

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
    from stream_adapter_dev.broker import cluster, local

    return cluster if isinstance(config, cluster.ClusterConfig) else local


def _secure_broker(home: Path, port: int, heap_mb: int, jars_dir: Path | None) -> Any:
    from stream_adapter_dev.broker import secure

    return secure.SecureBroker(home=home, port=port, heap_mb=heap_mb, jars_dir=jars_dir)


@kafka.command("start")
@_broker_options
def kafka_start(
    home: Path, port: int, heap_mb: int | None, jars_dir: Path | None, secure: bool, brokers: int
) -> None:
    """Start the broker or cluster (fetching jars and formatting storage on first use)."""
    from stream_adapter_dev.broker import local

    config = _broker_config(home, port, heap_mb, jars_dir, secure, brokers)
    if secure:
        from stream_adapter_dev.broker.secure import start as start_secure

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
    from stream_adapter_dev.broker import cluster, local

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
